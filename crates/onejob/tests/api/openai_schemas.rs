//! OpenAI's own schemas for what the gateway answers (`fixtures/openai/`, vendored from
//! OpenAI's OpenAPI document): every gateway answer the API tests read — bodies, each stream
//! chunk, errors — is validated against the schema an OpenAI SDK expects there, so
//! "drop-in" is checked against the vendor's description and not only against the SDKs'
//! tolerance.
//!
//! The document is OpenAPI's dialect of JSON Schema: `"nullable": true` beside a schema
//! means null is valid too (OpenAI's streams send `"finish_reason": null` in every chunk but
//! the last). The loader says so in JSON Schema's own words, `anyOf: [schema, null]`.

use std::{collections::HashMap, sync::Mutex, sync::OnceLock};

use serde_json::{Value, json};

/// The vendored schemas, as one document whose `components/schemas` the references name.
fn document() -> &'static Value {
    static DOCUMENT: OnceLock<Value> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let text = include_str!("fixtures/openai/schemas.json");
        let mut document =
            serde_json::from_str(text).expect("fixtures/openai/schemas.json is JSON");
        spell_nullable(&mut document);
        document
    })
}

/// Rewrites every `{…, "nullable": true}` as `{"anyOf": [{…}, {"type": "null"}]}`.
fn spell_nullable(node: &mut Value) {
    match node {
        Value::Object(members) => {
            for member in members.values_mut() {
                spell_nullable(member);
            }
            if members.remove("nullable") == Some(Value::Bool(true)) {
                let schema = Value::Object(std::mem::take(members));
                members.insert("anyOf".into(), json!([schema, {"type": "null"}]));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(spell_nullable),
        _ => {}
    }
}

fn validator(name: &str) -> &'static jsonschema::Validator {
    static VALIDATORS: OnceLock<Mutex<HashMap<String, &'static jsonschema::Validator>>> =
        OnceLock::new();
    let mut validators = VALIDATORS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    validators.entry(name.to_owned()).or_insert_with(|| {
        assert!(
            document()["components"]["schemas"].get(name).is_some(),
            "no schema {name} in fixtures/openai/schemas.json"
        );
        let mut schema = document().clone();
        schema["$ref"] = json!(format!("#/components/schemas/{name}"));
        let compiled = jsonschema::validator_for(&schema)
            .unwrap_or_else(|e| panic!("OpenAI's {name} compiles: {e}"));
        Box::leak(Box::new(compiled))
    })
}

/// Asserts that `value` is valid under OpenAI's schema `name`.
pub(crate) fn conforms(name: &str, value: &Value) {
    let errors: Vec<String> = validator(name)
        .iter_errors(value)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "not a valid OpenAI {name}: {}\n{value:#}",
        errors.join("; ")
    );
}

/// Asserts that a gateway answer with `status` is what OpenAI answers there: a
/// `chat.completion` for a `200`, else an error.
pub(crate) fn conforms_as_answer(status: u16, body: &Value) {
    if status == 200 {
        conforms("CreateChatCompletionResponse", body);
    } else {
        conforms("ErrorResponse", body);
    }
}

/// Asserts that one `data:` payload of a gateway stream is a chunk, `[DONE]`, or an error.
pub(crate) fn conforms_as_event(data: &str) {
    if data == "[DONE]" {
        return;
    }
    let event: Value = serde_json::from_str(data)
        .unwrap_or_else(|e| panic!("a stream event is JSON or [DONE]: {e}: {data}"));
    if event.get("error").is_some() {
        conforms("ErrorResponse", &event);
    } else {
        conforms("CreateChatCompletionStreamResponse", &event);
    }
}

#[test]
fn the_schemas_hold_openais_own_examples_and_refuse_others() {
    conforms(
        "CreateChatCompletionResponse",
        &json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": null,
            "message": {"role": "assistant", "content": "hi", "refusal": null}}]}),
    );
    conforms(
        "ErrorResponse",
        &json!({"error": {"message": "m", "type": "t", "param": null, "code": null}}),
    );
    // Without `param` and `code` an SDK's error is not OpenAI's.
    let missing = json!({"error": {"message": "m", "type": "t"}});
    assert!(!validator("ErrorResponse").is_valid(&missing));
    let chunk = json!({"id": "c", "object": "chat.completion.chunk", "created": 1,
        "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": null}]});
    conforms("CreateChatCompletionStreamResponse", &chunk);
    let mut wrong = chunk;
    wrong["object"] = json!("chat.completion");
    assert!(!validator("CreateChatCompletionStreamResponse").is_valid(&wrong));
}
