//! The OpenAPI document: served, committed, and complete.

use onejob::http::{ProblemType, openapi};
use serde_json::Value;

use crate::helpers::{Backend, TestApp, TestDatabase, json};

#[tokio::test]
async fn the_committed_document_is_the_generated_one() {
    let committed =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../openapi.json"))
            .expect("openapi.json at the repository root");
    assert!(
        committed == openapi::pretty(),
        "openapi.json drifted from the code: regenerate it with \
         `cargo run -p onejob -- openapi > openapi.json`"
    );
}

#[tokio::test]
async fn the_server_serves_the_document_without_a_key() {
    let db = TestDatabase::create(Backend::Sqlite).await;
    let app = TestApp::spawn(&db).await;
    let (status, served) = json(
        app.client
            .get(app.url("/openapi.json"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let generated: Value = serde_json::from_str(&openapi::pretty()).unwrap();
    assert_eq!(served, generated);
    assert!(served["openapi"].as_str().unwrap().starts_with("3.1"));
}

#[test]
fn every_endpoint_problem_type_and_header_is_described() {
    let doc: Value = serde_json::from_str(&openapi::pretty()).unwrap();
    let paths = doc["paths"].as_object().unwrap();
    for (path, methods) in [
        ("/v1/jobs", vec!["post", "get"]),
        ("/v1/jobs/{id}", vec!["get"]),
        ("/v1/jobs/{id}/attempts", vec!["get"]),
        ("/v1/jobs/{id}/events", vec!["get"]),
        ("/v1/jobs/{id}/cancel", vec!["post"]),
        ("/v1/jobs/{id}/retry", vec!["post"]),
        ("/v1/attempts", vec!["get"]),
        ("/v1/attempts/{id}/resolve", vec!["post"]),
        ("/v1/certificates", vec!["get"]),
        ("/healthz", vec!["get"]),
        ("/readyz", vec!["get"]),
    ] {
        for method in methods {
            assert!(
                paths[path].get(method).is_some(),
                "{method} {path} is not described"
            );
        }
    }
    let types = doc["components"]["schemas"]["Problem"]["properties"]["type"]["enum"].to_string();
    for problem in ProblemType::ALL {
        assert!(
            types.contains(&problem.uri()),
            "{} is not described",
            problem.uri()
        );
    }
    let submit = &paths["/v1/jobs"]["post"];
    assert!(submit["parameters"].to_string().contains("Idempotency-Key"));
    assert!(
        submit["responses"]["200"]["headers"]
            .get("Idempotent-Replayed")
            .is_some()
    );
    assert!(
        submit["responses"]["201"]["headers"]
            .get("Location")
            .is_some()
    );
    assert!(submit["responses"]["422"].is_object());
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
}

/// Operation ids a generated client would turn into ambiguous method names.
const BARE_VERBS: &[&str] = &[
    "get", "list", "render", "submit", "create", "update", "delete", "cancel", "retry", "resolve",
    "events", "attempts", "healthz", "readyz", "by_key",
];

/// Every operation of the document: `(method path, operation)`.
fn operations(doc: &Value) -> Vec<(String, &Value)> {
    let mut operations = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            operations.push((format!("{method} {path}"), operation));
        }
    }
    operations
}

#[test]
fn operation_ids_are_unique_descriptive_camel_case() {
    let doc: Value = serde_json::from_str(&openapi::pretty()).unwrap();
    let mut seen = std::collections::BTreeMap::new();
    for (endpoint, operation) in operations(&doc) {
        let id = operation["operationId"]
            .as_str()
            .unwrap_or_else(|| panic!("{endpoint} has no operationId"));
        assert!(
            !BARE_VERBS.contains(&id),
            "{endpoint}: operationId {id:?} is a bare verb"
        );
        let mut chars = id.chars();
        assert!(
            chars.next().is_some_and(|c| c.is_ascii_lowercase())
                && id.chars().all(|c| c.is_ascii_alphanumeric())
                && id.chars().any(|c| c.is_ascii_uppercase()),
            "{endpoint}: operationId {id:?} is not camelCase of two words or more"
        );
        if let Some(other) = seen.insert(id.to_owned(), endpoint.clone()) {
            panic!("operationId {id:?} names both {other} and {endpoint}");
        }
    }
    for (id, endpoint) in [
        ("submitJob", "post /v1/jobs"),
        ("listJobs", "get /v1/jobs"),
        ("getJob", "get /v1/jobs/{id}"),
        ("listJobAttempts", "get /v1/jobs/{id}/attempts"),
        ("listJobEvents", "get /v1/jobs/{id}/events"),
        ("cancelJob", "post /v1/jobs/{id}/cancel"),
        ("retryJob", "post /v1/jobs/{id}/retry"),
        ("listAttempts", "get /v1/attempts"),
        ("resolveAttempt", "post /v1/attempts/{id}/resolve"),
        ("createChatCompletion", "post /v1/chat/completions"),
    ] {
        assert_eq!(seen.get(id).map(String::as_str), Some(endpoint), "{id}");
    }
    // The OpenAPI links name operations by id: each must exist.
    for (endpoint, operation) in operations(&doc) {
        for (status, response) in operation["responses"].as_object().unwrap() {
            for (name, link) in response["links"].as_object().into_iter().flatten() {
                let target = link["operationId"].as_str().unwrap();
                assert!(
                    seen.contains_key(target),
                    "{endpoint} {status}: link {name} names no operation ({target})"
                );
            }
        }
    }
}

#[test]
fn the_dashboard_pages_are_not_in_the_api_document() {
    let doc: Value = serde_json::from_str(&openapi::pretty()).unwrap();
    let ui: Vec<&String> = doc["paths"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|path| *path == "/ui" || path.starts_with("/ui/"))
        .collect();
    assert!(ui.is_empty(), "HTML routes in the API document: {ui:?}");
    assert!(
        !doc.to_string().contains("text/html"),
        "no operation answers HTML"
    );
    assert!(
        doc["components"]["securitySchemes"]
            .get("dashboard_cookie")
            .is_none()
    );
}

#[test]
fn error_answers_are_shared_components_not_inline_schemas() {
    let doc: Value = serde_json::from_str(&openapi::pretty()).unwrap();
    let shared = doc["components"]["responses"].as_object().unwrap();
    for (name, status) in [
        ("BadRequest", 400),
        ("Unauthorized", 401),
        ("Forbidden", 403),
        ("NotFound", 404),
        ("Conflict", 409),
        ("ContentTooLarge", 413),
        ("UnsupportedMediaType", 415),
        ("KeyReused", 422),
        ("Unavailable", 503),
    ] {
        let response = &shared[name];
        assert_eq!(
            response["content"]["application/problem+json"]["schema"]["$ref"],
            "#/components/schemas/Problem",
            "{name} ({status}) is a Problem"
        );
    }
    assert!(
        shared["Unavailable"]["headers"]
            .get("Retry-After")
            .is_some()
    );
    let mut referenced = 0;
    for (endpoint, operation) in operations(&doc) {
        for (status, response) in operation["responses"].as_object().unwrap() {
            if !status.starts_with('4') && !status.starts_with('5') {
                continue;
            }
            if let Some(target) = response.get("$ref") {
                let name = target
                    .as_str()
                    .and_then(|t| t.strip_prefix("#/components/responses/"))
                    .unwrap_or_else(|| panic!("{endpoint} {status}: {target}"));
                assert!(shared.contains_key(name), "{endpoint} {status}: {name}");
                referenced += 1;
                continue;
            }
            // Inline only with a named schema: the gateway's errors in OpenAI's shape (in
            // Anthropic's at its Messages API).
            let content = response["content"].as_object().unwrap();
            assert!(
                !content.contains_key("application/problem+json"),
                "{endpoint} {status}: a problem answer written inline, not referenced"
            );
            let shape = if endpoint.ends_with("/v1/messages") {
                "#/components/schemas/AnthropicError"
            } else {
                "#/components/schemas/OpenAiError"
            };
            for (media, body) in content {
                assert_eq!(
                    body["schema"]["$ref"], shape,
                    "{endpoint} {status} {media}: an inline error schema"
                );
            }
        }
    }
    assert!(referenced >= 30, "only {referenced} shared references");
}

#[test]
fn listing_jobs_by_key_is_documented_as_answering_one_job() {
    let doc: Value = serde_json::from_str(&openapi::pretty()).unwrap();
    let list = &doc["paths"]["/v1/jobs"]["get"];
    assert_eq!(list["operationId"], "listJobs");
    assert_eq!(
        list["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/JobOrList"
    );
    let answers: Vec<&Value> = doc["components"]["schemas"]["JobOrList"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|variant| &variant["$ref"])
        .collect();
    assert_eq!(
        answers,
        [
            "#/components/schemas/JobView",
            "#/components/schemas/JobList"
        ]
    );
    // The two are told apart by what each requires.
    let required = |schema: &str| doc["components"]["schemas"][schema]["required"].to_string();
    assert!(required("JobView").contains("\"id\""));
    assert!(required("JobList").contains("\"jobs\""));
    assert!(!required("JobView").contains("\"jobs\""));
    let key = list["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "idempotency_key")
        .unwrap();
    assert!(key["description"].as_str().unwrap().contains("JobView"));
}
