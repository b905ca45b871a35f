//! The client commands of the `onejob` binary against a running onejob: `submit` (new,
//! replayed, conflicting; params from a file or standard input), `status`, `watch` (plain
//! lines when not on a terminal), `jobs list --json`, and the exit codes that say how a
//! job or a request ended.

use std::process::Stdio;

use onejob_fake::{Behaviour, Outcome, Rule};
use serde_json::Value;
use tokio::io::AsyncWriteExt;

use crate::{
    cli::{onejob, output},
    helpers::{Backend, Fakes, TestApp, TestDatabase, chat, json, postgres_and_sqlite_tests},
};

postgres_and_sqlite_tests!(
    submit_replay_and_conflict_have_their_exit_codes,
    status_and_watch_follow_a_job_until_it_succeeds,
    jobs_list_json_pages_and_filters,
    a_failed_job_exits_2_and_a_cancelled_one_3,
);

/// `onejob <args> --url … --api-key …` for `app`'s user.
fn remote(app: &TestApp, args: &[&str]) -> tokio::process::Command {
    let mut command = onejob();
    command
        .args(args)
        .args(["--url", &app.url(""), "--api-key", &app.token]);
    command
}

/// Writes `params` to a file in `dir` and returns its path.
fn params_file(dir: &tempfile::TempDir, name: &str, params: &Value) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, params.to_string()).unwrap();
    path.to_str().unwrap().to_owned()
}

/// The value of a `name  value` line of a job shown as text.
fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(' ')?;
        (key == name).then(|| value.trim())
    })
}

/// Runs `command` with `input` on its standard input.
async fn output_with_stdin(
    command: &mut tokio::process::Command,
    input: &str,
) -> (i32, String, String) {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn submit_replay_and_conflict_have_their_exit_codes(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let fox = params_file(
        &dir,
        "fox.json",
        &serde_json::json!({"prompt": "A red fox"}),
    );
    let submit = [
        "submit",
        "--kind",
        "chat.completion",
        "--key",
        "order-42:caption",
    ];

    let (code, stdout, stderr) = output(remote(&app, &submit).args([&fox, "--json"])).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    let created: Value = serde_json::from_str(&stdout).unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["kind"], "chat.completion");

    // The same action again, params on standard input: the same job, replayed.
    let (code, stdout, stderr) = output_with_stdin(
        remote(&app, &submit).arg("-"),
        r#"{ "prompt": "A red fox" }"#,
    )
    .await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("replayed") && stdout.contains(&id),
        "{stdout}"
    );

    // The same key with other params: exit 4, naming the changed path.
    let other = params_file(
        &dir,
        "other.json",
        &serde_json::json!({"prompt": "A grey fox"}),
    );
    let (code, stdout, stderr) = output(remote(&app, &submit).arg(&other)).await;
    assert_eq!(code, 4, "{stdout}{stderr}");
    assert!(
        stderr.contains("/prompt") && stderr.contains(&id),
        "{stderr}"
    );

    // A malformed key is refused before sending; params that are not JSON too: exit 1.
    let (code, _, stderr) = output(
        remote(
            &app,
            &["submit", "--kind", "chat.completion", "--key", "a b"],
        )
        .arg(&fox),
    )
    .await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("visible ASCII"), "{stderr}");
    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{").unwrap();
    let (code, _, stderr) =
        output(remote(&app, &["submit", "--kind", "chat.completion", "--key", "k"]).arg(&broken))
            .await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("not JSON"), "{stderr}");

    // The API's reasons for refusing a submission reach the terminal: the kinds there are
    // for an unknown kind, the path and message of each schema error.
    let (code, _, stderr) =
        output(remote(&app, &["submit", "--kind", "chat.nope", "--key", "k"]).arg(&fox)).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("there is no kind \"chat.nope\"")
            && stderr.contains("known kinds: ")
            && stderr.contains("chat.completion")
            && stderr.contains("image.generate"),
        "{stderr}"
    );
    let wrong = params_file(&dir, "wrong.json", &serde_json::json!({"prompt": 5}));
    let (code, _, stderr) =
        output(remote(&app, &["submit", "--kind", "chat.completion", "--key", "k"]).arg(&wrong))
            .await;
    assert_eq!(code, 1, "{stderr}");
    let line = stderr
        .lines()
        .find(|line| line.starts_with("onejob:   /prompt: "))
        .unwrap_or_else(|| panic!("the schema error's path and message: {stderr}"));
    assert!(line.len() > "onejob:   /prompt: ".len(), "{stderr}");

    // A bad API key: exit 6; nobody listening: exit 7.
    let (code, _, stderr) = output(onejob().args(submit).args([
        &fox,
        "--url",
        &app.url(""),
        "--api-key",
        "oj_0000000000000000_nope",
    ]))
    .await;
    assert_eq!(code, 6, "{stderr}");
    let (code, _, stderr) = output(onejob().args(submit).args([
        &fox,
        "--url",
        "http://127.0.0.1:1",
        "--api-key",
        &app.token,
    ]))
    .await;
    assert_eq!(code, 7, "{stderr}");
    assert!(stderr.contains("is onejob running at"), "{stderr}");

    // --wait prints the finished job and exits 0 when it succeeded.
    let (code, stdout, stderr) = output(
        remote(
            &app,
            &[
                "submit",
                "--kind",
                "chat.completion",
                "--key",
                "waited",
                "--wait",
                "--json",
            ],
        )
        .arg(&fox),
    )
    .await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    let job: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(job["state"], "succeeded");
    assert_eq!(job["result"]["text"], "fake answer: A red fox");
}

