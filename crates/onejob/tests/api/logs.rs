//! Log lines: the config file's `log_format` applies (the flag wins over it), and no ANSI
//! colour codes are written when stderr is not a terminal.

use serde_json::Value;

use crate::{cli::start_until, discovery::onejob_in};

/// Runs `onejob serve` in `dir` with `args`, stderr piped, and returns its log lines up to
/// and including the one that says it is serving.
async fn serve_logs(dir: &std::path::Path, args: &[&str]) -> Vec<String> {
    let serving = |line: &str| line.contains("onejob serving");
    let (mut child, seen) =
        start_until(onejob_in(dir).args(args).env("RUST_LOG", "info"), serving).await;
    let _ = child.kill().await;
    assert!(seen.last().is_some_and(|l| serving(l)), "{seen:#?}");
    seen
}

fn json_config(dir: &std::path::Path, format: &str) -> String {
    let db = format!("sqlite://{}", dir.join("logs.db").display());
    let text = format!(
        "log_format = \"{format}\"\n{}",
        onejob::config::DEMO_CONFIG.replace("sqlite://onejob.db", &db)
    );
    let path = dir.join("logs.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[tokio::test]
async fn the_config_files_log_format_applies_and_the_flag_wins() {
    let dir = tempfile::tempdir().unwrap();
    let config = json_config(dir.path(), "json");
    let lines = serve_logs(
        dir.path(),
        &["serve", "--config", &config, "--listen", "127.0.0.1:0"],
    )
    .await;
    for line in &lines {
        let entry: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: not JSON: {line:?}"));
        assert!(entry["level"].is_string(), "{entry}");
        assert!(!line.contains("\x1b["), "no ANSI: {line:?}");
    }
    let lines = serve_logs(
        dir.path(),
        &[
            "--log-format",
            "text",
            "serve",
            "--config",
            &config,
            "--listen",
            "127.0.0.1:0",
        ],
    )
    .await;
    assert!(
        lines
            .iter()
            .all(|l| serde_json::from_str::<Value>(l).is_err()),
        "--log-format text wins over the file: {lines:#?}"
    );
}

#[tokio::test]
async fn text_logs_to_a_pipe_carry_no_ansi_escapes() {
    let dir = tempfile::tempdir().unwrap();
    let lines = serve_logs(dir.path(), &["serve", "--listen", "127.0.0.1:0"]).await;
    assert!(lines.len() >= 2, "{lines:#?}");
    for line in &lines {
        assert!(!line.contains('\x1b'), "no escape codes: {line:?}");
    }
}
