//! The `onejob` binary: the README's first command, key creation, migrations, verify,
//! operator resolution, and clear errors for bad configuration and unreachable databases.

use std::{process::Stdio, time::Duration};

use onejob_fake::{Behaviour, Outcome, Rule};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::helpers::{
    Backend, Fakes, TestApp, TestDatabase, chat, create_key, postgres_and_sqlite_tests,
};

postgres_and_sqlite_tests!(
    keys_create_prints_only_the_key_and_it_works,
    verify_certifies_a_passing_provider_and_refuses_a_drifting_one,
    attempts_resolve_frees_an_unknown_attempt,
);

pub(crate) fn onejob() -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_onejob"));
    command.env("RUST_LOG", "warn").kill_on_drop(true);
    command
}

pub(crate) async fn output(command: &mut tokio::process::Command) -> (i32, String, String) {
    let out = command.output().await.expect("run onejob");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The address in a text log line that says a node is serving (`onejob serving addr=…`,
/// `worker serving … addr=…`).
pub(crate) fn serving_addr(line: &str) -> Option<String> {
    line.contains(" serving")
        .then(|| {
            line.split_whitespace()
                .find_map(|word| word.strip_prefix("addr="))
        })
        .flatten()
        .map(str::to_owned)
}

/// Starts `command` with its stderr piped and reads its log lines until `until` holds for
/// one (each within 60 s) or the stream ends; returns the process and the lines read, the
/// last one first to satisfy `until`. Stderr is drained afterwards, so that the process
/// never blocks on a full pipe.
pub(crate) async fn start_until(
    command: &mut tokio::process::Command,
    mut until: impl FnMut(&str) -> bool,
) -> (tokio::process::Child, Vec<String>) {
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start onejob");
    let mut lines = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
    let mut seen = Vec::new();
    while let Some(line) = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("logs within 60 s")
        .expect("read the logs")
    {
        let done = until(&line);
        seen.push(line);
        if done {
            break;
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, seen)
}

/// A config file for the demo kinds with the fakes as providers.
fn config_file(dir: &std::path::Path, db: &TestDatabase, fakes: &Fakes) -> std::path::PathBuf {
    let demo = onejob::config::DEMO_CONFIG
        .replace("sqlite://onejob.db", &db.url)
        .replace(
            "name = \"fake\"\nadapter = \"fake\"\n",
            &format!(
                "name = \"fake\"\nadapter = \"fake\"\nbase_url = \"{}\"\n",
                fakes.primary.base_url()
            ),
        )
        .replace(
            "name = \"fake-backup\"\nadapter = \"fake\"\n",
            &format!(
                "name = \"fake-backup\"\nadapter = \"fake\"\nbase_url = \"{}\"\n",
                fakes.backup.base_url()
            ),
        );
    let path = dir.join("onejob.toml");
    std::fs::write(&path, demo).unwrap();
    path
}

async fn keys_create_prints_only_the_key_and_it_works(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let (code, _, stderr) = output(onejob().args(["migrate", "--database", &db.url])).await;
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, stderr) = output(onejob().args([
        "keys",
        "create",
        "--database",
        &db.url,
        "--tenant",
        "acme",
        "--user",
        "alice",
    ]))
    .await;
    assert_eq!(code, 0, "{stderr}");
    let key = stdout.trim_end_matches('\n');
    assert!(
        !key.contains('\n') && key.starts_with("oj_"),
        "only the key: {stdout:?}"
    );
    let app = TestApp::spawn(&db).await;
    let status = app
        .submit_as(key, "k", &chat("hello"))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 201);
}

async fn verify_certifies_a_passing_provider_and_refuses_a_drifting_one(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(Rule {
        matches: None,
        times: None,
        behaviour: Behaviour {
            outcome: Outcome::DriftedKeys,
            ..Default::default()
        },
    });
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path(), &db, &fakes);
    let config = config.to_str().unwrap();
    let (code, stdout, stderr) = output(onejob().args([
        "verify",
        "--config",
        config,
        "--provider",
        "fake-backup",
        "--kind",
        "chat.completion",
    ]))
    .await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("pass  describe a fox") && stdout.contains("certified"),
        "{stdout}"
    );
    let (code, stdout, _) = output(onejob().args([
        "verify",
        "--config",
        config,
        "--provider",
        "fake",
        "--kind",
        "chat.completion",
        "--json",
    ]))
    .await;
    assert_eq!(code, 1, "{stdout}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["passed"], false);
    let problems = report["cases"][0]["problems"].to_string();
    assert!(
        problems.contains("extra top-level key \\\"answer\\\""),
        "{problems}"
    );
    assert!(
        problems.contains("missing top-level key \\\"text\\\""),
        "{problems}"
    );
    // The same providers as the verify runs saw: certificates hold for these settings only.
    let app = TestApp::spawn_with(&db, |config| fakes.configure(config)).await;
    let listed = app.certificates().await;
    let valid: Vec<(&str, bool)> = listed
        .iter()
        .map(|c| {
            (
                c["provider"].as_str().unwrap(),
                c["valid"].as_bool().unwrap(),
            )
        })
        .collect();
    assert!(
        valid.contains(&("fake-backup", true)) && valid.contains(&("fake", false)),
        "{valid:?}"
    );
}

