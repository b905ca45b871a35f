//! Test fixtures: a fresh database ([`Database`]), a onejob serving on port 0
//! ([`Server`]), API keys, and `both_backends!` to run one test on PostgreSQL and SQLite.

use std::{path::PathBuf, time::Duration};

use onejob::{
    app::App,
    config::{Config, DEMO_CONFIG},
    worker::WorkerHandle,
};
use onejob_client::{Client, RetryPolicy};
use onejob_domain::Principal;
use sqlx::{Connection, Executor, PgConnection};
use tokio::sync::oneshot;

/// Which database a server runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

/// Runs each listed async test body (`fn(Backend) -> impl Future`) on both databases.
macro_rules! both_backends {
    ($($name:ident),+ $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::server::Backend::Postgres).await
                }
            )+
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::server::Backend::Sqlite).await
                }
            )+
        }
    };
}
pub(crate) use both_backends;

fn postgres_admin_url() -> String {
    std::env::var("ONEJOB_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// A fresh, empty database, removed when dropped.
pub struct Database {
    pub url: String,
    postgres_name: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

impl Database {
    pub async fn create(backend: Backend) -> Database {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let path: PathBuf = dir.path().join("onejob.db");
                Database {
                    url: format!("sqlite://{}", path.display()),
                    postgres_name: None,
                    _dir: Some(dir),
                }
            }
            Backend::Postgres => {
                let admin = postgres_admin_url();
                let name = format!("onejob_client_{}", uuid::Uuid::new_v4().simple());
                let mut conn = PgConnection::connect(&admin).await.unwrap_or_else(|e| {
                    panic!("PostgreSQL is required for the tests ({admin}): {e}")
                });
                conn.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .await
                    .expect("create test database");
                let (base, _) = admin.rsplit_once('/').expect("admin url has a path");
                Database {
                    url: format!("{base}/{name}"),
                    postgres_name: Some(name),
                    _dir: None,
                }
            }
        }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let Some(name) = self.postgres_name.take() else {
            return;
        };
        // From a plain thread: Drop cannot await, and the test's runtime may be gone.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                if let Ok(mut conn) = PgConnection::connect(&postgres_admin_url()).await {
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

/// A onejob with the demo configuration serving on a loopback port.
pub struct Server {
    /// Its base URL.
    pub url: String,
    /// An API key of tenant `acme`, user `alice`.
    pub token: String,
    pub app: App,
    shutdown: Option<oneshot::Sender<()>>,
    _worker: Option<WorkerHandle>,
    _db: Database,
}

impl Server {
    /// A onejob with a worker on `backend`: submitted jobs run on the bundled fakes.
    pub async fn running(backend: Backend) -> Server {
        Self::start(backend, true, |_| {}).await
    }

    /// A onejob without a worker: submitted jobs stay pending.
    pub async fn idle(backend: Backend) -> Server {
        Self::start(backend, false, |_| {}).await
    }

    /// A onejob on `backend`, with a worker if `worker`, after `change` to its config.
    pub async fn start(backend: Backend, worker: bool, change: impl FnOnce(&mut Config)) -> Server {
        let db = Database::create(backend).await;
        let mut config = Config::from_toml(
            DEMO_CONFIG,
            "demo.toml".as_ref(),
            ".".into(),
            std::iter::empty(),
        )
        .expect("the demo config parses");
        config.database = db.url.clone();
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.worker.poll_interval = Duration::from_millis(100);
        change(&mut config);
        let app = App::open(config).await.expect("onejob opens");
        let listener = app.bind().await.expect("bind");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let worker = worker.then(|| app.spawn_worker());
        let (tx, rx) = oneshot::channel();
        let serving = app.clone();
        tokio::spawn(async move {
            serving
                .serve(listener, async {
                    let _ = rx.await;
                })
                .await
        });
        let mut server = Server {
            url,
            token: String::new(),
            app,
            shutdown: Some(tx),
            _worker: worker,
            _db: db,
        };
        server.token = server.key("alice", false).await;
        server
    }

    /// Issues an API key of tenant `acme` for `user`.
    pub async fn key(&self, user: &str, operator: bool) -> String {
        let issued = onejob::api_key::issue(Principal::new("acme", user), operator);
        self.app
            .store
            .insert_api_key(issued.record)
            .await
            .expect("insert key");
        issued.token
    }

    /// A client acting as `alice`.
    pub fn client(&self) -> Client {
        self.client_as(&self.token)
    }

    /// A client acting with `token`, resending quickly.
    pub fn client_as(&self, token: &str) -> Client {
        Client::builder(&self.url, token)
            .retry_policy(RetryPolicy::default().initial_backoff(Duration::from_millis(20)))
            .build()
            .expect("client builds")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}
