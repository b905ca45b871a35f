//! The configs in `examples/`, each started as its header says and sent one job: a copy of
//! the directory in a temporary one, the real `onejob serve` (and `onejob worker`) with
//! `--config`, a key from `onejob keys create --config`, a job over HTTP that must succeed.
//!
//! Only what must differ on a test machine changes: the listen ports (`ONEJOB_LISTEN`,
//! `ONEJOB_WORKER__LISTEN`: port 0, the bound address read back from the node's log, so no
//! other test can take the port in between), the PostgreSQL database (`ONEJOB_DATABASE`, a fresh
//! test database) and an upstream's address (replaced in the file by a [`FakeServer`]'s,
//! and the replacement must find its text). SQLite files are the examples' own relative
//! paths, created in the temporary directory the commands run in.
//! [`every_example_directory_has_a_test`] keeps a new example from going untested.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use onejob_fake::FakeServer;
use reqwest::Client;
use serde_json::{Value, json};

use crate::{
    cli::{onejob, output, serving_addr},
    helpers::{Backend, TestDatabase, json},
};

/// The example directories with a test below, sorted.
const TESTED: [&str; 5] = [
    "async-task",
    "openai-chat",
    "postgres",
    "reference",
    "sqlite-fake",
];

/// How long a node may take to answer `/readyz`, and a job to finish.
const WITHIN: Duration = Duration::from_secs(60);

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

#[test]
fn every_example_directory_has_a_test() {
    let mut found: Vec<String> = std::fs::read_dir(examples_dir())
        .expect("read examples/")
        .map(|entry| entry.expect("examples/ entry"))
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    assert_eq!(
        found, TESTED,
        "every directory in examples/ needs a test in tests/api/examples.rs (and TESTED)"
    );
    for name in TESTED {
        assert!(
            examples_dir().join(name).join("onejob.toml").is_file(),
            "examples/{name} has no onejob.toml"
        );
    }
}

/// No dead ends: each example says what it shows and how to run it, and each provider it
/// declares is used by a kind (a kind naming an undeclared one fails at start, below).
#[test]
fn every_example_has_a_header_and_no_unused_provider() {
    for name in TESTED {
        let dir = examples_dir().join(name);
        let text = std::fs::read_to_string(dir.join("onejob.toml")).expect("read onejob.toml");
        assert!(
            text.starts_with("# ") && text.contains("Run it"),
            "examples/{name}/onejob.toml needs a comment header saying what it shows and how \
             to run it"
        );
        let config = onejob::config::Config::from_toml(
            &text,
            &dir.join("onejob.toml"),
            dir.clone(),
            std::iter::empty(),
        )
        .unwrap_or_else(|e| panic!("examples/{name}: {e}"));
        assert!(!config.kinds.is_empty(), "examples/{name} has no kind");
        for provider in &config.providers {
            assert!(
                config
                    .kinds
                    .iter()
                    .any(|kind| kind.providers.contains(&provider.name)),
                "examples/{name}: provider {:?} is used by no kind",
                provider.name
            );
        }
    }
}

/// A copy of `examples/<name>` in a temporary directory, where the commands run.
struct Example {
    dir: tempfile::TempDir,
}

impl Example {
    fn copy(name: &str) -> Example {
        let dir = tempfile::tempdir().expect("temp dir");
        copy_tree(&examples_dir().join(name), dir.path());
        Example { dir }
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("onejob.toml")
    }

    fn text(&self) -> String {
        std::fs::read_to_string(self.config()).expect("read the example's onejob.toml")
    }

    /// Replaces `from` with `to` in the copied `onejob.toml`; `from` must be there.
    fn substitute(&self, from: &str, to: &str) {
        let text = self.text();
        assert!(text.contains(from), "the example no longer names {from:?}");
        std::fs::write(self.config(), text.replace(from, to)).expect("write onejob.toml");
    }

    /// `onejob ARGS --config onejob.toml` in the example's directory, with `env`.
    fn command(&self, args: &[&str], env: &[(&str, String)]) -> tokio::process::Command {
        let mut command = onejob();
        command
            .args(args)
            .arg("--config")
            .arg(self.config())
            .current_dir(self.dir.path())
            .env_remove("ONEJOB_CONFIG")
            .env_remove("ONEJOB_DATABASE");
        for (name, value) in env {
            command.env(name, value);
        }
        command
    }