async fn attempts_resolve_frees_an_unknown_attempt(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(Rule {
        matches: Some("stuck".into()),
        times: None,
        behaviour: Behaviour {
            hang_before_ack: true,
            hang_after_ack: true,
            ..Default::default()
        },
    });
    let app = TestApp::running(&db, &fakes, |c| {
        c.kinds[0].attempt_timeout = Duration::from_millis(300)
    })
    .await;
    let job = app.create("stuck", &chat("stuck")).await;
    let id = job["id"].as_str().unwrap().to_owned();
    let attempts = app
        .wait_attempts(&id, Duration::from_secs(15), |a| a[0]["state"] == "unknown")
        .await;
    let attempt = attempts[0]["id"].as_str().unwrap().to_owned();
    let operator = create_key(&*app.store, "acme", "ops", true).await;
    let (code, stdout, stderr) = output(onejob().args([
        "attempts",
        "resolve",
        &attempt,
        "--outcome",
        "failed",
        "--reason",
        "vendor says it never ran",
        "--url",
        &app.url(""),
        "--api-key",
        &operator,
        "--json",
    ]))
    .await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(answer["attempt"]["state"], "failed");
    app.wait_job(&id, Duration::from_secs(15), |j| j["state"] == "succeeded")
        .await;
    // A normal key is refused, and the command says so with a failing exit code.
    let (code, stdout, _) = output(onejob().args([
        "attempts",
        "resolve",
        &attempt,
        "--outcome",
        "failed",
        "--url",
        &app.url(""),
        "--api-key",
        &app.token,
        "--json",
    ]))
    .await;
    assert_eq!(code, 6, "exit 6: unauthorized or forbidden");
    assert!(stdout.contains("forbidden"), "{stdout}");
}

/// `onejob serve` with no configuration (the README's first command) in `dir`, on a free
/// port: the process, the URL and the API key it printed.
pub(crate) async fn serve_demo(dir: &std::path::Path) -> (tokio::process::Child, String, String) {
    let mut child = onejob()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut url, mut key) = (None, None);
    while let Ok(Some(line)) = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .unwrap()
    {
        if let Some(rest) = line.strip_prefix("onejob is running on ") {
            url = rest.split_whitespace().next().map(str::to_owned);
        }
        if let Some(token) = line.split_whitespace().find(|w| w.starts_with("oj_")) {
            key = Some(token.to_owned());
        }
        if line.contains("curl -i") {
            break;
        }
    }
    // Keep reading what it prints, so that it never writes into a closed pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (
        child,
        url.expect("address printed"),
        key.expect("key printed"),
    )
}

