//! The backend fixture of the store suite: a fresh database per test (a PostgreSQL database
//! copied from a migrated template, a database on a local Citus cluster of this process's
//! own — a coordinator and two workers, started by the first test that needs it — or a
//! SQLite file in a temporary directory), raw SQL for
//! the checks the [`Store`] trait cannot make, the `backend_tests!` macro that runs one test
//! body on each backend, and the small builders the noun files share (a job, an attempt
//! start, an attempt in a given state).
//!
//! Copying a migrated template instead of migrating every database keeps the suite's run
//! time down: the template is built once per test process, named after the process, and
//! dropped by the next run once that process is gone.

use std::{path::PathBuf, sync::Arc, time::Duration};

use onejob::store::{
    AttemptStart, FailOutcome, Intake, Resolution, RetryPolicy, StartOutcome, Store, StoreOptions,
    UnknownBy, Unsuccessful, postgres::PgStore, sqlite::SqliteStore,
};
use onejob_chaos::citus::CitusCluster;
use onejob_domain::Principal;
use serde_json::json;
use sqlx::{Connection, Executor, PgConnection};
use tokio::sync::OnceCell;
use uuid::Uuid;

/// Which database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
    /// A Citus cluster (PostgreSQL's dialect), its job tables distributed by tenant.
    Citus,
}

impl Backend {
    /// Whether the database speaks PostgreSQL (PostgreSQL itself, or Citus).
    pub fn is_postgres(self) -> bool {
        matches!(self, Backend::Postgres | Backend::Citus)
    }
}

/// Runs each listed async test body (a `fn(Backend) -> impl Future`) once per backend.
macro_rules! backend_tests {
    ($($name:ident),+ $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::support::Backend::Postgres).await
                }
            )+
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::support::Backend::Sqlite).await
                }
            )+
        }
        mod citus {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::support::Backend::Citus).await
                }
            )+
        }
    };
}
pub(crate) use backend_tests;

fn postgres_admin_url() -> String {
    std::env::var("ONEJOB_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

fn database_url(name: &str) -> String {
    let mut url = url::Url::parse(&postgres_admin_url()).expect("admin url");
    url.set_path(name);
    url.to_string()
}

async fn admin() -> PgConnection {
    let admin = postgres_admin_url();
    PgConnection::connect(&admin)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL is required for the tests ({admin}): {e}"))
}

const TEMPLATE_PREFIX: &str = "onejob_store_template_";

/// The migrated PostgreSQL database this process copies for each test.
static TEMPLATE: OnceCell<String> = OnceCell::const_new();

/// Builds this process's template (dropping those of test processes that are gone): a
/// database migrated by [`Store::migrate`], then closed to connections so that `CREATE
/// DATABASE … TEMPLATE` can copy it while tests run side by side.
async fn template() -> &'static str {
    TEMPLATE
        .get_or_init(|| async {
            let mut conn = admin().await;
            let stale: Vec<String> = sqlx::query_scalar(
                "SELECT datname FROM pg_database WHERE datname LIKE 'onejob\\_store\\_template\\_%'",
            )
            .fetch_all(&mut conn)
            .await
            .expect("list templates");
            for name in stale {
                let pid = name.trim_start_matches(TEMPLATE_PREFIX);
                if !std::path::Path::new("/proc").join(pid).exists() {
                    let _ = conn
                        .execute(sqlx::AssertSqlSafe(format!(
                            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                        )))
                        .await;
                }
            }
            let name = format!("{TEMPLATE_PREFIX}{}", std::process::id());
            conn.execute(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            )))
            .await
            .expect("drop an old template");
            conn.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .await
                .expect("create the template");
            {
                let store = PgStore::connect(&database_url(&name), &StoreOptions::default())
                    .await
                    .expect("open the template");
                store.migrate().await.expect("migrate the template");
                store.pool().close().await;
            }
            // The store's listeners may still hold (or reopen) connections: refuse new ones,
            // then end the rest.
            conn.execute(sqlx::AssertSqlSafe(format!(
                "ALTER DATABASE {name} ALLOW_CONNECTIONS false"
            )))
            .await
            .expect("close the template");
            conn.execute(sqlx::AssertSqlSafe(format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
            )))
            .await
            .expect("end the template's connections");
            name
        })
        .await
}

/// This process's Citus cluster: a coordinator and two workers, stopped once the process
/// has exited.
static CITUS: OnceCell<CitusCluster> = OnceCell::const_new();

/// This process's Citus cluster, started by the first caller.
pub async fn citus() -> &'static CitusCluster {
    CITUS
        .get_or_init(|| async {
            tokio::task::spawn_blocking(|| CitusCluster::start_for_this_process(2))
                .await
                .expect("start the Citus cluster")
        })
        .await
}

