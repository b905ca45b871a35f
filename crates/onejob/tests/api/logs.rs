//! Log lines: the config file's `log_format` applies (the flag wins over it), no ANSI
//! colour codes are written when stderr is not a terminal, a JSON line never repeats a key,
//! and an unreachable provider is a warning that names where it was looked for.

use serde_json::Value;

use crate::{
    cli::start_until,
    discovery::onejob_in,
    helpers::{Backend, TestApp, TestDatabase, chat},
};

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

/// The keys of every JSON object in `line` that appear twice in that object (a JSON parser
/// keeps only the last of them, so the first is lost to log pipelines).
fn repeated_keys(line: &str) -> Vec<String> {
    use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
    struct Keys<'a>(&'a mut Vec<String>);
    impl<'de> Visitor<'de> for Keys<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                if !seen.insert(key.clone()) {
                    self.0.push(key);
                }
                map.next_value_seed(Seed(&mut *self.0))?;
            }
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(Seed(&mut *self.0))?.is_some() {}
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
    }
    struct Seed<'a>(&'a mut Vec<String>);
    impl<'de> serde::de::DeserializeSeed<'de> for Seed<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
            deserializer.deserialize_any(Keys(self.0))
        }
    }
    let mut repeated = Vec::new();
    let mut deserializer = serde_json::Deserializer::from_str(line);
    serde::de::DeserializeSeed::deserialize(Seed(&mut repeated), &mut deserializer)
        .unwrap_or_else(|e| panic!("{e}: not JSON: {line:?}"));
    repeated
}

#[test]
fn repeated_keys_are_found_at_any_depth() {
    assert!(repeated_keys(r#"{"a": 1, "b": {"c": [1, {"d": 2}]}}"#).is_empty());
    assert_eq!(repeated_keys(r#"{"a": {"m": 1, "m": 2}}"#), ["m"]);
}

/// A worker's JSON logs through attempts that end without a result: no line repeats a key
/// (an attempt's failure was logged with a `message` field beside the event's own message),
/// and a provider that cannot be reached is a warning naming the URL it was looked for at.
#[tokio::test]
async fn json_logs_never_repeat_a_key_and_an_unreachable_provider_is_named() {
    let db = TestDatabase::create(Backend::Sqlite).await;
    let api = TestApp::spawn(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let down = "http://127.0.0.1:9/v1";
    let config = dir.path().join("worker.toml");
    std::fs::write(
        &config,
        format!(
            r#"database = "{database}"
log_format = "json"

[worker]
poll_interval = "100ms"

[[provider]]
name = "down"
adapter = "openai-chat"
base_url = "{down}"
model = "m"

[[kind]]
name = "chat.completion"
providers = ["down"]
max_attempts = 2
retry_backoff = "50ms"
"#,
            database = db.url
        ),
    )
    .unwrap();
    let job = api.create("unreachable", &chat("anyone there?")).await;
    let id = job["id"].as_str().unwrap().to_owned();
    let ended = |line: &str| line.contains("attempt ended without a result");
    let mut ends = 0;
    let (mut worker, lines) = start_until(
        onejob_in(dir.path())
            .args(["worker", "--config"])
            .arg(&config)
            .env("RUST_LOG", "info"),
        |line| {
            ends += usize::from(ended(line));
            ends == 2
        },
    )
    .await;
    api.wait_job(&id, std::time::Duration::from_secs(30), |j| {
        j["state"] == "failed"
    })
    .await;
    let _ = worker.kill().await;
    for line in &lines {
        let repeated = repeated_keys(line);
        assert!(repeated.is_empty(), "{repeated:?} twice in {line}");
    }
    let unreachable: Vec<Value> = lines
        .iter()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|entry| entry["fields"]["message"] == "the provider could not be reached")
        .collect();
    assert!(!unreachable.is_empty(), "{lines:#?}");
    for entry in &unreachable {
        assert_eq!(entry["level"], "WARN", "{entry}");
        assert!(
            entry.to_string().contains("127.0.0.1:9"),
            "the URL is named: {entry}"
        );
    }
}