#[tokio::test]
async fn serve_without_config_runs_the_demo_and_prints_a_working_key() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, url, key) = serve_demo(dir.path()).await;
    assert!(
        dir.path().join("onejob.db").exists(),
        "the embedded default is a SQLite file"
    );
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let created: Value = client
        .post(format!("{url}/v1/jobs"))
        .bearer_auth(&key)
        .header("Idempotency-Key", "readme")
        .json(&json!({"kind": "chat.completion", "params": {"prompt": "Describe a red fox."}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().unwrap();
    let mut state = String::new();
    for _ in 0..200 {
        let job: Value = client
            .get(format!("{url}/v1/jobs/{id}"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        state = job["state"].as_str().unwrap().to_owned();
        if state == "succeeded" {
            assert_eq!(job["result"]["text"], "fake answer: Describe a red fox.");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(state, "succeeded", "the bundled fake provider ran the job");
    let _ = child.kill().await;
    let _ = child.wait().await;

    // One operator key per database: kept beside it (the owner's alone), printed again by
    // the next start on it, and still the only key there.
    let kept = dir.path().join("onejob.db.key");
    assert_eq!(std::fs::read_to_string(&kept).unwrap().trim(), key);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&kept).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }
    let (mut again, _, key_again) = serve_demo(dir.path()).await;
    assert_eq!(key_again, key, "a second start prints the same key");
    let _ = again.kill().await;
    let _ = again.wait().await;
    let db = format!("sqlite://{}", dir.path().join("onejob.db").display());
    let (code, listed, stderr) = output(onejob().args(["keys", "list", "--database", &db])).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        listed.lines().filter(|l| l.contains(" demo ")).count(),
        1,
        "{listed}"
    );
}

#[tokio::test]
async fn serve_with_a_config_and_no_key_says_how_to_make_one_that_works() {
    let db = TestDatabase::create(Backend::Sqlite).await;
    let fakes = Fakes::spawn().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path(), &db, &fakes);
    let config = config.to_str().unwrap();
    let (mut child, lines) = start_until(
        onejob()
            .args(["serve", "--config", config, "--listen", "127.0.0.1:0"])
            .env("RUST_LOG", "info"),
        |line| line.contains("no API key"),
    )
    .await;
    let addr = lines.iter().find_map(|line| serving_addr(line));
    let hint = lines
        .last()
        .filter(|line| line.contains("no API key"))
        .cloned();
    let hint = hint.expect("serve says there is no API key");
    let command = hint
        .split('`')
        .nth(1)
        .unwrap_or_else(|| panic!("a command to run: {hint}"));
    assert!(
        command.starts_with(&format!("onejob keys create --config {config} --tenant")),
        "{hint}"
    );
    // The command as printed, placeholders filled in, makes a key this server accepts.
    let args: Vec<String> = command
        .split_whitespace()
        .skip(1)
        .map(|word| match word {
            "TENANT" => "acme".to_owned(),
            "USER" => "alice".to_owned(),
            other => other.to_owned(),
        })
        .collect();
    let (code, token, stderr) = output(onejob().args(&args)).await;
    assert_eq!(code, 0, "{stderr}");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let status = reqwest::Client::new()
        .get(format!("http://{}/v1/jobs", addr.expect("address logged")))
        .bearer_auth(token.trim())
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200);
    let _ = child.kill().await;
}

#[tokio::test]
async fn a_bad_config_file_names_the_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("onejob.toml");
    std::fs::write(
        &path,
        "listen = \"127.0.0.1:0\"\n\n[[kind]]\nname = \"k\"\nmax_attempt = 3\n",
    )
    .unwrap();
    let (code, _, stderr) =
        output(onejob().args(["serve", "--config", path.to_str().unwrap()])).await;
    assert_ne!(code, 0);
    assert!(
        stderr.contains("line 5") && stderr.contains("max_attempt"),
        "{stderr}"
    );
}

#[tokio::test]
async fn an_unreachable_database_is_reported_clearly() {
    let (code, _, stderr) = output(onejob().args([
        "migrate",
        "--database",
        "postgres://postgres:secret@127.0.0.1:1/nowhere",
    ]))
    .await;
    assert_ne!(code, 0);
    assert!(stderr.contains("database is unavailable"), "{stderr}");
    assert!(
        !stderr.contains("secret"),
        "the password is redacted: {stderr}"
    );
}

/// An address another process already listens on is refused with the way out: the
/// `--listen` flag (or `listen` in the config).
#[tokio::test]
async fn a_listen_address_in_use_names_the_way_out() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let (code, _, stderr) = output(
        onejob()
            .current_dir(dir.path())
            .env_remove("ONEJOB_CONFIG")
            .args(["serve", "--listen", &addr]),
    )
    .await;
    assert_ne!(code, 0);
    assert!(
        stderr.contains(&format!("cannot listen on {addr}")),
        "{stderr}"
    );
    assert!(stderr.contains("--listen"), "{stderr}");
    drop(taken);
}

