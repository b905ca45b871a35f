//! `onejob config check`: a configuration validated without starting anything, each check
//! one line, the exit code saying how it ended (0 valid, 1 nothing to check, 2 invalid,
//! 3 valid but something named did not answer with `--reach`).

use std::path::Path;

use crate::{
    cli::{onejob, output},
    docs::free_port,
    helpers::{Backend, TestDatabase},
};

/// A kind on one OpenAI-compatible provider at `base_url`, with an inline params schema.
fn config(base_url: &str, provider_extra: &str, database: &str) -> String {
    format!(
        r#"database = "{database}"

[[provider]]
name = "primary"
adapter = "openai-chat"
base_url = "{base_url}"
model = "m"
{provider_extra}

[[kind]]
name = "chat.fast"
openai_models = ["fast"]
providers = ["primary"]

[kind.params_schema]
type = "object"
"#
    )
}

/// Runs `onejob config check ARGS` in `dir` with `env`: exit code and stdout.
async fn check(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut command = onejob();
    command
        .args(["config", "check"])
        .args(args)
        .current_dir(dir)
        .env_remove("ONEJOB_CONFIG")
        .env_remove("ONEJOB_DATABASE");
    for (name, value) in env {
        command.env(name, value);
    }
    let (code, stdout, stderr) = output(&mut command).await;
    (code, format!("{stdout}{stderr}"))
}

#[tokio::test]
async fn a_valid_config_passes_without_contacting_anything() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens there: without --reach nothing is contacted.
    let url = format!("http://127.0.0.1:{}/v1", free_port());
    std::fs::write(
        dir.path().join("onejob.toml"),
        config(&url, "", "sqlite://x.db"),
    )
    .unwrap();
    let (code, said) = check(dir.path(), &[], &[]).await;
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("found by ./onejob.toml"), "{said}");
    assert!(
        said.contains("chat.fast: params schema compiles; providers primary; serves models fast"),
        "{said}"
    );
    assert!(said.contains("ok: the configuration is valid"), "{said}");
    assert!(!dir.path().join("x.db").exists(), "nothing was created");
}

#[tokio::test]
async fn an_unset_secret_and_a_missing_schema_file_are_each_named() {
    let dir = tempfile::tempdir().unwrap();
    let text = config(
        "http://127.0.0.1:9/v1",
        "api_key_env = \"ONEJOB_CHECK_TEST_UNSET_KEY\"",
        "sqlite://x.db",
    );
    std::fs::write(dir.path().join("secret.toml"), &text).unwrap();
    let (code, said) = check(dir.path(), &["--config", "secret.toml"], &[]).await;
    assert_eq!(code, 2, "{said}");
    assert!(
        said.contains("error     config key `provider[primary]`: api_key_env names ONEJOB_CHECK_TEST_UNSET_KEY, which is not set"),
        "{said}"
    );
    // Set, it passes, and the line says the secret is there (never its value).
    let (code, said) = check(
        dir.path(),
        &["--config", "secret.toml"],
        &[("ONEJOB_CHECK_TEST_UNSET_KEY", "sk-hidden")],
    )
    .await;
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains("secret ONEJOB_CHECK_TEST_UNSET_KEY set"),
        "{said}"
    );
    assert!(!said.contains("sk-hidden"), "{said}");

    let missing = text.replace(
        "[kind.params_schema]\ntype = \"object\"\n",
        "params_schema = \"schemas/missing.json\"\n",
    );
    std::fs::write(dir.path().join("schema.toml"), missing).unwrap();
    let (code, said) = check(
        dir.path(),
        &["--config", "schema.toml"],
        &[("ONEJOB_CHECK_TEST_UNSET_KEY", "x")],
    )
    .await;
    assert_eq!(code, 2, "{said}");
    assert!(
        said.contains("error") && said.contains("missing.json"),
        "{said}"
    );
    assert!(said.contains("the configuration is invalid"), "{said}");
}

#[tokio::test]
async fn no_config_file_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let (code, said) = check(dir.path(), &[], &[]).await;
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("no config file to check"), "{said}");
}

#[tokio::test]
async fn reach_contacts_the_providers_and_the_database() {
    let upstream = onejob_fake::FakeServer::spawn(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let db = TestDatabase::create(Backend::Postgres).await;
    let dir = tempfile::tempdir().unwrap();
    let answering = format!("{}/v1", upstream.base_url());
    std::fs::write(dir.path().join("up.toml"), config(&answering, "", &db.url)).unwrap();
    let (code, said) = check(dir.path(), &["--config", "up.toml", "--reach"], &[]).await;
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains(&format!("reached   primary at {answering}: HTTP ")),
        "{said}"
    );
    assert!(said.contains("(PostgreSQL): answered"), "{said}");
    assert_eq!(upstream.submissions().total, 0, "a probe is no submission");

    // Nothing listens on either port: valid, but no answer.
    let silent = format!("http://127.0.0.1:{}/v1", free_port());
    let no_database = format!("postgres://postgres@127.0.0.1:{}/none", free_port());
    std::fs::write(
        dir.path().join("down.toml"),
        config(&silent, "", &no_database),
    )
    .unwrap();
    let (code, said) = check(dir.path(), &["--config", "down.toml", "--reach"], &[]).await;
    assert_eq!(code, 3, "{said}");
    assert!(
        said.contains(&format!("no answer provider primary at {silent}")),
        "{said}"
    );
    assert!(said.contains("no answer database postgres://"), "{said}");
    // Without --reach the same file is valid.
    let (code, said) = check(dir.path(), &["--config", "down.toml"], &[]).await;
    assert_eq!(code, 0, "{said}");
}

