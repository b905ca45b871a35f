//! The backend fixture of the store suite: a fresh database per test (a PostgreSQL database
//! copied from a migrated template, a migrated database on this process's Citus cluster, or
//! a SQLite file in a temporary directory), with the shared fixtures of `onejob-fixtures`
//! (the backends, `every_backend_tests!`, raw SQL for the checks the
//! [`Store`] trait cannot make), and the small builders the noun files share (a job, an
//! attempt start, an attempt in a given state).
//!
//! Copying a migrated template instead of migrating every database keeps the suite's run
//! time down: the template is built once per test process, named after the process, and
//! dropped by the next run once that process is gone.

use std::{ops::Deref, sync::Arc, time::Duration};

use onejob::store::{
    AttemptStart, FailOutcome, Intake, Resolution, RetryPolicy, StartOutcome, Store, StoreOptions,
    UnknownBy, Unsuccessful, postgres::PgStore,
};
use onejob_domain::Principal;
/// Every store test runs on PostgreSQL, SQLite and Citus.
pub(crate) use onejob_fixtures::every_backend_tests;
pub use onejob_fixtures::{Backend, citus};
use onejob_fixtures::{admin, database_url};
use serde_json::json;
use sqlx::Executor;
use tokio::sync::OnceCell;
use uuid::Uuid;

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

/// A fresh database, already migrated, that is removed when dropped: the shared
/// [`onejob_fixtures::TestDatabase`] (raw SQL, the dialect), made from this suite's template.
pub struct TestDatabase(onejob_fixtures::TestDatabase);

impl Deref for TestDatabase {
    type Target = onejob_fixtures::TestDatabase;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl TestDatabase {
    pub async fn create(backend: Backend) -> Self {
        let template = match backend {
            Backend::Postgres => Some(template().await),
            Backend::Sqlite | Backend::Citus => None,
        };
        let db = onejob_fixtures::TestDatabase::create_from(backend, template).await;
        if backend == Backend::Citus {
            // No template on a cluster: migrate (and so distribute) each database.
            let store = PgStore::connect(&db.url, &StoreOptions::default())
                .await
                .expect("open the Citus database");
            assert!(store.is_citus(), "the database has the citus extension");
            store.migrate().await.expect("migrate the Citus database");
            store.pool().close().await;
        }
        TestDatabase(db)
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
        run: None,
        actor: "test".into(),
        start: None,
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