/// A fresh database, already migrated, that is removed when dropped.
pub struct TestDatabase {
    pub backend: Backend,
    pub url: String,
    name: String,
    _dir: Option<tempfile::TempDir>,
}

impl TestDatabase {
    pub async fn create(backend: Backend) -> Self {
        let name = format!("onejob_test_{}", Uuid::new_v4().simple());
        match backend {
            Backend::Postgres => {
                let template = template().await;
                let mut conn = admin().await;
                conn.execute(sqlx::AssertSqlSafe(format!(
                    "CREATE DATABASE {name} TEMPLATE {template}"
                )))
                .await
                .expect("create test database");
                Self {
                    backend,
                    url: database_url(&name),
                    name,
                    _dir: None,
                }
            }
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let path: PathBuf = dir.path().join("onejob.db");
                Self {
                    backend,
                    url: format!("sqlite://{}", path.display()),
                    name,
                    _dir: Some(dir),
                }
            }
            Backend::Citus => {
                let cluster = citus().await;
                cluster.create_database(&name).await;
                let url = cluster.url(&name);
                let store = PgStore::connect(&url, &StoreOptions::default())
                    .await
                    .expect("open the Citus database");
                assert!(store.is_citus(), "the database has the citus extension");
                store.migrate().await.expect("migrate the Citus database");
                store.pool().close().await;
                Self {
                    backend,
                    url,
                    name,
                    _dir: None,
                }
            }
        }
    }

    /// Opens a store (its own pool) on this database, migrated.
    pub async fn open_store(&self) -> Arc<dyn Store> {
        self.open_store_with(&StoreOptions::default()).await
    }

    /// Like [`TestDatabase::open_store`], with these pool settings.
    pub async fn open_store_with(&self, options: &StoreOptions) -> Arc<dyn Store> {
        let store = onejob::store::open(&self.url, options)
            .await
            .expect("open store");
        store.migrate().await.expect("migrate");
        store
    }

    /// Runs a scalar SQL query that both dialects understand, returning an i64.
    pub async fn scalar(&self, sql: &'static str) -> i64 {
        match self.backend {
            Backend::Postgres | Backend::Citus => {
                let store = PgStore::connect(&self.url, &Default::default())
                    .await
                    .unwrap();
                sqlx::query_scalar::<_, i64>(sql)
                    .fetch_one(store.pool())
                    .await
                    .unwrap()
            }
            Backend::Sqlite => {
                let store = SqliteStore::connect(&self.url, &Default::default())
                    .await
                    .unwrap();
                sqlx::query_scalar::<_, i64>(sql)
                    .fetch_one(store.pool())
                    .await
                    .unwrap()
            }
        }
    }

    /// Executes one statement (written for this backend's dialect) and returns rows affected,
    /// or the database's error message.
    pub async fn exec(&self, sql: &'static str) -> Result<u64, String> {
        match self.backend {
            Backend::Postgres | Backend::Citus => {
                // In an explicit transaction, so that the commit (and the release of its
                // row locks) has happened when this returns.
                let store = PgStore::connect(&self.url, &Default::default())
                    .await
                    .unwrap();
                let mut tx = store.pool().begin().await.unwrap();
                let result = sqlx::query(sql)
                    .execute(&mut *tx)
                    .await
                    .map(|r| r.rows_affected())
                    .map_err(|e| e.to_string());
                tx.commit().await.unwrap();
                result
            }
            Backend::Sqlite => {
                let store = SqliteStore::connect(&self.url, &Default::default())
                    .await
                    .unwrap();
                sqlx::query(sql)
                    .execute(store.pool())
                    .await
                    .map(|r| r.rows_affected())
                    .map_err(|e| e.to_string())
            }
        }
    }

    /// Picks the statement for this backend.
    pub fn dialect(&self, postgres: &'static str, sqlite: &'static str) -> &'static str {
        match self.backend {
            Backend::Postgres | Backend::Citus => postgres,
            Backend::Sqlite => sqlite,
        }
    }

    /// Moves every job's `updated_at` an hour back (to make finished jobs old for pruning).
    pub async fn age_jobs(&self) {
        self.exec(self.dialect(
            "UPDATE jobs SET updated_at = now() - interval '1 hour'",
            "UPDATE jobs SET updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-3600 seconds')",
        ))
        .await
        .unwrap();
    }

    /// Makes every `unknown` attempt due for reconciliation again.
    pub async fn reconcile_now(&self) {
        self.exec(self.dialect(
            "UPDATE attempts SET reconcile_at = now() - interval '1 second' WHERE state = 'unknown'",
            "UPDATE attempts SET reconcile_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 seconds') \
             WHERE state = 'unknown'",
        ))
        .await
        .unwrap();
    }

    /// Seconds from now until the latest `reconcile_at` of an `unknown` attempt, rounded.
    pub async fn reconcile_in(&self) -> i64 {
        self.scalar(self.dialect(
            "SELECT CAST(round(EXTRACT(EPOCH FROM (max(reconcile_at) - now()))) AS BIGINT) \
             FROM attempts WHERE state = 'unknown'",
            "SELECT CAST(round((julianday(max(reconcile_at)) - julianday('now')) * 86400) AS INTEGER) \
             FROM attempts WHERE state = 'unknown'",
        ))
        .await
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if self.backend == Backend::Sqlite {
            return;
        }
        let name = self.name.clone();
        let citus = (self.backend == Backend::Citus)
            .then(|| CITUS.get())
            .flatten();
        // Drop from a plain thread: Drop cannot await, and the test's runtime may be gone.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                if let Some(cluster) = citus {
                    cluster.drop_database(&name).await;
                } else if let Ok(mut conn) = PgConnection::connect(&postgres_admin_url()).await {
                    let _ = conn
                        .execute(sqlx::AssertSqlSafe(format!(
                            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                        )))
                        .await;
                }
            });
        })
        .join();
    }
}