#[tokio::test]
async fn log_format_json_writes_one_json_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_onejob"))
        .args(["--log-format", "json", "serve", "--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "info")
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .expect("a log line");
    let entry: Value = serde_json::from_str(&line).expect("a JSON log line");
    // The first line warns that this is the demo configuration.
    assert_eq!(entry["level"], "WARN", "{entry}");
    assert!(entry["fields"]["message"].is_string(), "{entry}");
    let _ = child.kill().await;
}

#[tokio::test]
async fn the_demo_plays_every_guarantee_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = output(
        onejob()
            .args(["demo", "--exit", "--listen", "127.0.0.1:0", "--dir"])
            .arg(dir.path()),
    )
    .await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    for scene in [
        "the provider takes 2.5s, the attempt's deadline is 800ms",
        "1 job (",
        "1 × 201 Created, 4 × 200 Idempotent-Replayed",
        "the provider ran it 1 time(s)",
        "422 https://onejob.dev/problems/key-reused: changed [\"/prompt\"]",
        "nothing ran (side effects: 0)",
        "is \"unknown\"",
        "job \"succeeded\", still 1 attempt(s)",
        "(hedge): succeeded",
        ": discarded",
        "race_lost:",
        "/ui",
    ] {
        assert!(stdout.contains(scene), "{scene:?} missing from:\n{stdout}");
    }
    // Whole ids, each its own: a UUIDv7's first block is its creation time, the same for
    // jobs made in one millisecond's neighbourhood, so a cut id would name several.
    let ids: std::collections::BTreeSet<uuid::Uuid> = stdout
        .split(|c: char| !(c.is_ascii_hexdigit() || c == '-'))
        .filter_map(|word| uuid::Uuid::parse_str(word).ok())
        .collect();
    assert!(
        ids.len() >= 3,
        "the scenes' job and attempt ids, whole and distinct: {ids:?}\n{stdout}"
    );
}

/// The operator key a demo run printed.
fn demo_key(stdout: &str) -> String {
    let line = stdout
        .lines()
        .find(|line| line.starts_with("dashboard: "))
        .unwrap_or_else(|| panic!("the dashboard line: {stdout}"));
    line.split_whitespace()
        .find_map(|word| word.strip_prefix("oj_"))
        .map(|rest| format!("oj_{}", rest.trim_end_matches(')')))
        .unwrap_or_else(|| panic!("a key on {line:?}"))
}

#[tokio::test]
async fn the_demo_prints_the_same_working_key_on_every_run_on_its_database() {
    let dir = tempfile::tempdir().unwrap();
    let demo = || {
        let mut command = onejob();
        command
            .args(["demo", "--exit", "--listen", "127.0.0.1:0", "--dir"])
            .arg(dir.path());
        command
    };
    let (code, first, stderr) = output(&mut demo()).await;
    assert_eq!(code, 0, "{first}{stderr}");
    let (code, second, stderr) = output(&mut demo()).await;
    assert_eq!(code, 0, "{second}{stderr}");
    let key = demo_key(&first);
    assert_eq!(demo_key(&second), key, "{first}\n---\n{second}");
    assert!(second.contains("the same key as last time"), "{second}");
    // The scenes play again on the kept database: a job created, not replayed.
    assert!(
        second.contains("1 × 201 Created, 4 × 200 Idempotent-Replayed"),
        "{second}"
    );

    // The key authenticates a server on the demo's database.
    let database = format!("sqlite://{}", dir.path().join("onejob.db").display());
    let mut child = onejob()
        .args([
            "serve",
            "--demo",
            "--listen",
            "127.0.0.1:0",
            "--database",
            &database,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut url = None;
    while let Ok(Some(line)) = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .unwrap()
    {
        if let Some(rest) = line.strip_prefix("onejob is running on ") {
            url = rest.split_whitespace().next().map(str::to_owned);
            break;
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let _ = rustls::crypto::ring::default_provider().install_default();
    let status = reqwest::Client::new()
        .get(format!("{}/v1/jobs", url.expect("address printed")))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200, "the demo's key authenticates on its database");
    let _ = child.kill().await;
}
