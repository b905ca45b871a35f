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