    /// Starts a long-running `onejob ARGS --config …`, its stderr kept in a file (with the
    /// info line that says which address it bound).
    fn start(&self, args: &[&str], env: &[(&str, String)]) -> Node {
        let log = self.dir.path().join(format!("{}.stderr", args.join("-")));
        let child = self
            .command(args, env)
            .env("RUST_LOG", "warn,onejob::cli=info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("create log file"))
            .spawn()
            .expect("start onejob");
        Node { child, log }
    }

    /// A fresh API key from `onejob keys create --config …`.
    async fn key(&self, env: &[(&str, String)]) -> String {
        let (code, stdout, stderr) = output(&mut self.command(
            &["keys", "create", "--tenant", "acme", "--user", "alice"],
            env,
        ))
        .await;
        assert_eq!(code, 0, "keys create: {stderr}");
        let key = stdout.trim_end().to_owned();
        assert!(key.starts_with("oj_"), "{stdout:?}");
        key
    }
}

fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).expect("read example dir") {
        let entry = entry.expect("example entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            std::fs::create_dir(&target).expect("create dir");
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}

/// A running onejob process, killed when dropped.
struct Node {
    child: tokio::process::Child,
    log: PathBuf,
}

impl Node {
    /// Waits until the node has logged the address it bound (`… serving addr=…`) and
    /// `http://ADDR/readyz` answers 200 there; returns the address. Panics with the node's
    /// log if it exits, or is not ready within [`WITHIN`].
    async fn ready(&mut self) -> String {
        let client = client();
        let deadline = tokio::time::Instant::now() + WITHIN;
        loop {
            if let Some(status) = self.child.try_wait().expect("poll onejob") {
                panic!("onejob exited ({status}): {}", self.log());
            }
            if let Some(addr) = self.bound() {
                let answer = client.get(format!("http://{addr}/readyz")).send().await;
                if answer.is_ok_and(|a| a.status() == 200) {
                    return addr;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the node was not ready within {WITHIN:?}: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The address the node said it serves on, once it has said so.
    fn bound(&self) -> Option<String> {
        self.log().lines().find_map(serving_addr)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// An HTTP client for the tests' requests (rustls needs its crypto provider chosen first).
fn client() -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::new()
}

/// The listen address of every node: any free port, which the node logs once bound.
const ANY_PORT: &str = "127.0.0.1:0";

/// Submits `body` over HTTP, waits for the job to finish and returns it, asserting it
/// succeeded.
async fn run_job(addr: &str, key: &str, idempotency_key: &str, body: &Value, node: &Node) -> Value {
    let client = client();
    let (status, job) = json(
        client
            .post(format!("http://{addr}/v1/jobs"))
            .bearer_auth(key)
            .header("Idempotency-Key", idempotency_key)
            .json(body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{job}\n{}", node.log());
    let id = job["id"].as_str().expect("job id").to_owned();
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let (status, job) = json(
            client
                .get(format!("http://{addr}/v1/jobs/{id}"))
                .bearer_auth(key)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{job}\n{}", node.log());
        match job["state"].as_str() {
            Some("succeeded") => return job,
            Some("pending" | "running") => {}
            _ => panic!("the job did not succeed: {job}\n{}", node.log()),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the job never finished: {job}\n{}",
            node.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs the fake's `chat.completion` job the sqlite-fake and postgres examples share, and
/// checks the bundled fake answered it.
async fn caption_a_fox(addr: &str, key: &str, node: &Node) {
    let job = run_job(
        addr,
        key,
        "order-42:caption",
        &json!({"kind": "chat.completion", "params": {"prompt": "Describe a red fox."}}),
        node,
    )
    .await;
    assert_eq!(
        job["result"]["text"], "fake answer: Describe a red fox.",
        "{job}"
    );
}

#[tokio::test]
async fn sqlite_fake_runs_a_job_on_the_bundled_fake() {
    let example = Example::copy("sqlite-fake");
    assert!(example.text().contains("listen   = \"127.0.0.1:8080\""));
    let env = [("ONEJOB_LISTEN", ANY_PORT.to_owned())];
    let mut serve = example.start(&["serve"], &env);
    let addr = serve.ready().await;
    let key = example.key(&env).await;
    caption_a_fox(&addr, &key, &serve).await;
    // The example's own database file, where the commands ran.
    assert!(example.dir.path().join("onejob-sqlite-fake.db").is_file());
}

#[tokio::test]
async fn postgres_runs_an_api_node_and_a_worker_node() {
    let example = Example::copy("postgres");
    let text = example.text();
    assert!(
        text.contains("database = \"postgres://postgres@127.0.0.1:5432/onejob?sslmode=prefer\""),
        "{text}"
    );
    assert!(text.contains("listen = \"127.0.0.1:9100\""), "{text}");
    let db = TestDatabase::create(Backend::Postgres).await;
    let env = [
        ("ONEJOB_DATABASE", format!("{}?sslmode=prefer", db.url)),
        ("ONEJOB_LISTEN", ANY_PORT.to_owned()),
        ("ONEJOB_WORKER__LISTEN", ANY_PORT.to_owned()),
    ];
    let (code, _, stderr) = output(&mut example.command(&["migrate"], &env)).await;
    assert_eq!(code, 0, "migrate: {stderr}");
    let mut api = example.start(&["serve", "--no-worker"], &env);
    let mut worker = example.start(&["worker"], &env);
    let addr = api.ready().await;
    worker.ready().await;
    let key = example.key(&env).await;
    caption_a_fox(&addr, &key, &worker).await;
    // The job is in the test database: the override, not the example's own, was used.
    assert_eq!(db.scalar("SELECT count(*) FROM jobs").await, 1);
}

#[tokio::test]
async fn openai_chat_serves_the_gateway_model_and_the_templated_kind() {
    let upstream = FakeServer::spawn(([127, 0, 0, 1], 0).into()).await.unwrap();
    let example = Example::copy("openai-chat");
    example.substitute("http://127.0.0.1:9001", &upstream.base_url());
    let env = [("ONEJOB_LISTEN", ANY_PORT.to_owned())];
    let mut serve = example.start(&["serve"], &env);
    let addr = serve.ready().await;
    let key = example.key(&env).await;

    let (status, answer) = json(
        client()
            .post(format!("http://{addr}/v1/chat/completions"))
            .bearer_auth(&key)
            .header("Idempotency-Key", "order-42:greeting")
            .json(
                &json!({"model": "fast", "messages": [{"role": "user", "content": "Say hello."}]}),
            )
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{answer}\n{}", serve.log());
    let content = answer["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(content.contains("Say hello."), "{answer}");

    let job = run_job(
        &addr,
        &key,
        "order-42:summary",
        &json!({"kind": "text.summarize", "params": {"text": "Foxes are small omnivores.", "words": 5}}),
        &serve,
    )
    .await;
    // The upstream was sent the template rendered over the params (the fake echoes it).
    let text = job["result"]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("Summarize the following text in at most 5 words.")
            && text.contains("Foxes are small omnivores."),
        "{job}"
    );
}

#[tokio::test]
async fn async_task_runs_a_job_through_the_task_api() {
    let upstream = FakeServer::spawn(([127, 0, 0, 1], 0).into()).await.unwrap();
    let example = Example::copy("async-task");
    example.substitute("http://127.0.0.1:9001", &upstream.base_url());
    let env = [("ONEJOB_LISTEN", ANY_PORT.to_owned())];
    let mut serve = example.start(&["serve"], &env);
    let addr = serve.ready().await;
    let key = example.key(&env).await;
    let job = run_job(
        &addr,
        &key,
        "order-42:report",
        &json!({"kind": "report.render", "params": {"title": "Q3 sales", "format": "pdf"}}),
        &serve,
    )
    .await;
    // The task API was sent the params themselves (the fake echoes them).
    assert_eq!(
        job["result"]["text"], "fake answer: {\"format\":\"pdf\",\"title\":\"Q3 sales\"}",
        "{job}"
    );
    // One task submitted: the job is one side effect upstream.
    assert_eq!(upstream.submissions().total, 1);
}

/// The configuration reference (`docs/configuration.md`) shows
/// `examples/reference/onejob.toml` whole.
#[test]
fn the_configuration_reference_is_the_reference_example() {
    let page = crate::docs::page("docs/configuration.md");
    let text = std::fs::read_to_string(examples_dir().join("reference/onejob.toml"))
        .expect("read examples/reference/onejob.toml");
    assert!(
        page.contains(&format!("```toml\n{text}```\n")),
        "docs/configuration.md must show examples/reference/onejob.toml verbatim"
    );
}

#[tokio::test]
async fn reference_runs_a_chat_call_and_an_image_job() {
    let chat = FakeServer::spawn(([127, 0, 0, 1], 0).into()).await.unwrap();
    let images = FakeServer::spawn(([127, 0, 0, 1], 0).into()).await.unwrap();
    // An image API answers images (the fake, sent bare params, would answer text).
    images.add_rule(
        onejob_fake::Rule::from_json(json!({
            "output": {"images": [{"url": "https://images.example/fox.png"}]}
        }))
        .unwrap(),
    );
    let example = Example::copy("reference");
    example.substitute("http://127.0.0.1:9001", &chat.base_url());
    example.substitute("http://127.0.0.1:9002", &images.base_url());
    let env = [("ONEJOB_LISTEN", ANY_PORT.to_owned())];
    let mut serve = example.start(&["serve"], &env);
    let addr = serve.ready().await;
    let key = example.key(&env).await;
    let (status, answer) = json(
        client()
            .post(format!("http://{addr}/v1/chat/completions"))
            .bearer_auth(&key)
            .header("Idempotency-Key", "order-42:caption")
            .json(&json!({"model": "fast", "messages": [{"role": "user", "content": "Describe a red fox."}]}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{answer}\n{}", serve.log());
    let job = run_job(
        &addr,
        &key,
        "order-42:image",
        &json!({"kind": "image.generate", "params": {"prompt": "A red fox in the snow", "n": 1}}),
        &serve,
    )
    .await;
    assert_eq!(
        job["result"]["images"][0]["url"], "https://images.example/fox.png",
        "{job}"
    );
    assert_eq!(images.submissions().total, 1, "one image task upstream");
}
