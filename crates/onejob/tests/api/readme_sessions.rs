//! The README's sessions, run as written against `onejob serve` with no configuration.
//!
//! * The curl session: every `$ curl …` of its transcripts must answer the HTTP status the
//!   transcript shows, and every command of its shell blocks must succeed without a problem
//!   answer.
//! * The command line's `submit --wait` and `watch` transcript: each must succeed and print
//!   every line the transcript shows that carries no sample id.
//! * The command line's `keys list` / `keys revoke` transcript, on a config file's SQLite
//!   database, the sample key id replaced by a real one.
//!
//! The only changes are the ones a reader makes: the server's address (a free port instead
//! of 8080), and `KEY`/`ONEJOB_API_KEY` and `JOB` set to the key the server printed and the
//! job it made (the lines that set them to the sample values are skipped, and the sample
//! job id is replaced by the real one).

use std::time::Duration;

use crate::{
    cli::serve_demo,
    deployment::{fenced, section, substitute},
};

/// One command of a `text` transcript: the command (continuation lines joined) and the
/// status its first output line shows, if it shows one.
struct Shown {
    command: String,
    status: Option<u16>,
}

fn transcript(block: &str) -> Vec<Shown> {
    let mut shown: Vec<Shown> = Vec::new();
    let mut continuing = false;
    for line in block.lines() {
        if let Some(command) = line.strip_prefix("$ ") {
            shown.push(Shown {
                command: command.to_owned(),
                status: None,
            });
            continuing = command.ends_with('\\');
        } else if continuing {
            let last = shown.last_mut().expect("a command before its continuation");
            last.command.push('\n');
            last.command.push_str(line);
            continuing = line.ends_with('\\');
        } else if let Some(last) = shown.last_mut()
            && last.status.is_none()
            && let Some(code) = line.strip_prefix("HTTP/1.1 ")
        {
            last.status = code.split_whitespace().next().and_then(|c| c.parse().ok());
        }
    }
    shown
}

/// The job id the README's samples show.
const SAMPLE_JOB: &str = "01a22a98-4599-75a0-b1cb-7cdbcd0f53a7";

/// Runs `command` with bash: whether it succeeded, what it printed on stdout and on stderr.
async fn bash(command: &str, key: &str, job: &str) -> (bool, String, String) {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_onejob"))
        .parent()
        .unwrap()
        .to_owned();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new("bash")
            .args(["-euo", "pipefail", "-c", command])
            .env("PATH", path)
            .env("KEY", key)
            .env("ONEJOB_API_KEY", key)
            .env("JOB", job)
            .env_remove("ONEJOB_URL")
            .env_remove("ONEJOB_CONFIG")
            .env_remove("ONEJOB_DATABASE")
            .env("RUST_LOG", "warn")
            .output(),
    )
    .await
    .expect("a README command finished within 30 s")
    .expect("run bash");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The `"id"` of the JSON object in an answer.
fn job_id(answer: &str) -> Option<String> {
    let body = answer.lines().last()?;
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    value["id"].as_str().map(str::to_owned)
}

#[tokio::test]
async fn the_readme_curl_session_answers_as_shown() {
    let section = section("## A curl session");
    let dir = tempfile::tempdir().unwrap();
    let (mut server, url, key) = serve_demo(dir.path()).await;
    let mut job = String::new();
    let (mut transcribed, mut scripted) = (0, 0);
    for (lang, block) in fenced(&section) {
        match lang.as_str() {
            "text" => {
                for shown in transcript(&block) {
                    if shown.command.starts_with("cargo run -p onejob -- serve") {
                        assert!(block.contains("onejob is running on http://127.0.0.1:8080"));
                        continue;
                    }
                    let command = substitute(&shown.command, "http://127.0.0.1:8080", &url);
                    let (ok, answer, errors) = bash(&command, &key, &job).await;
                    assert!(ok, "{command}\n{answer}{errors}");
                    let status = answer
                        .lines()
                        .next()
                        .and_then(|line| line.strip_prefix("HTTP/1.1 "))
                        .and_then(|rest| rest.split_whitespace().next())
                        .and_then(|code| code.parse::<u16>().ok());
                    assert_eq!(
                        status, shown.status,
                        "the README shows another status for\n{command}\n{answer}"
                    );
                    if job.is_empty()
                        && let Some(id) = job_id(&answer)
                    {
                        job = id;
                    }
                    transcribed += 1;
                }
            }
            "sh" => {
                for line in block.lines() {
                    let line = line.trim();
                    if line.is_empty() || line.starts_with("KEY=") || line.starts_with("JOB=") {
                        continue;
                    }
                    let command = substitute(line, "http://127.0.0.1:8080", &url);
                    let (ok, answer, errors) = bash(&command, &key, &job).await;
                    assert!(
                        ok && !answer.contains("onejob.dev/problems/"),
                        "{command}\n{answer}{errors}"
                    );
                    scripted += 1;
                }
            }
            other => panic!("a {other:?} block in the curl session: run it here"),
        }
    }
    assert!(!job.is_empty(), "the first answer named a job");
    assert!(
        transcribed >= 3 && scripted >= 7,
        "ran {transcribed} transcribed and {scripted} scripted commands"
    );
    let _ = server.kill().await;
}

