//! Test fixtures: a onejob serving on port 0 ([`Server`]) and API keys, over the shared
//! fixtures of `onejob-fixtures` (a fresh database per test, and `postgres_and_sqlite_tests!`, its
//! `postgres_and_sqlite_tests!`, to run one test on PostgreSQL and SQLite).

use std::time::Duration;

use onejob::{
    app::App,
    config::{Config, DEMO_CONFIG},
    worker::WorkerHandle,
};
use onejob_client::{Client, RetryPolicy};
use onejob_domain::Principal;
use tokio::sync::oneshot;

pub use onejob_fixtures::Backend;
use onejob_fixtures::TestDatabase as Database;
pub(crate) use onejob_fixtures::postgres_and_sqlite_tests;

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
