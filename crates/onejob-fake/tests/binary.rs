//! The `onejob-fake` binary: it prints its listening line, serves the rules given on the
//! command line, refuses invalid ones, and stops cleanly on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

#[cfg(unix)]
#[tokio::test]
async fn the_binary_prints_its_address_applies_command_line_rules_and_stops_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_onejob-fake"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--rule",
            r#"{"outcome": "fail"}"#,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the binary starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await
    .unwrap()
    .expect("a listening line");
    let base_url = line
        .trim()
        .strip_prefix("onejob-fake listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_owned();
    assert!(base_url.starts_with("http://127.0.0.1:"));

    let _ = rustls::crypto::ring::default_provider().install_default();
    let response = reqwest::Client::new()
        .post(format!("{base_url}/v1/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await;
    assert_eq!(response.expect("the binary answers").status(), 400);

    // SIGTERM stops it cleanly (exit status 0).
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child can be waited on") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("onejob-fake did not stop on SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status}");
}

#[test]
fn an_invalid_rule_on_the_command_line_is_refused() {
    let output = Command::new(env!("CARGO_BIN_EXE_onejob-fake"))
        .args(["--listen", "127.0.0.1:0", "--rule", r#"{"hang": true}"#])
        .output()
        .expect("the binary runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown rule field `hang`"), "{stderr}");
}
