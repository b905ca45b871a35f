//! The `/_fake` control endpoints over real HTTP, and the JSON errors for bad bodies,
//! unknown routes and wrong methods.

mod harness;

use harness::{chat_body, start};
use onejob_fake::Submissions;
use serde_json::{Value, json};

#[tokio::test]
async fn rules_posted_over_http_apply_and_delete_removes_them() {
    let fake = start().await;
    let added = fake
        .post(
            "/_fake/rules",
            &json!({"matches": "fox", "http_status": 502}),
            None,
        )
        .await;
    assert_eq!(added.status(), 201);
    let echoed: Value = added.json().await.unwrap();
    assert_eq!(echoed["http_status"], 502);
    let scripted = fake
        .post("/v1/chat/completions", &chat_body("fox"), None)
        .await;
    assert_eq!(scripted.status(), 502);
    let cleared = fake
        .http
        .delete(fake.url("/_fake/rules"))
        .send()
        .await
        .unwrap();
    assert_eq!(cleared.status(), 204);
    let plain = fake
        .post("/v1/chat/completions", &chat_body("fox"), None)
        .await;
    assert_eq!(plain.status(), 200);
}

#[tokio::test]
async fn an_invalid_rule_is_a_400() {
    let fake = start().await;
    for bad in [
        json!({"hang_befor_ack": true}),
        json!({"outcome": "explode"}),
        json!({"http_status": 7}),
        json!("fail"),
    ] {
        let response = fake.post("/_fake/rules", &bad, None).await;
        assert_eq!(response.status(), 400, "{bad}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["type"], "invalid_request_error");
    }
}

#[tokio::test]
async fn submissions_over_http_match_the_in_process_log() {
    let fake = start().await;
    fake.post("/v1/chat/completions", &chat_body("x"), Some("k"))
        .await;
    fake.post("/v1/chat/completions", &chat_body("x"), Some("k"))
        .await;
    let response = fake.get("/_fake/submissions").await;
    assert_eq!(response.status(), 200);
    let over_http: Submissions = response.json().await.unwrap();
    assert_eq!(over_http, fake.server.submissions());
    assert_eq!(over_http.total, 1);
    assert_eq!(over_http.idempotent_replays, 1);
}

#[tokio::test]
async fn reset_clears_rules_tasks_and_counters() {
    let fake = start().await;
    fake.post("/_fake/rules", &json!({"outcome": "fail"}), None)
        .await;
    let task_id = {
        let response = fake
            .post("/v1/tasks", &json!({"kind": "k"}), Some("key"))
            .await;
        response.json::<Value>().await.unwrap()["task_id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    fake.post(&format!("/v1/tasks/{task_id}/cancel"), &json!({}), None)
        .await;
    let reset = fake.post("/_fake/reset", &json!({}), None).await;
    assert_eq!(reset.status(), 204);
    assert_eq!(fake.server.submissions(), Submissions::default());
    assert_eq!(
        fake.get(&format!("/v1/tasks/{task_id}")).await.status(),
        404
    );
    assert_eq!(
        fake.get("/v1/tasks?idempotency_key=key").await.status(),
        404
    );
    let after = fake
        .post("/v1/chat/completions", &chat_body("x"), None)
        .await;
    assert_eq!(after.status(), 200, "the failing rule is gone");
}

#[tokio::test]
async fn bad_json_bodies_are_400_json_errors_on_every_endpoint() {
    let fake = start().await;
    for path in ["/v1/chat/completions", "/v1/tasks", "/_fake/rules"] {
        let response = fake
            .http
            .post(fake.url(path))
            .header("content-type", "application/json")
            .body("{\"messages\": [")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{path}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["type"], "invalid_request_error", "{path}");
    }
    assert_eq!(fake.server.submissions().total, 0);
}

#[tokio::test]
async fn unknown_routes_and_methods_are_json_errors() {
    let fake = start().await;
    let unknown = fake.get("/v2/nothing").await;
    assert_eq!(unknown.status(), 404);
    let error: Value = unknown.json().await.unwrap();
    assert_eq!(error["error"]["type"], "not_found_error");
    let wrong_method = fake.get("/v1/chat/completions").await;
    assert_eq!(wrong_method.status(), 405);
    let error: Value = wrong_method.json().await.unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn dropping_the_server_stops_it() {
    let fake = start().await;
    let url = fake.url("/_fake/submissions");
    let http = fake.http.clone();
    drop(fake.server);
    let mut refused = false;
    for _ in 0..250 {
        if http.get(&url).send().await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(harness::POLL).await;
    }
    assert!(refused, "the server still answers after being dropped");
}
