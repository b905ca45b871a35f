//! Test fixtures of the API suite: a running onejob on port 0, the fake providers, API keys,
//! over the shared fixtures of `onejob-fixtures` (a fresh database per test, raw SQL, the
//! `postgres_and_sqlite_tests!` macro that runs one test body on PostgreSQL and on SQLite, and
//! `citus_tests!`, which runs the invariant tests' bodies on this process's Citus cluster).

use std::{
    net::SocketAddr,
    ops::Deref,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use std::time::Duration;

use onejob::{
    app::App,
    config::{Config, DEMO_CONFIG},
    store::Store,
    worker::WorkerHandle,
};
use onejob_domain::Principal;
use onejob_fake::{FakeServer, submissions::Submissions};
use reqwest::{Client, RequestBuilder, Response};
use serde_json::Value;
use tokio::sync::oneshot;

pub use onejob_fixtures::{Backend, postgres_admin_url};
pub(crate) use onejob_fixtures::{citus_tests, postgres_and_sqlite_tests};

/// A fresh, empty database that is removed when dropped: the shared
/// [`onejob_fixtures::TestDatabase`] (raw SQL, the dialect), and a store on it.
pub struct TestDatabase(onejob_fixtures::TestDatabase);

impl Deref for TestDatabase {
    type Target = onejob_fixtures::TestDatabase;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl TestDatabase {
    pub async fn create(backend: Backend) -> Self {
        TestDatabase(onejob_fixtures::TestDatabase::create(backend).await)
    }

    /// Opens a second, independent store (its own pool) on this database, migrated.
    pub async fn open_store(&self) -> Arc<dyn Store> {
        onejob::app::open_store(&self.url)
            .await
            .expect("open store")
    }
}

/// The demo configuration pointed at `url`.
pub fn test_config(url: &str) -> Config {
    let mut config = Config::from_toml(
        DEMO_CONFIG,
        "demo.toml".as_ref(),
        ".".into(),
        std::iter::empty(),
    )
    .expect("demo config parses");
    config.database = url.to_owned();
    config.listen = "127.0.0.1:0".parse().unwrap();
    config
}

/// The two fake providers of the demo kinds (`fake`, then `fake-backup`), as real servers.
pub struct Fakes {
    pub primary: FakeServer,
    pub backup: FakeServer,
    /// Side effects of verification runs, which are not attempts.
    verification: AtomicU64,
}

impl Fakes {
    pub async fn spawn() -> Fakes {
        Fakes {
            primary: FakeServer::spawn(([127, 0, 0, 1], 0).into()).await.unwrap(),
            backup: FakeServer::spawn(([127, 0, 0, 1], 0).into()).await.unwrap(),
            verification: AtomicU64::new(0),
        }
    }

    fn raw_total(&self) -> u64 {
        self.primary.submissions().total + self.backup.submissions().total
    }

    /// Side effects of attempts both fakes have seen (verification runs excluded).
    pub fn total(&self) -> u64 {
        self.raw_total() - self.verification.load(Ordering::SeqCst)
    }

    /// Polls one fake's side-effect log until `done` holds (or panics after `within`):
    /// upstream cancels are sent beside the answer, and a send under load lands late.
    pub async fn wait_submissions(
        server: &FakeServer,
        within: Duration,
        done: impl Fn(&Submissions) -> bool,
    ) -> Submissions {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let seen = server.submissions();
            if done(&seen) {
                return seen;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out; the fake saw {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Points the demo providers at these servers (forwarding an idempotency key) and makes
    /// the worker quick.
    pub fn configure(&self, config: &mut Config) {
        for provider in &mut config.providers {
            let server = match provider.name.as_str() {
                "fake" => &self.primary,
                _ => &self.backup,
            };
            provider.base_url = Some(server.base_url());
            provider.idempotency_header = Some("Idempotency-Key".into());
        }
        for kind in &mut config.kinds {
            kind.retry_backoff = Duration::from_millis(50);
        }
        config.worker.poll_interval = Duration::from_millis(100);
        config.worker.lease = Duration::from_secs(2);
        config.worker.shutdown_grace = Duration::from_millis(500);
    }
}

/// An `async-task` provider named `name` on the task API of the fake at `base` (its
/// submit and status endpoints, pointers and statuses), failing on `failed` only.
pub fn fake_task_api(name: &str, base: &str) -> onejob::config::ProviderConfig {
    let mut tasks = onejob::config::ProviderConfig::new(name, onejob::config::Adapter::AsyncTask);
    tasks.submit_url = Some(format!("{base}/v1/tasks"));
    tasks.status_url = Some(format!("{base}/v1/tasks/{{task_id}}"));
    tasks.task_id_pointer = Some("/task_id".into());
    tasks.status_pointer = Some("/status".into());
    tasks.result_pointer = Some("/result".into());
    tasks.succeeded = vec!["succeeded".into()];
    tasks.failed = vec!["failed".into()];
    tasks
}

/// A onejob serving on a loopback port.
pub struct TestApp {
    pub addr: SocketAddr,
    pub client: Client,
    pub store: Arc<dyn Store>,
    /// An API key for tenant `acme`, user `alice`.
    pub token: String,
    pub app: App,
    shutdown: Option<oneshot::Sender<()>>,
    worker: Option<WorkerHandle>,
}

impl TestApp {
    /// A onejob with the demo configuration on a fresh database.
    pub async fn spawn(db: &TestDatabase) -> TestApp {
        Self::spawn_with(db, |_| {}).await
    }

    /// Like [`TestApp::spawn`], with a chance to change the configuration first.
    pub async fn spawn_with(db: &TestDatabase, change: impl FnOnce(&mut Config)) -> TestApp {
        let mut config = test_config(&db.url);
        change(&mut config);
        Self::start(config, false).await
    }

    /// A onejob with a worker, its providers pointed at `fakes`, after `change`, with the
    /// backup fake certified (by a real `verify` run) for every kind.
    pub async fn running(
        db: &TestDatabase,
        fakes: &Fakes,
        change: impl FnOnce(&mut Config),
    ) -> TestApp {
        let app = Self::running_uncertified(db, fakes, change).await;
        let before = fakes.raw_total();
        for kind in ["chat.completion", "image.generate"] {
            assert!(
                app.certify("fake-backup", kind).await,
                "the backup fake passes {kind}"
            );
        }
        fakes
            .verification
            .fetch_add(fakes.raw_total() - before, Ordering::SeqCst);
        app
    }

    /// Like [`TestApp::running`], without any certificate.
    pub async fn running_uncertified(
        db: &TestDatabase,
        fakes: &Fakes,
        change: impl FnOnce(&mut Config),
    ) -> TestApp {
        let mut config = test_config(&db.url);
        fakes.configure(&mut config);
        change(&mut config);
        Self::start(config, true).await
    }

    /// Runs `onejob verify` for `provider` and `kind` in-process; whether it passed.
    pub async fn certify(&self, provider: &str, kind: &str) -> bool {
        self.verify(provider, kind).await.passed
    }

    /// Runs `onejob verify` in-process and returns the report.
    pub async fn verify(&self, provider: &str, kind: &str) -> onejob::verify::VerifyReport {
        let kind = self.app.jobs.kinds().get(kind).unwrap().clone();
        let adapter = self.app.providers.get(provider).unwrap().clone();
        let (report, _) = self
            .app
            .jobs
            .verify(&kind, provider, &*adapter, Default::default())
            .await
            .unwrap();
        report
    }

    async fn start(config: Config, with_worker: bool) -> TestApp {
        let app = App::open(config).await.expect("app opens");
        let listener = app.bind().await.expect("bind");
        let addr = listener.local_addr().unwrap();
        let store = app.store.clone();
        let worker = with_worker.then(|| app.spawn_worker());
        let (tx, rx) = oneshot::channel();
        let serving = app.clone();
        tokio::spawn(async move {
            serving
                .serve(listener, async {
                    let _ = rx.await;
                })
                .await
        });
        let token = create_key(&*store, "acme", "alice", false).await;
        TestApp {
            addr,
            client: Client::new(),
            store,
            token,
            app,
            shutdown: Some(tx),
            worker,
        }
    }

    /// Stops the worker the way `onejob` does on SIGTERM.
    pub async fn stop_worker(&mut self) {
        if let Some(worker) = self.worker.take() {
            worker.shutdown().await;
        }
    }

    /// Submits and returns the job view, asserting a 201.
    pub async fn create(&self, key: &str, body: &Value) -> Value {
        let (status, job) = json(self.submit(key, body).send().await.unwrap()).await;
        assert_eq!(status, 201, "{job}");
        job
    }

    /// The job view.
    pub async fn job(&self, id: &str) -> Value {
        let (status, job) = json(self.get(&format!("/v1/jobs/{id}")).send().await.unwrap()).await;
        assert_eq!(status, 200, "{job}");
        job
    }

    /// The job's attempts.
    pub async fn attempts(&self, id: &str) -> Vec<Value> {
        let (status, body) = json(
            self.get(&format!("/v1/jobs/{id}/attempts"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        body["attempts"].as_array().unwrap().clone()
    }

    /// The job's attempts as an operator key of its owner sees them (with `worker` and the
    /// errors' `internal` details, which the owner's normal key is not shown).
    pub async fn operator_attempts(&self, id: &str) -> Vec<Value> {
        let operator = create_key(&*self.store, "acme", "alice", true).await;
        let (status, body) = json(
            self.get_as(&operator, &format!("/v1/jobs/{id}/attempts"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        body["attempts"].as_array().unwrap().clone()
    }

    /// The job's whole event log, oldest first (following `next_after` page by page).
    pub async fn events(&self, id: &str) -> Vec<Value> {
        let mut events = Vec::new();
        let mut path = format!("/v1/jobs/{id}/events?limit=500");
        loop {
            let (status, body) = json(self.get(&path).send().await.unwrap()).await;
            assert_eq!(status, 200, "{body}");
            events.extend(body["events"].as_array().unwrap().iter().cloned());
            match body["next_after"].as_i64() {
                Some(after) => path = format!("/v1/jobs/{id}/events?limit=500&after={after}"),
                None => return events,
            }
        }
    }

    /// Every verification run, newest first, as an operator key of tenant `acme` reads
    /// them (`GET /v1/certificates` is operators only), following `next_before`.
    pub async fn certificates(&self) -> Vec<Value> {
        let operator = create_key(&*self.store, "acme", "ops", true).await;
        let mut runs = Vec::new();
        let mut path = "/v1/certificates?limit=500".to_owned();
        loop {
            let (status, body) = json(self.get_as(&operator, &path).send().await.unwrap()).await;
            assert_eq!(status, 200, "{body}");
            runs.extend(body["certificates"].as_array().unwrap().iter().cloned());
            match body["next_before"].as_str() {
                Some(before) => path = format!("/v1/certificates?limit=500&before={before}"),
                None => return runs,
            }
        }
    }

    /// Polls the job until `done` holds (or panics after `within`).
    pub async fn wait_job(
        &self,
        id: &str,
        within: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let job = self.job(id).await;
            if done(&job) {
                return job;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting; job is {job}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Polls the job's attempts until there are some and `done` holds.
    pub async fn wait_attempts(
        &self,
        id: &str,
        within: Duration,
        done: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let attempts = self.attempts(id).await;
            if !attempts.is_empty() && done(&attempts) {
                return attempts;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out; attempts are {attempts:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// `POST /v1/jobs` with the default key, a JSON body and an idempotency key.
    pub fn submit(&self, key: &str, body: &Value) -> RequestBuilder {
        self.submit_as(&self.token, key, body)
    }

    pub fn submit_as(&self, token: &str, key: &str, body: &Value) -> RequestBuilder {
        self.client
            .post(self.url("/v1/jobs"))
            .bearer_auth(token)
            .header("Idempotency-Key", key)
            .json(body)
    }

    pub fn get_as(&self, token: &str, path: &str) -> RequestBuilder {
        self.client.get(self.url(path)).bearer_auth(token)
    }

    pub fn get(&self, path: &str) -> RequestBuilder {
        self.get_as(&self.token, path)
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Issues an API key straight into the store.
pub async fn create_key(store: &dyn Store, tenant: &str, user: &str, operator: bool) -> String {
    let issued = onejob::api_key::issue(Principal::new(tenant, user), operator);
    store
        .insert_api_key(issued.record)
        .await
        .expect("insert key");
    issued.token
}

/// A response's status and JSON body.
pub async fn json(response: Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

/// A submission of a `chat.completion` job with `prompt`, by `acme`/`alice` (the owner of
/// [`TestApp::token`]), straight to a store.
pub fn new_job(key: &str, prompt: &str) -> onejob::store::NewJob {
    let params = serde_json::json!({ "prompt": prompt });
    onejob::store::NewJob {
        id: uuid::Uuid::now_v7(),
        owner: Principal::new("acme", "alice"),
        key_hash: onejob_domain::IdempotencyKey::parse(key).unwrap().hash(),
        kind: "chat.completion".into(),
        fingerprint: onejob_domain::Fingerprint::of("chat.completion", &params, None),
        params,
        request_body: None,
        run: None,
        actor: "test".into(),
        start: None,
    }
}

/// A valid chat submission.
pub fn chat(prompt: &str) -> Value {
    serde_json::json!({ "kind": "chat.completion", "params": { "prompt": prompt } })
}
