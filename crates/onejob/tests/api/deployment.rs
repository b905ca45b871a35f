//! The deployment walk-through of `docs/deployment.md`, run as written: its config file and
//! every command of its shell blocks, the `onejob-fake` upstream they start included, against
//! a fresh PostgreSQL database reached over TLS.
//!
//! The page runs it on one machine, as this test does: `ONEJOB_DATABASE` names this
//! machine's PostgreSQL over TLS, and `createdb` makes the database. The only changes made to
//! the text are ones that let it run beside other tests: a database name of its own (dropped
//! afterwards), free ports instead of 8080, 9100 and the upstream's 9001, the test server's
//! admin URL (`ONEJOB_TEST_POSTGRES`) for `createdb`, and a one-second key cache instead of
//! 30 s. Each substitution must find its text, so a page that drifts fails here.
//!
//! `onejob-fake` is the workspace's binary from the same target directory as `onejob`
//! (`cargo test --workspace` builds it; `cargo build -p onejob-fake` does alone).

use std::path::{Path, PathBuf};

use sqlx::Connection;

use crate::docs::{Walkthrough, blocks, free_port, section, substitute};

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

    let admin = crate::helpers::postgres_admin_url();
    let name = format!("onejob_walkthrough_{}", uuid::Uuid::new_v4().simple());
    let mut database = url::Url::parse(&admin).unwrap();
    database.set_path(&name);
    let mut tls_url = database.clone();
    tls_url.set_query(Some("sslmode=require"));
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
    let script = substitute(
        &script,
        "'postgres://postgres@127.0.0.1:5432/onejob_walkthrough?sslmode=require'",
        &format!("'{tls_url}'"),
    );
    let script = substitute(
        &script,
        "createdb -h 127.0.0.1 -U postgres onejob_walkthrough",
        &format!("createdb --maintenance-db='{admin}' {name}"),
    );
    // What the upstream received, asked while it still runs.
    let script =
        format!("{script}curl -s http://{upstream}/_fake/submissions > submissions.json\n");

    let walk = Walkthrough::run(
        &script,
        dir.path(),
        &[
            ("ONEJOB_LISTEN", format!("127.0.0.1:{api}")),
            ("ONEJOB_WORKER__LISTEN", format!("127.0.0.1:{probes}")),
            ("ONEJOB_HTTP__KEY_CACHE_TTL", "1s".to_owned()),
        ],
    )
    .await;

    // While the nodes still run: every connection to this database is TLS.
    let count = async |sql: &'static str| -> i64 {
        let mut connection = sqlx::PgConnection::connect(database.as_str())
            .await
            .unwrap();
        sqlx::query_scalar(sql)
            .fetch_one(&mut connection)
            .await
            .unwrap()
    };
    let sessions = count(
        "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
         WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND NOT s.ssl",
    )
    .await;
    let tls_sessions = count(
        "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
         WHERE a.datname = current_database() AND s.ssl",
    )
    .await;
    walk.stop();
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let _ = std::process::Command::new("dropdb")
        .args([
            &format!("--maintenance-db={admin}"),
            "--force",
            "--if-exists",
            &name,
        ])
        .status();
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
