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
