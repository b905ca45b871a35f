//! Where the configuration comes from (`--config`, `ONEJOB_CONFIG`, `./onejob.toml`), and
//! no silent demo: only a bare `onejob serve` runs the demo kinds unasked, and says so.

use std::{path::Path, process::Stdio, time::Duration};

use tokio::io::{AsyncBufReadExt, BufReader};

use crate::cli::{onejob, output};

/// `onejob` in `dir`, with no config or database from the environment.
pub(crate) fn onejob_in(dir: &Path) -> tokio::process::Command {
    let mut command = onejob();
    command
        .current_dir(dir)
        .env_remove("ONEJOB_CONFIG")
        .env_remove("ONEJOB_DATABASE");
    command
}

fn assert_refused_with_advice(code: i32, stderr: &str) {
    assert_eq!(code, 1, "{stderr}");
    for advice in [
        "no config file",
        "--config onejob.toml",
        "ONEJOB_CONFIG",
        "onejob.toml in the working directory",
        "pass --demo",
    ] {
        assert!(stderr.contains(advice), "{advice:?} missing from: {stderr}");
    }
}

#[tokio::test]
async fn worker_verify_and_serve_with_a_database_refuse_the_demo_unless_told() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("prod.db").display());
    let runs: [&[&str]; 4] = [
        &["worker", "--database", &db],
        &["worker"],
        &["verify", "--provider", "fake", "--kind", "chat.completion"],
        &["serve", "--listen", "127.0.0.1:0", "--database", &db],
    ];
    for args in runs {
        let (code, _, stderr) = output(onejob_in(dir.path()).args(args)).await;
        assert_refused_with_advice(code, &stderr);
        assert!(
            stderr.contains(&format!("no config file found for onejob {}:", args[0])),
            "{stderr}"
        );
    }
    // A database from the environment counts as given.
    let (code, _, stderr) = output(
        onejob_in(dir.path())
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("ONEJOB_DATABASE", &db),
    )
    .await;
    assert_refused_with_advice(code, &stderr);
    assert!(stderr.contains("against this database"), "{stderr}");
    assert!(
        !dir.path().join("prod.db").exists() && !dir.path().join("onejob.db").exists(),
        "nothing was opened"
    );
}

#[tokio::test]
async fn a_config_file_is_found_through_onejob_config_and_the_working_directory() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere.toml");
    let (code, _, stderr) = output(
        onejob_in(dir.path())
            .args(["worker"])
            .env("ONEJOB_CONFIG", &missing),
    )
    .await;
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("named by ONEJOB_CONFIG") && stderr.contains("nowhere.toml"),
        "{stderr}"
    );
    std::fs::write(dir.path().join("onejob.toml"), "listen = 1\n").unwrap();
    let (code, _, stderr) =
        output(onejob_in(dir.path()).args(["verify", "--provider", "p", "--kind", "k"])).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("named by ./onejob.toml") && stderr.contains("listen"),
        "{stderr}"
    );
    // --demo with a config file named explicitly is a contradiction, said so.
    let (code, _, stderr) =
        output(onejob_in(dir.path()).args(["worker", "--demo", "--config", "onejob.toml"])).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("--demo runs the built-in demo configuration"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_bare_serve_runs_the_demo_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = onejob_in(dir.path())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .expect("a warning");
    assert!(
        line.contains("no config file") && line.contains("built-in demo configuration"),
        "{line}"
    );
    let _ = child.kill().await;
}

#[tokio::test]
async fn keys_and_migrate_refuse_to_guess_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let runs: [&[&str]; 4] = [
        &["keys", "create", "--tenant", "acme", "--user", "alice"],
        &["keys", "list"],
        &["keys", "revoke", "0011223344556677"],
        &["migrate"],
    ];
    for args in runs {
        let (code, stdout, stderr) = output(onejob_in(dir.path()).args(args)).await;
        assert_eq!(code, 1, "{stdout}{stderr}");
        assert!(
            stderr.contains("pass --database URL") && stderr.contains("--config onejob.toml"),
            "{stderr}"
        );
    }
    assert!(
        !dir.path().join("onejob.db").exists(),
        "no database guessed"
    );
    // A config file's database is used.
    let db = format!("sqlite://{}", dir.path().join("keys.db").display());
    std::fs::write(
        dir.path().join("onejob.toml"),
        format!("database = \"{db}\"\n"),
    )
    .unwrap();
    let (code, _, stderr) = output(onejob_in(dir.path()).args(runs[3])).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("created the SQLite schema at") && stderr.contains("keys.db"),
        "{stderr}"
    );
    let (code, stdout, stderr) = output(onejob_in(dir.path()).args(runs[0])).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("oj_"), "{stdout}");
    assert!(
        dir.path().join("keys.db").exists(),
        "the config file's database"
    );
}