/// An `async-task` provider `tasks` on the task API at `base`, with `pointer_line`
/// replacing its `key` line.
fn task_config(base: &str, key: &str, pointer_line: &str) -> String {
    let mut lines = vec![
        r#"database = "sqlite://x.db""#.to_owned(),
        "[[provider]]".into(),
        r#"name = "tasks""#.into(),
        r#"adapter = "async-task""#.into(),
        format!(r#"submit_url = "{base}/v1/tasks""#),
        format!(r#"status_url = "{base}/v1/tasks/{{task_id}}""#),
        r#"task_id_pointer = "/task_id""#.into(),
        r#"status_pointer = "/status""#.into(),
        r#"result_pointer = "/result""#.into(),
        r#"succeeded = ["succeeded"]"#.into(),
        "[[kind]]".into(),
        r#"name = "render""#.into(),
        r#"providers = ["tasks"]"#.into(),
    ];
    for line in &mut lines {
        if line.starts_with(&format!("{key} =")) {
            *line = pointer_line.to_owned();
        }
    }
    lines.join("\n") + "\n"
}

/// Each `*_pointer` that is not an RFC 6901 JSON Pointer is refused by its key, with the
/// spelling that works, by `config check` and by `serve` before anything starts.
#[tokio::test]
async fn a_pointer_without_its_leading_slash_is_refused_by_key_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let base = format!("http://127.0.0.1:{}", free_port());
    for (key, written, fix) in [
        ("task_id_pointer", "id", "/id"),
        ("status_pointer", "status", "/status"),
        ("result_pointer", "data.output", "/data/output"),
    ] {
        let text = task_config(&base, key, &format!("{key} = {written:?}"));
        std::fs::write(dir.path().join("onejob.toml"), &text).unwrap();
        let (code, said) = check(dir.path(), &[], &[]).await;
        assert_eq!(code, 2, "{said}");
        assert!(
            said.contains(&format!("config key `provider[tasks].{key}`")),
            "{said}"
        );
        assert!(said.contains(&format!("write {fix:?}")), "{said}");

        let (code, _, stderr) = output(
            onejob()
                .args([
                    "serve",
                    "--config",
                    "onejob.toml",
                    "--listen",
                    "127.0.0.1:0",
                ])
                .current_dir(dir.path())
                .env_remove("ONEJOB_DATABASE"),
        )
        .await;
        assert_ne!(code, 0, "serve refuses it: {stderr}");
        assert!(
            stderr.contains(&format!("provider[tasks].{key}")),
            "{stderr}"
        );
        assert!(
            !dir.path().join("x.db").exists(),
            "refused before the database"
        );
    }
    // A lone "~" is not an escape either.
    let text = task_config(&base, "status_pointer", r#"status_pointer = "/a~b""#);
    std::fs::write(dir.path().join("onejob.toml"), &text).unwrap();
    let (code, said) = check(dir.path(), &[], &[]).await;
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("`provider[tasks].status_pointer`"), "{said}");
}

/// `--reach` asks an `async-task` status URL about a task that does not exist and says what
/// `status_pointer` found in the answer, without submitting anything.
#[tokio::test]
async fn reach_says_what_the_status_pointer_found_in_a_probe() {
    let upstream = onejob_fake::FakeServer::spawn(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = task_config(
        &upstream.base_url(),
        "status_pointer",
        r#"status_pointer = "/state""#,
    );
    std::fs::write(dir.path().join("onejob.toml"), &text).unwrap();
    let (code, said) = check(dir.path(), &["--reach"], &[]).await;
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains(r#"status of task "onejob-config-check""#),
        "{said}"
    );
    assert!(
        said.contains(r#"status_pointer "/state" found nothing (top-level keys: "#),
        "{said}"
    );
    assert_eq!(upstream.submissions().total, 0, "a probe is no submission");
}

/// The systemd units in `deploy/` run commands this binary accepts: each `ExecStart` and
/// `ExecStartPre` parses (`--help` after its arguments answers usage, where an unknown
/// flag or subcommand is refused). `.ci/run` checks the units themselves with
/// `systemd-analyze verify`.
#[tokio::test]
async fn the_deploy_units_run_commands_onejob_accepts() {
    let deploy = crate::docs::repository().join("deploy");
    let mut checked = 0;
    for unit in ["onejob-api.service", "onejob-worker.service"] {
        let text = std::fs::read_to_string(deploy.join(unit)).unwrap();
        for line in text.lines() {
            let Some(command) = line
                .strip_prefix("ExecStart=")
                .or_else(|| line.strip_prefix("ExecStartPre="))
            else {
                continue;
            };
            let args = command
                .strip_prefix("/usr/local/bin/onejob ")
                .unwrap_or_else(|| panic!("{unit} runs /usr/local/bin/onejob: {line}"));
            let (code, stdout, stderr) = output(
                onejob()
                    .args(args.split_whitespace())
                    .arg("--help")
                    .env_remove("ONEJOB_CONFIG"),
            )
            .await;
            assert!(
                code == 0 && stdout.contains("Usage: onejob"),
                "{unit}: {line}\n{stdout}{stderr}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 4, "an ExecStartPre and an ExecStart in each unit");
}