#[tokio::test]
async fn the_readme_command_line_session_prints_as_shown() {
    let section = section("## Command line");
    let block = fenced(&section)
        .into_iter()
        .find(|(lang, block)| lang == "text" && block.contains("| onejob submit"))
        .map(|(_, block)| block)
        .expect("the command line section shows a submit session");
    let dir = tempfile::tempdir().unwrap();
    let (mut server, url, key) = serve_demo(dir.path()).await;
    let mut job = String::new();
    let mut ran = 0;
    for (index, line) in block.lines().enumerate() {
        let Some(command) = line.strip_prefix("$ ") else {
            continue;
        };
        if command.starts_with("export ONEJOB_API_KEY=") {
            continue;
        }
        let command = command.replace(SAMPLE_JOB, &job);
        let (ok, stdout, stderr) =
            bash(&format!("export ONEJOB_URL={url}; {command}"), &key, &job).await;
        let printed = format!("{stderr}{stdout}");
        assert!(ok, "{command}\n{printed}");
        if job.is_empty() {
            job = printed
                .split_whitespace()
                .map(|word| word.trim_end_matches(';'))
                .find(|word| word.len() == 36 && word.matches('-').count() == 4)
                .map(str::to_owned)
                .unwrap_or_default();
        }
        // The lines shown after this command, up to the next one.
        for shown in block.lines().skip(index + 1) {
            if shown.starts_with("$ ") {
                break;
            }
            if shown.contains(SAMPLE_JOB) || shown.contains('…') {
                continue;
            }
            assert!(
                printed
                    .lines()
                    .any(|line| line.trim_end() == shown.trim_end()),
                "the README shows {shown:?} after\n{command}\nbut it printed\n{printed}"
            );
        }
        ran += 1;
    }
    assert!(!job.is_empty() && ran >= 2, "ran {ran} commands");
    let _ = server.kill().await;
}

/// The key id the README's `keys` sample shows.
const SAMPLE_KEY_ID: &str = "3f9c1e0a7b2d4c58";

#[tokio::test]
async fn the_readme_keys_session_prints_as_shown() {
    let section = section("## Command line");
    let block = fenced(&section)
        .into_iter()
        .find(|(lang, block)| lang == "text" && block.contains("$ onejob keys list"))
        .map(|(_, block)| block)
        .expect("the command line section shows a keys session");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("onejob.toml"),
        "database = \"sqlite://keys.db\"\n",
    )
    .unwrap();
    let in_dir = |command: &str| format!("cd {} && {command}", dir.path().display());
    // The keys commands refuse a database that does not exist yet: it is made first.
    let (ok, _, errors) = bash(&in_dir("onejob migrate --config onejob.toml"), "", "").await;
    assert!(ok, "{errors}");
    let (ok, token, errors) = bash(
        &in_dir("onejob keys create --config onejob.toml --tenant acme --user alice"),
        "",
        "",
    )
    .await;
    assert!(ok, "{errors}");
    let id = token
        .trim()
        .split('_')
        .nth(1)
        .expect("oj_ID_SECRET")
        .to_owned();
    let mut ran = 0;
    for (index, line) in block.lines().enumerate() {
        let Some(command) = line.strip_prefix("$ ") else {
            continue;
        };
        let command = command.replace(SAMPLE_KEY_ID, &id);
        let (ok, stdout, stderr) = bash(&in_dir(&command), "", "").await;
        assert!(ok, "{command}\n{stdout}{stderr}");
        for shown in block.lines().skip(index + 1) {
            if shown.starts_with("$ ") {
                break;
            }
            // The creation time is the run's own.
            if shown.contains("T10:00:00Z") {
                assert!(stdout.lines().any(|line| line.starts_with(&id)
                    && line.contains("acme")
                    && line.contains("alice")));
                continue;
            }
            let shown = shown.replace(SAMPLE_KEY_ID, &id);
            assert!(
                stdout
                    .lines()
                    .any(|line| line.trim_end() == shown.trim_end()),
                "the README shows {shown:?} after\n{command}\nbut it printed\n{stdout}"
            );
        }
        ran += 1;
    }
    assert_eq!(ran, 2, "keys list and keys revoke");
}