/// The owner of every job [`new_job`] builds.
pub fn alice() -> Principal {
    Principal::new("acme", "alice")
}

/// A submission of a `chat.completion` job with `prompt`, by `acme`/`alice`.
pub fn new_job(key: &str, prompt: &str) -> onejob::store::NewJob {
    new_job_of(alice(), "chat.completion", key, prompt)
}

/// A submission of a `kind` job with `prompt`, by `owner`.
pub fn new_job_of(owner: Principal, kind: &str, key: &str, prompt: &str) -> onejob::store::NewJob {
    let params = json!({ "prompt": prompt });
    onejob::store::NewJob {
        id: Uuid::now_v7(),
        owner,
        key_hash: onejob_domain::IdempotencyKey::parse(key).unwrap().hash(),
        kind: kind.into(),
        fingerprint: onejob_domain::Fingerprint::of(kind, &params, None),
        params,
        request_body: None,
        actor: "test".into(),
    }
}

/// A new job of alice's under `key`.
pub async fn created(store: &dyn Store, key: &str) -> Uuid {
    match store.create_or_replay(new_job(key, key)).await.unwrap() {
        Intake::Created(job) => job.id,
        other => panic!("expected a new job, got {other:?}"),
    }
}

/// A start of the job's next attempt on `provider` by `test-worker`, with 30 s of lease and
/// deadline and three attempts allowed.
pub fn start_for(
    job_id: Uuid,
    expected_attempts: i32,
    provider: &str,
    hedge: bool,
) -> AttemptStart {
    AttemptStart {
        job_id,
        expected_attempts,
        provider: provider.into(),
        hedge,
        worker: "test-worker".into(),
        lease: Duration::from_secs(30),
        timeout: Duration::from_secs(30),
        max_attempts: 3,
        upstream_key: format!("onejob:{job_id}"),
    }
}

/// The id of the attempt `start` started (panics if refused).
pub async fn started(store: &dyn Store, start: &AttemptStart) -> Uuid {
    match store.start_attempt(start).await.unwrap() {
        StartOutcome::Started(attempt) => attempt.id,
        StartOutcome::Refused(reason) => panic!("refused: {reason:?}"),
    }
}

/// Three attempts, the next one due at once.
pub const RETRY: RetryPolicy = RetryPolicy {
    max_attempts: 3,
    backoff: Duration::ZERO,
};

/// A job with one attempt made `unknown` by its worker.
pub async fn unknown_attempt(store: &dyn Store, key: &str) -> (Uuid, Uuid) {
    let job_id = created(store, key).await;
    let attempt = started(store, &start_for(job_id, 0, "a", false)).await;
    assert!(
        store
            .mark_unknown(attempt, &json!({"reason": "deadline"}), UnknownBy::Worker)
            .await
            .unwrap()
    );
    (job_id, attempt)
}

/// The worker's definite failure of its attempt (`{"message": "no"}`, under [`RETRY`]).
pub async fn fail(store: &dyn Store, attempt: Uuid) -> FailOutcome {
    store
        .fail_attempt(
            attempt,
            Unsuccessful::Failed,
            &json!({"message": "no"}),
            RETRY,
            &Resolution::worker(),
        )
        .await
        .unwrap()
}