async fn status_and_watch_follow_a_job_until_it_succeeds(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |_| {}).await;
    let job = app.create("watched", &chat("Describe a red fox.")).await;
    let id = job["id"].as_str().unwrap().to_owned();

    // Not a terminal (stdout is a pipe): one plain line per change, then the result.
    let (code, stdout, stderr) = output(&mut remote(&app, &["watch", &id])).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        !stdout.contains('\x1b'),
        "no terminal escapes off a terminal: {stdout:?}"
    );
    let last_state = lines[lines.len() - 2];
    assert!(
        last_state.starts_with("succeeded") && last_state.contains("#1 fake succeeded"),
        "{stdout}"
    );
    assert_eq!(
        lines[lines.len() - 1],
        r#"result     {"text":"fake answer: Describe a red fox."}"#
    );
    let mut distinct = lines.clone();
    distinct.dedup();
    assert_eq!(distinct, lines, "a line per change, not per poll");

    let (code, stdout, _) = output(&mut remote(&app, &["status", &id])).await;
    assert_eq!(code, 0);
    assert_eq!(field(&stdout, "state"), Some("succeeded"), "{stdout}");
    let (code, stdout, _) = output(&mut remote(&app, &["status", &id, "--json"])).await;
    assert_eq!(code, 0);
    let shown: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(shown["id"], id.as_str());
    assert_eq!(shown["state"], "succeeded");

    // --json watch: one JSON object per change.
    let (code, stdout, _) = output(&mut remote(&app, &["watch", &id, "--json"])).await;
    assert_eq!(code, 0);
    let change: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert_eq!(change["job"]["state"], "succeeded");
    assert_eq!(change["attempts"][0]["provider"], "fake");

    // Another user's or a missing job: exit 5.
    let missing = uuid::Uuid::now_v7().to_string();
    let (code, _, stderr) = output(&mut remote(&app, &["status", &missing])).await;
    assert_eq!(code, 5, "{stderr}");
    let (code, _, stderr) = output(&mut remote(&app, &["watch", &missing])).await;
    assert_eq!(code, 5, "{stderr}");
}

async fn jobs_list_json_pages_and_filters(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let mut ids = Vec::new();
    for n in 0..3 {
        let job = app
            .create(&format!("list:{n}"), &chat(&format!("p{n}")))
            .await;
        ids.push(job["id"].as_str().unwrap().to_owned());
    }
    let image = serde_json::json!({"kind": "image.generate", "params": {"prompt": "a fox"}});
    let image_id = app.create("list:image", &image).await["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let (code, stdout, stderr) = output(&mut remote(
        &app,
        &["jobs", "list", "--json", "--limit", "2"],
    ))
    .await;
    assert_eq!(code, 0, "{stderr}");
    let page: Value = serde_json::from_str(&stdout).unwrap();
    let listed: Vec<&str> = page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [image_id.as_str(), ids[2].as_str()], "newest first");
    let next = page["next_before"].as_str().unwrap();
    assert_eq!(next, ids[2]);
    let (code, stdout, _) = output(&mut remote(
        &app,
        &["jobs", "list", "--json", "--limit", "2", "--before", next],
    ))
    .await;
    assert_eq!(code, 0);
    let page: Value = serde_json::from_str(&stdout).unwrap();
    let listed: Vec<&str> = page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [ids[1].as_str(), ids[0].as_str()]);

    let (code, stdout, _) = output(&mut remote(
        &app,
        &[
            "jobs",
            "list",
            "--json",
            "--kind",
            "image.generate",
            "--state",
            "pending",
        ],
    ))
    .await;
    assert_eq!(code, 0);
    let page: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(page["jobs"].as_array().unwrap().len(), 1, "{page}");
    assert_eq!(page["jobs"][0]["id"], image_id.as_str());
    assert_eq!(page["next_before"], Value::Null);

    // Text: one line per job.
    let (code, stdout, _) = output(&mut remote(&app, &["jobs", "list"])).await;
    assert_eq!(code, 0);
    assert_eq!(stdout.lines().count(), 4, "{stdout}");
    assert!(stdout.lines().all(|l| l.contains("pending")), "{stdout}");
    // A state that does not exist is a usage error: exit 1.
    let (code, _, stderr) = output(&mut remote(&app, &["jobs", "list", "--state", "done"])).await;
    assert_eq!(code, 1, "{stderr}");
}

