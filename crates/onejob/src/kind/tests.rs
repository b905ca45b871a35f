//! Kinds compiled from configurations: schemas, artifacts, endpoints and the providers a
//! kind may name.

use serde_json::json;

use super::{Kinds, Schema, has_artifact};
use crate::config::{
    DEFAULT_DATABASE, DEFAULT_LISTEN, DEFAULT_MAX_BODY_BYTES, DEMO_CONFIG, tests::parse,
};

#[test]
fn empty_outputs_are_no_artifact() {
    for empty in [
        json!(null),
        json!(false),
        json!(""),
        json!("  \n"),
        json!([]),
        json!({}),
        json!({"text": ""}),
        json!([{}, [null]]),
    ] {
        assert!(!has_artifact(&empty), "{empty} counted as an artifact");
    }
    for real in [
        json!("a fox"),
        json!(0),
        json!(true),
        json!({"n": 0}),
        json!([{"url": "x"}]),
    ] {
        assert!(has_artifact(&real), "{real} refused");
    }
}

#[test]
fn formats_are_validated() {
    let schema = Schema::compile(json!({
        "type": "object",
        "properties": {"url": {"type": "string", "format": "uri"}},
    }))
    .unwrap();
    assert!(
        schema
            .check(&json!({"url": "https://fake.invalid/a.png"}))
            .is_ok()
    );
    let errors = schema.check(&json!({"url": "not a uri"})).unwrap_err();
    assert_eq!(errors[0].path, "/url");
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
