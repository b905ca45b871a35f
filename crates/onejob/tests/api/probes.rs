//! A worker-only node's probes: `onejob worker` with `[worker] listen` (or `--listen`)
//! serves `/metrics`, `/healthz` and `/readyz`, and `/readyz` turns 503 without its database.

use std::time::Duration;

use serde_json::Value;

use crate::{
    cli::start_until,
    discovery::onejob_in,
    helpers::{Backend, TestDatabase},
    metrics::assert_every_family_is_described,
};

/// Starts `onejob worker` in `dir` with `args` (JSON logs) and returns it with the address
/// its probes listen on, read from its log.
async fn worker(dir: &std::path::Path, args: &[&str]) -> (tokio::process::Child, String) {
    // The tests' reqwest clients need a crypto provider even for plain HTTP; a filtered run
    // may have no other test that installed one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let probes = |line: &str| {
        let entry: Value = serde_json::from_str(line).unwrap_or_default();
        (entry["fields"]["message"] == "worker serving /metrics, /healthz and /readyz")
            .then(|| entry["fields"]["addr"].as_str().map(str::to_owned))
            .flatten()
    };
    let (child, lines) = start_until(
        onejob_in(dir)
            .args(["--log-format", "json", "worker"])
            .args(args)
            .env("RUST_LOG", "info"),
        |line| probes(line).is_some(),
    )
    .await;
    let addr = lines.last().and_then(|line| probes(line));
    (child, addr.expect("the worker logged its probe address"))
}

#[tokio::test]
async fn a_worker_node_serves_metrics_health_and_readiness() {
    let db = TestDatabase::create(Backend::Postgres).await;
    let dir = tempfile::tempdir().unwrap();
    // Found as ./onejob.toml; the probes' address comes from `[worker] listen`.
    let config = format!(
        "{}\n[worker]\nlisten = \"127.0.0.1:0\"\n",
        onejob::config::DEMO_CONFIG.replace("sqlite://onejob.db", &db.url)
    );
    std::fs::write(dir.path().join("onejob.toml"), config).unwrap();
    let (mut child, addr) = worker(dir.path(), &[]).await;
    let client = reqwest::Client::new();
    let get = |path: &str| client.get(format!("http://{addr}{path}")).send();

    assert_eq!(get("/healthz").await.unwrap().status(), 200);
    let ready = get("/readyz").await.unwrap();
    assert_eq!(ready.status(), 200);
    assert_eq!(ready.json::<Value>().await.unwrap()["database"], "postgres");
    let metrics = get("/metrics").await.unwrap();
    assert_eq!(metrics.status(), 200);
    let text = metrics.text().await.unwrap();
    assert!(text.contains("# HELP onejob_attempts_unknown "), "{text}");
    assert!(text.contains("\nonejob_attempts_unknown "), "{text}");
    assert_every_family_is_described(&text);
    assert_eq!(
        get("/v1/jobs").await.unwrap().status(),
        404,
        "a worker node serves no API"
    );

    // Without its database the node is alive but not ready.
    drop(db);
    let mut status = 0;
    for _ in 0..100 {
        status = get("/readyz").await.unwrap().status().as_u16();
        if status == 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 503, "/readyz without the database");
    assert_eq!(get("/healthz").await.unwrap().status(), 200);
    let _ = child.kill().await;
}

#[tokio::test]
async fn the_listen_flag_overrides_the_config_and_demo_needs_asking() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("worker.db").display());
    let (mut child, addr) = worker(
        dir.path(),
        &["--demo", "--database", &db, "--listen", "127.0.0.1:0"],
    )
    .await;
    let ready: Value = reqwest::get(format!("http://{addr}/readyz"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["database"], "sqlite", "{ready}");
    let _ = child.kill().await;
}

/// The soft and hard limits on open files of the process `pid`, from `/proc`.
fn open_files_limits(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a limit on open files");
    let mut numbers = line["Max open files".len()..].split_whitespace();
    (
        numbers.next().unwrap().to_owned(),
        numbers.next().unwrap().to_owned(),
    )
}

/// `onejob worker` (JSON logs, probes on any port) started by `sh` under `ulimit -S -n soft`
/// and `-H -n hard`, in `dir`; returns it once it logged `until`, with the lines read.
async fn worker_limited(
    dir: &std::path::Path,
    soft: u32,
    hard: u32,
    until: impl FnMut(&str) -> bool,
) -> (tokio::process::Child, Vec<String>) {
    let script = format!(r#"ulimit -S -n {soft} && ulimit -H -n {hard} && exec "$0" "$@""#);
    let mut command = tokio::process::Command::new("sh");
    command
        .args(["-c", &script, env!("CARGO_BIN_EXE_onejob")])
        .args(["--log-format", "json", "worker", "--listen", "127.0.0.1:0"])
        .current_dir(dir)
        .env_remove("ONEJOB_CONFIG")
        .env_remove("ONEJOB_DATABASE")
        .env("RUST_LOG", "info")
        .kill_on_drop(true);
    start_until(&mut command, until).await
}

#[tokio::test]
async fn a_worker_raises_its_limit_on_open_files_and_warns_when_the_hard_one_is_too_low() {
    let db = TestDatabase::create(Backend::Postgres).await;
    let dir = tempfile::tempdir().unwrap();
    let config = onejob::config::DEMO_CONFIG.replace("sqlite://onejob.db", &db.url);
    std::fs::write(dir.path().join("onejob.toml"), config).unwrap();
    let serving = |line: &str| line.contains("worker serving /metrics");
    let too_low = |line: &str| line.contains("the limit on open files is below");

    // A soft limit of 256 under a hard one of 4096: every attempt in flight holds a
    // connection, so the worker takes the hard limit.
    let (mut child, lines) = worker_limited(dir.path(), 256, 4096, serving).await;
    assert!(lines.last().is_some_and(|l| serving(l)), "{lines:#?}");
    assert_eq!(
        open_files_limits(child.id().unwrap()),
        ("4096".to_owned(), "4096".to_owned()),
        "the soft limit raised to the hard one"
    );
    assert!(!lines.iter().any(|l| too_low(l)), "{lines:#?}");
    let _ = child.kill().await;

    // A hard limit below the default concurrency's needs: it runs, and says what to change.
    let (mut child, lines) = worker_limited(dir.path(), 256, 300, serving).await;
    assert!(lines.last().is_some_and(|l| serving(l)), "{lines:#?}");
    assert_eq!(open_files_limits(child.id().unwrap()).0, "300");
    let warning = lines.iter().find(|l| too_low(l)).expect("a warning");
    let warning: Value = serde_json::from_str(warning).unwrap();
    assert_eq!(warning["level"], "WARN");
    assert_eq!(warning["fields"]["open_files"], 300);
    let message = warning["fields"]["message"].as_str().unwrap();
    for advice in ["ulimit -n", "LimitNOFILE", "[worker] concurrency"] {
        assert!(
            message.contains(advice),
            "{advice:?} missing from {message}"
        );
    }
    let _ = child.kill().await;
}