async fn a_failed_job_exits_2_and_a_cancelled_one_3(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    for fake in [&fakes.primary, &fakes.backup] {
        fake.add_rule(Rule {
            matches: Some("doomed".into()),
            times: None,
            behaviour: Behaviour {
                outcome: Outcome::Fail,
                ..Default::default()
            },
        });
        fake.add_rule(Rule {
            matches: Some("forever".into()),
            times: None,
            behaviour: Behaviour {
                hang_after_ack: true,
                ..Default::default()
            },
        });
    }
    let app = TestApp::running(&db, &fakes, |_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let doomed = params_file(
        &dir,
        "doomed.json",
        &serde_json::json!({"prompt": "doomed"}),
    );
    let (code, stdout, stderr) = output(
        remote(
            &app,
            &[
                "submit",
                "--kind",
                "chat.completion",
                "--key",
                "doomed",
                "--wait",
            ],
        )
        .arg(&doomed),
    )
    .await;
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(
        field(&stdout, "state") == Some("failed") && field(&stdout, "error").is_some(),
        "{stdout}"
    );
    let (_, found) = json(
        app.get("/v1/jobs?idempotency_key=doomed")
            .send()
            .await
            .unwrap(),
    )
    .await;
    let id = found["id"].as_str().unwrap().to_owned();
    let (code, _, _) = output(&mut remote(&app, &["watch", &id])).await;
    assert_eq!(code, 2, "watch exits with the job's outcome too");
    let (code, _, _) = output(&mut remote(&app, &["status", &id])).await;
    assert_eq!(code, 0, "status only reports");

    let job = app.create("forever", &chat("forever")).await;
    let id = job["id"].as_str().unwrap().to_owned();
    let (code, _, stderr) = output(&mut remote(&app, &["watch", &id, "--timeout", "1s"])).await;
    assert_eq!(code, 8, "gave up waiting: {stderr}");
    assert!(
        stderr.contains("after 1.0s; it goes on"),
        "the timeout rounded for reading: {stderr}"
    );
    let forever = params_file(
        &dir,
        "forever.json",
        &serde_json::json!({"prompt": "forever"}),
    );
    let (code, _, stderr) = output(
        remote(
            &app,
            &[
                "submit",
                "--kind",
                "chat.completion",
                "--key",
                "forever-too",
                "--wait",
                "--timeout",
                "1s",
            ],
        )
        .arg(&forever),
    )
    .await;
    assert_eq!(code, 8, "gave up waiting: {stderr}");
    let waited = stderr
        .split("after waiting ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_else(|| panic!("how long it waited: {stderr}"));
    let (whole, tenths) = waited
        .strip_suffix('s')
        .and_then(|n| n.split_once('.'))
        .unwrap_or_else(|| panic!("seconds to the tenth: {waited:?}"));
    assert!(
        whole.parse::<u32>().is_ok() && tenths.len() == 1,
        "a rounded wait, not {waited:?}"
    );
    let cancelled = app
        .client
        .post(app.url(&format!("/v1/jobs/{id}/cancel")))
        .bearer_auth(&app.token)
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), 200);
    let (code, stdout, _) = output(&mut remote(&app, &["watch", &id])).await;
    assert_eq!(code, 3, "{stdout}");
    assert!(stdout.starts_with("cancelled"), "{stdout}");
}
