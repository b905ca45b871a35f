//! The README's deployment walk-through, run as written: its config file and every command
//! of its shell blocks, against a fresh PostgreSQL database reached over TLS, with the
//! bundled fake as the OpenAI-compatible upstream.
//!
//! The only changes made to the text are the ones a reader on another machine makes: the
//! database URL (through `ONEJOB_DATABASE`, as the README says), the ports (free ones
//! instead of 8080 and 9100), the upstream's address, and a one-second key cache instead
//! of 30 s. Each substitution must find its text, so a README that drifts fails here.

use std::{path::Path, process::Stdio, time::Duration};

use crate::helpers::{Backend, TestDatabase};

/// The README's section whose heading starts with `heading` (`## Deployment`), up to the
/// next `## ` heading.
pub(crate) fn section(heading: &str) -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("read README.md");
    let start = readme
        .find(&format!("\n{heading}"))
        .unwrap_or_else(|| panic!("README has a section {heading:?}"));
    let rest = &readme[start + 1..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    rest[..end].to_owned()
}

/// Every fenced block of `text`, in order: its info string and its lines.
pub(crate) fn fenced(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        match &mut current {
            None => {
                if let Some(lang) = line.trim_end().strip_prefix("```") {
                    current = Some((lang.to_owned(), String::new()));
                }
            }
            Some(_) if line.trim_end() == "```" => found.push(current.take().unwrap()),
            Some((_, block)) => {
                block.push_str(line);
                block.push('\n');
            }
        }
    }
    found
}

/// The fenced blocks of `text` whose info string is `lang`, in order.
pub(crate) fn blocks(text: &str, lang: &str) -> Vec<String> {
    fenced(text)
        .into_iter()
        .filter(|(info, _)| info == lang)
        .map(|(_, block)| block)
        .collect()
}

/// `text` with `from` replaced by `to`; `from` must be there.
pub(crate) fn substitute(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "the README's text no longer contains {from:?}"
    );
    text.replace(from, to)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn the_readme_deployment_walkthrough_runs_as_written() {
    let section = section("## Deployment");
    let [config] = &blocks(&section, "toml")[..] else {
        panic!("one toml block in the deployment section");
    };
    let script = blocks(&section, "sh").concat();
    assert!(
        script.contains("onejob migrate") && script.contains("onejob worker"),
        "{script}"
    );

    let db = TestDatabase::create(Backend::Postgres).await;
    let upstream = onejob_fake::FakeServer::spawn(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("onejob.toml"),
        substitute(
            config,
            "http://127.0.0.1:9001/v1",
            &format!("{}/v1", upstream.base_url()),
        ),
    )
    .unwrap();
    let (api, probes) = (free_port(), free_port());
    let script = substitute(&script, "127.0.0.1:8080", &format!("127.0.0.1:{api}"));
    let script = substitute(&script, "127.0.0.1:9100", &format!("127.0.0.1:{probes}"));
    let script = substitute(&script, "sleep 30", "sleep 2");

    let bin = Path::new(env!("CARGO_BIN_EXE_onejob")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let tls_url = format!("{}?sslmode=require", db.url);
    let stdout_path = dir.path().join("stdout");
    let stderr_path = dir.path().join("stderr");
    // Files, not pipes: the nodes the script starts in the background outlive it.
    let mut child = tokio::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(dir.path())
        .env("PATH", path)
        .env_remove("ONEJOB_CONFIG")
        .env("ONEJOB_DATABASE", &tls_url)
        .env("ONEJOB_LISTEN", format!("127.0.0.1:{api}"))
        .env("ONEJOB_WORKER__LISTEN", format!("127.0.0.1:{probes}"))
        .env("ONEJOB_HTTP__KEY_CACHE_TTL", "1s")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).unwrap())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .expect("run bash");
    let group = child.id().expect("script pid");
    let status = tokio::time::timeout(Duration::from_secs(120), child.wait()).await;

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
    let _ = std::process::Command::new("kill")
        .args(["-TERM", "--", &format!("-{group}")])
        .status();

    let stdout = std::fs::read_to_string(&stdout_path).unwrap();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    let status = status.expect("the walk-through finished within 2 minutes");
    assert!(
        status.unwrap().success(),
        "the walk-through failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let context = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
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
    assert_eq!(upstream.submissions().total, 1, "one upstream call");
}
