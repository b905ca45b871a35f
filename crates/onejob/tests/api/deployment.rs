//! The deployment walk-through of `docs/deployment.md`, run as written: its config file and
//! every command of its shell blocks, the `onejob-fake` upstream they start included, against
//! a fresh PostgreSQL database reached over TLS.
//!
//! The only changes made to the text are the ones a reader on another machine makes: the
//! database URL (through `ONEJOB_DATABASE`, as the page says), the ports (free ones instead
//! of 8080, 9100 and the upstream's 9001), and a one-second key cache instead of 30 s. Each
//! substitution must find its text, so a page that drifts fails here.
//!
//! `onejob-fake` is the workspace's binary from the same target directory as `onejob`
//! (`cargo test --workspace` builds it; `cargo build -p onejob-fake` does alone).

use std::path::{Path, PathBuf};

use crate::{
    docs::{Walkthrough, blocks, free_port, section, substitute},
    helpers::{Backend, TestDatabase},
};

/// The directory of the `onejob` binary under test, where `onejob-fake` is built too.
pub(crate) fn binaries() -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_onejob"))
        .parent()
        .unwrap()
        .to_owned();
    assert!(
        dir.join("onejob-fake").is_file(),
        "no onejob-fake beside {}: run `cargo build -p onejob-fake` (cargo test --workspace \
         builds it)",
        dir.display()
    );
    dir
}

#[tokio::test]
async fn the_deployment_walkthrough_runs_as_written() {
    let section = section("docs/deployment.md", "## From the demo to PostgreSQL");
    let [config] = &blocks(&section, "toml")[..] else {
        panic!("one toml block in the deployment section");
    };
    let script = blocks(&section, "sh").concat();
    assert!(
        script.contains("onejob-fake --listen 127.0.0.1:9001 &")
            && script.contains("onejob migrate")
            && script.contains("onejob worker"),
        "the walk-through starts the upstream it names, migrates and runs a worker:\n{script}"
    );

    let db = TestDatabase::create(Backend::Postgres).await;
    let dir = tempfile::tempdir().unwrap();
    let (api, probes, upstream) = (free_port(), free_port(), free_port());
    let upstream = format!("127.0.0.1:{upstream}");
    std::fs::write(
        dir.path().join("onejob.toml"),
        substitute(config, "127.0.0.1:9001", &upstream),
    )
    .unwrap();
    let script = substitute(&script, "127.0.0.1:8080", &format!("127.0.0.1:{api}"));
    let script = substitute(&script, "127.0.0.1:9100", &format!("127.0.0.1:{probes}"));
    let script = substitute(&script, "127.0.0.1:9001", &upstream);
    let script = substitute(&script, "sleep 30", "sleep 2");
    // What the upstream received, asked while it still runs.
    let script =
        format!("{script}curl -s http://{upstream}/_fake/submissions > submissions.json\n");

    let tls_url = format!("{}?sslmode=require", db.url);
    let walk = Walkthrough::run(
        &script,
        dir.path(),
        &[
            ("ONEJOB_DATABASE", tls_url),
            ("ONEJOB_LISTEN", format!("127.0.0.1:{api}")),
            ("ONEJOB_WORKER__LISTEN", format!("127.0.0.1:{probes}")),
            ("ONEJOB_HTTP__KEY_CACHE_TTL", "1s".to_owned()),
        ],
    )
    .await;

    // While the nodes still run: every connection to this database is TLS.
    let sessions = db
        .scalar(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND NOT s.ssl",
        )
        .await;
    let tls_sessions = db
        .scalar(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.datname = current_database() AND s.ssl",
        )
        .await;
    walk.stop();
    walk.assert_succeeded("the walk-through");
    let stdout = walk.stdout();
    let context = walk.context();
    assert_eq!(sessions, 0, "a node connected without TLS\n{context}");
    assert!(
        tls_sessions > 0,
        "the nodes are connected over TLS\n{context}"
    );
    assert!(
        stdout.contains("\"chat.completion\""),
        "the completion\n{context}"
    );
    assert!(
        stdout
            .lines()
            .any(|line| line.starts_with("onejob_attempts_ended_total{")
                && line.contains("outcome=\"won\"")
                && line.ends_with(" 1")),
        "the worker node's /metrics counts the attempt that won\n{context}"
    );
    assert!(
        stdout
            .lines()
            .any(|line| line.contains("acme") && line.contains("alice")),
        "keys list shows the key\n{context}"
    );
    assert!(stdout.contains("revoked key"), "{context}");
    assert_eq!(
        stdout.lines().last(),
        Some("401"),
        "the revoked key is refused\n{context}"
    );
    let submissions: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("submissions.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(submissions["total"], 1, "one upstream call: {submissions}");
}
