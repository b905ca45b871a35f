//! The fixtures every onejob test suite that talks to a database shares (the store
//! conformance suite, the API suite, the client's suite): which backend a test runs on
//! ([`Backend`]), the macros that run one test body on several ([`postgres_and_sqlite_tests!`],
//! [`citus_tests!`], [`every_backend_tests!`]), a fresh database per test that is removed
//! when dropped ([`TestDatabase`]), and raw SQL for the checks only the database can make.
//!
//! PostgreSQL is taken from `ONEJOB_TEST_POSTGRES` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`). Citus is a cluster of the test process's
//! own ([`citus`]: a coordinator and two workers from `initdb`, started by the first test
//! that needs it). A missing PostgreSQL or Citus fails the tests: they are never skipped.

use std::path::PathBuf;

use onejob_chaos::citus::CitusCluster;
use sqlx::{Connection, Executor, PgConnection, SqliteConnection};
use tokio::sync::OnceCell;

/// Which database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The PostgreSQL server of `ONEJOB_TEST_POSTGRES`, a database of its own per test.
    Postgres,
    /// A SQLite file in a temporary directory.
    Sqlite,
    /// A database on this process's Citus cluster ([`citus`]), PostgreSQL's dialect.
    Citus,
}

impl Backend {
    /// Whether the database speaks PostgreSQL (PostgreSQL itself, or Citus).
    pub fn is_postgres(self) -> bool {
        matches!(self, Backend::Postgres | Backend::Citus)
    }
}

/// Runs each listed async test body (a `fn(Backend) -> impl Future`) once per backend, as
/// `postgres::name` and `sqlite::name`.
#[macro_export]
macro_rules! postgres_and_sqlite_tests {
    ($($name:ident),+ $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::Backend::Postgres).await
                }
            )+
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::Backend::Sqlite).await
                }
            )+
        }
    };
}

/// Runs each listed async test body on this process's Citus cluster, as `citus::name`
/// (beside a [`postgres_and_sqlite_tests!`] of the same bodies).
#[macro_export]
macro_rules! citus_tests {
    ($($name:ident),+ $(,)?) => {
        mod citus {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::Backend::Citus).await
                }
            )+
        }
    };
}

/// Runs each listed async test body on PostgreSQL, SQLite and Citus alike.
#[macro_export]
macro_rules! every_backend_tests {
    ($($name:ident),+ $(,)?) => {
        $crate::postgres_and_sqlite_tests!($($name),+);
        $crate::citus_tests!($($name),+);
    };
}

/// This process's Citus cluster, stopped once the process has exited.
static CITUS: OnceCell<CitusCluster> = OnceCell::const_new();

/// This process's Citus cluster (a coordinator and two workers), started by the first
/// caller; panics, saying how to install it, when Citus is missing.
pub async fn citus() -> &'static CitusCluster {
    CITUS
        .get_or_init(|| async {
            tokio::task::spawn_blocking(|| CitusCluster::start_for_this_process(2))
                .await
                .expect("start the Citus cluster")
        })
        .await
}

/// The URL of the PostgreSQL database tests connect to for creating and dropping theirs.
pub fn postgres_admin_url() -> String {
    std::env::var("ONEJOB_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// The URL of database `name` on the server of [`postgres_admin_url`].
pub fn database_url(name: &str) -> String {
    let mut url = url::Url::parse(&postgres_admin_url()).expect("ONEJOB_TEST_POSTGRES is a URL");
    url.set_path(name);
    url.to_string()
}

/// A connection to the admin database (panics, naming the URL, when PostgreSQL is missing).
pub async fn admin() -> PgConnection {
    let admin = postgres_admin_url();
    PgConnection::connect(&admin)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL is required for the tests ({admin}): {e}"))
}

/// A fresh database that is removed when dropped (a PostgreSQL database, or a SQLite file
/// in a temporary directory).
pub struct TestDatabase {
    /// The database it is.
    pub backend: Backend,
    /// Its URL, for onejob's store or config.
    pub url: String,
    /// Its name (PostgreSQL's database name; unique per test for SQLite too).
    pub name: String,
    _dir: Option<tempfile::TempDir>,
}

impl TestDatabase {
    /// A new, empty database.
    pub async fn create(backend: Backend) -> Self {
        Self::create_from(backend, None).await
    }

    /// A new database; on PostgreSQL a copy of `template` (a database closed to
    /// connections) when given, elsewhere empty (on Citus with the `citus` extension on
    /// every node, the workers registered).
    pub async fn create_from(backend: Backend, template: Option<&str>) -> Self {
        let name = format!("onejob_test_{}", uuid::Uuid::new_v4().simple());
        match backend {
            Backend::Postgres => {
                let statement = match template {
                    Some(template) => format!("CREATE DATABASE {name} TEMPLATE {template}"),
                    None => format!("CREATE DATABASE {name}"),
                };
                admin()
                    .await
                    .execute(sqlx::AssertSqlSafe(statement))
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
                Self {
                    backend,
                    url: cluster.url(&name),
                    name,
                    _dir: None,
                }
            }
        }
    }

    /// Runs a scalar SQL query that both dialects understand, returning an i64.
    pub async fn scalar(&self, sql: &'static str) -> i64 {
        match self.backend {
            Backend::Postgres | Backend::Citus => {
                let mut conn = PgConnection::connect(&self.url).await.unwrap();
                sqlx::query_scalar::<_, i64>(sql)
                    .fetch_one(&mut conn)
                    .await
                    .unwrap()
            }
            Backend::Sqlite => {
                let mut conn = SqliteConnection::connect(&self.url).await.unwrap();
                sqlx::query_scalar::<_, i64>(sql)
                    .fetch_one(&mut conn)
                    .await
                    .unwrap()
            }
        }
    }

    /// Executes one statement (written for this backend's dialect) and returns rows affected,
    /// or the database's error message. On PostgreSQL it runs in an explicit transaction, so
    /// that the commit (and the release of its row locks) has happened when this returns.
    pub async fn exec(&self, sql: &'static str) -> Result<u64, String> {
        match self.backend {
            Backend::Postgres | Backend::Citus => {
                let mut conn = PgConnection::connect(&self.url).await.unwrap();
                let mut tx = conn.begin().await.unwrap();
                let result = sqlx::query(sql)
                    .execute(&mut *tx)
                    .await
                    .map(|r| r.rows_affected())
                    .map_err(|e| e.to_string());
                tx.commit().await.unwrap();
                result
            }
            Backend::Sqlite => {
                let mut conn = SqliteConnection::connect(&self.url).await.unwrap();
                sqlx::query(sql)
                    .execute(&mut conn)
                    .await
                    .map(|r| r.rows_affected())
                    .map_err(|e| e.to_string())
            }
        }
    }

    /// Like [`TestDatabase::exec`], for a statement built at run time.
    pub async fn exec_sql(&self, sql: String) -> Result<u64, String> {
        let sql: &'static str = Box::leak(sql.into_boxed_str());
        self.exec(sql).await
    }

    /// Picks the statement for this backend.
    pub fn dialect(&self, postgres: &'static str, sqlite: &'static str) -> &'static str {
        match self.backend {
            Backend::Postgres | Backend::Citus => postgres,
            Backend::Sqlite => sqlite,
        }
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
