//! Configuration loading: defaults, overrides and error messages that point at the problem.

use std::path::{Path, PathBuf};

use super::*;
use crate::kind::Kinds;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml(
        text,
        Path::new("onejob.toml"),
        PathBuf::from("."),
        std::iter::empty(),
    )
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn the_demo_config_loads_and_compiles() {
    let config = parse(DEMO_CONFIG).unwrap();
    assert_eq!(config.database, DEFAULT_DATABASE);
    assert_eq!(config.listen.to_string(), DEFAULT_LISTEN);
    assert_eq!(config.max_body_bytes, DEFAULT_MAX_BODY_BYTES);
    let kinds = Kinds::compile(&config).unwrap();
    assert_eq!(
        kinds.names(),
        vec![
            "chat.completion",
            "chat.fast",
            "embed.fast",
            "image.draw",
            "image.generate",
            "messages.fast",
            "respond.fast"
        ]
    );
    assert_eq!(
        kinds.models(),
        vec!["converse", "draw", "embed", "fast", "respond"]
    );
    assert_eq!(
        kinds.by_model("embed").unwrap().endpoint,
        crate::gateway::Endpoint::Embeddings
    );
}

#[test]
fn a_gateway_kind_takes_only_chat_providers_and_no_template_or_output_schema() {
    let base = r#"
[[provider]]
name = "tasks"
adapter = "async-task"
submit_url = "http://x/t"
status_url = "http://x/t/{task_id}"
task_id_pointer = "/id"
status_pointer = "/s"
result_pointer = "/r"
succeeded = ["ok"]

[[provider]]
name = "chat"
adapter = "openai-chat"
base_url = "http://x/v1"
model = "m"
"#;
    let compile = |kind: &str| {
        let config = parse(&format!("{base}\n{kind}")).unwrap();
        Kinds::compile(&config)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    assert!(
        compile("[[kind]]\nname = \"k\"\nopenai_models = [\"m\"]\nproviders = [\"chat\"]").is_ok()
    );
    let tasks = compile("[[kind]]\nname = \"k\"\nopenai_models = [\"m\"]\nproviders = [\"tasks\"]");
    assert!(tasks.unwrap_err().contains("not an openai-chat"));
    let schema = compile(
        "[[kind]]\nname = \"k\"\nopenai_models = [\"m\"]\nproviders = [\"chat\"]\n[kind.output_schema]\ntype = \"object\"",
    );
    assert!(schema.unwrap_err().contains("output_schema"));
    let twice = compile(
        "[[kind]]\nname = \"a\"\nopenai_models = [\"m\"]\nproviders = [\"chat\"]\n[[kind]]\nname = \"b\"\nopenai_models = [\"m\"]\nproviders = [\"chat\"]",
    );
    assert!(twice.unwrap_err().contains("already served"));
}

#[test]
fn an_empty_file_means_defaults() {
    let config = parse("").unwrap();
    assert_eq!(config.database, DEFAULT_DATABASE);
    assert!(config.kinds.is_empty());
}

#[test]
fn a_syntax_error_names_the_line() {
    let error = parse("listen = \"127.0.0.1:8080\"\ndatabase = \n").unwrap_err();
    let message = error.to_string();
    assert!(message.contains("onejob.toml"), "{message}");
    assert!(message.contains("line 2"), "{message}");
}

#[test]
fn a_wrong_type_names_the_line_and_key() {
    let message = parse("database = \"sqlite://x.db\"\nmax_body_bytes = \"big\"\n")
        .unwrap_err()
        .to_string();
    assert!(message.contains("line 2"), "{message}");
    assert!(message.contains("max_body_bytes"), "{message}");
}

#[test]
fn an_unknown_key_is_refused_by_name() {
    let message = parse("[[kind]]\nname = \"k\"\nmax_attempt = 3\n")
        .unwrap_err()
        .to_string();
    assert!(message.contains("max_attempt"), "{message}");
    assert!(message.contains("line 3"), "{message}");
}

#[test]
fn environment_overrides_win_and_others_are_ignored() {
    let config = Config::from_toml(
        "database = \"sqlite://file.db\"\n",
        Path::new("onejob.toml"),
        PathBuf::from("."),
        env(&[
            ("ONEJOB_DATABASE", "postgres://postgres@127.0.0.1/db"),
            ("ONEJOB_MAX_BODY_BYTES", "2048"),
            ("ONEJOB_WORKER__CONCURRENCY", "3"),
            ("ONEJOB_TEST_SOMETHING_ELSE", "ignored"),
            ("OTHER", "ignored"),
        ]),
    )
    .unwrap();
    assert_eq!(config.database, "postgres://postgres@127.0.0.1/db");
    assert_eq!(config.max_body_bytes, 2048);
    assert_eq!(config.worker.concurrency, 3);
}

#[test]
fn a_bad_environment_override_names_the_variable() {
    let message = Config::from_toml(
        "",
        Path::new("onejob.toml"),
        PathBuf::from("."),
        env(&[("ONEJOB_MAX_BODY_BYTES", "lots")]),
    )
    .unwrap_err()
    .to_string();
    assert!(message.contains("ONEJOB_MAX_BODY_BYTES"), "{message}");
}

#[test]
fn a_kind_naming_an_undeclared_provider_is_refused() {
    let config = parse("[[kind]]\nname = \"k\"\nproviders = [\"ghost\"]\n").unwrap();
    let message = Kinds::compile(&config).unwrap_err().to_string();
    assert!(message.contains("kind[k].providers[0]"), "{message}");
    assert!(message.contains("ghost"), "{message}");
}

#[test]
fn an_invalid_schema_is_refused() {
    let config =
        parse("[[kind]]\nname = \"k\"\nparams_schema = { type = \"nonsense\" }\n").unwrap();
    let message = Kinds::compile(&config).unwrap_err().to_string();
    assert!(message.contains("kind[k].params_schema"), "{message}");
}

#[test]
fn a_missing_schema_file_is_named() {
    let config =
        parse("[[kind]]\nname = \"k\"\nparams_schema = \"schemas/missing.json\"\n").unwrap();
    let message = Kinds::compile(&config).unwrap_err().to_string();
    assert!(message.contains("schemas/missing.json"), "{message}");
}

#[test]
fn durations_read_as_humans_write_them() {
    let config =
        parse("[[kind]]\nname = \"k\"\nattempt_timeout = \"1m 30s\"\nhedge_after = \"250ms\"\n")
            .unwrap();
    assert_eq!(config.kinds[0].attempt_timeout.as_secs(), 90);
    assert_eq!(config.kinds[0].hedge_after.unwrap().as_millis(), 250);
    assert!(config.kinds[0].settle_unknown_after.is_none());
}

#[test]
fn http_bounds_have_defaults_and_can_be_set_by_file_or_env() {
    let defaults = parse("").unwrap();
    assert_eq!(
        defaults.http.header_read_timeout,
        std::time::Duration::from_secs(10)
    );
    assert_eq!(
        defaults.http.request_timeout,
        std::time::Duration::from_secs(30)
    );
    let set = Config::from_toml(
        "[http]\nheader_read_timeout = \"2s\"\n",
        Path::new("onejob.toml"),
        PathBuf::from("."),
        env(&[("ONEJOB_HTTP__REQUEST_TIMEOUT", "5s")]),
    )
    .unwrap();
    assert_eq!(
        set.http.header_read_timeout,
        std::time::Duration::from_secs(2)
    );
    assert_eq!(set.http.request_timeout, std::time::Duration::from_secs(5));
    assert!(
        parse("[http]\nrequest_timout = \"5s\"\n").is_err(),
        "typos are refused"
    );
}

#[test]
fn a_gateway_kind_serves_one_endpoint_with_providers_of_its_api() {
    let base = r#"
[[provider]]
name = "chat"
adapter = "openai-chat"
base_url = "http://x/v1"
model = "m"

[[provider]]
name = "claude"
adapter = "anthropic-messages"
base_url = "http://x/v1"
model = "c"
"#;
    let compile = |kinds: &str| Kinds::compile(&parse(&format!("{base}{kinds}")).unwrap());
    assert!(
        compile("[[kind]]\nname = \"e\"\nembedding_models = [\"e\"]\nproviders = [\"chat\"]")
            .is_ok()
    );
    assert!(
        compile("[[kind]]\nname = \"a\"\nanthropic_models = [\"a\"]\nproviders = [\"claude\"]")
            .is_ok()
    );
    let wrong_api =
        compile("[[kind]]\nname = \"a\"\nanthropic_models = [\"a\"]\nproviders = [\"chat\"]")
            .unwrap_err()
            .to_string();
    assert!(
        wrong_api.contains("not an anthropic-messages"),
        "{wrong_api}"
    );
    let two = compile(
        "[[kind]]\nname = \"k\"\nopenai_models = [\"m\"]\nembedding_models = [\"e\"]\nproviders = [\"chat\"]",
    )
    .unwrap_err()
    .to_string();
    assert!(two.contains("serves one endpoint"), "{two}");
}
