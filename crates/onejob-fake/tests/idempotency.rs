//! Upstream idempotency over real HTTP: a submit whose `Idempotency-Key` the endpoint has
//! seen does not run again (same task, same completion, `total` unchanged,
//! `idempotent_replays` incremented), and a task can be looked up by its key.

mod harness;

use std::time::Duration;

use harness::{chat_body, rule, start};
use serde_json::{Value, json};

fn task_body() -> Value {
    json!({"kind": "image.generate", "params": {"prompt": "a fox"}})
}

#[tokio::test]
async fn a_task_replay_answers_the_original_task_without_running_again() {
    let fake = start().await;
    let first = fake.submit_task(&task_body(), Some("order-42")).await;
    let replay = fake.post("/v1/tasks", &task_body(), Some("order-42")).await;
    assert_eq!(replay.status(), 200);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let replayed: Value = replay.json().await.unwrap();
    assert_eq!(replayed["task_id"], first.as_str());
    let submissions = fake.server.submissions();
    assert_eq!(submissions.total, 1);
    assert_eq!(submissions.idempotent_replays, 1);
    assert_eq!(
        submissions.requests[0].idempotency_key.as_deref(),
        Some("order-42")
    );
    assert_eq!(
        submissions.requests[0].task_id.as_deref(),
        Some(first.as_str())
    );
}

#[tokio::test]
async fn a_task_replay_during_the_ack_delay_answers_at_once() {
    let fake = start().await;
    fake.server
        .add_rule(rule(json!({"times": 1, "hang_before_ack": true})));
    let lost = fake
        .http
        .post(fake.url("/v1/tasks"))
        .header("Idempotency-Key", "k")
        .json(&task_body())
        .timeout(Duration::from_millis(200))
        .send()
        .await;
    assert!(lost.expect_err("the first ack is lost").is_timeout());
    let replay = fake.post("/v1/tasks", &task_body(), Some("k")).await;
    assert_eq!(replay.status(), 200);
    let replayed: Value = replay.json().await.unwrap();
    let submissions = fake.server.submissions();
    assert_eq!(
        replayed["task_id"].as_str(),
        submissions.requests[0].task_id.as_deref()
    );
    assert_eq!(submissions.total, 1);
    assert_eq!(submissions.idempotent_replays, 1);
}

#[tokio::test]
async fn a_different_key_or_no_key_runs_again() {
    let fake = start().await;
    let a = fake.submit_task(&task_body(), Some("a")).await;
    let b = fake.submit_task(&task_body(), Some("b")).await;
    let c = fake.submit_task(&task_body(), None).await;
    assert!(a != b && b != c && a != c);
    let submissions = fake.server.submissions();
    assert_eq!(submissions.total, 3);
    assert_eq!(submissions.idempotent_replays, 0);
}

#[tokio::test]
async fn a_task_is_found_by_its_idempotency_key() {
    let fake = start().await;
    let task_id = fake.submit_task(&task_body(), Some("find-me")).await;
    let found = fake.get("/v1/tasks?idempotency_key=find-me").await;
    assert_eq!(found.status(), 200);
    let view: Value = found.json().await.unwrap();
    assert_eq!(view["task_id"], task_id.as_str());
    let missing = fake.get("/v1/tasks?idempotency_key=never-sent").await;
    assert_eq!(missing.status(), 404);
    let error: Value = missing.json().await.unwrap();
    assert_eq!(error["error"]["type"], "not_found_error");
    assert_eq!(fake.get("/v1/tasks").await.status(), 400);
}

#[tokio::test]
async fn a_chat_replay_answers_the_same_completion_without_running_again() {
    let fake = start().await;
    let body = chat_body("caption this");
    let first: Value = fake
        .post("/v1/chat/completions", &body, Some("cap-1"))
        .await
        .json()
        .await
        .unwrap();
    let replay = fake
        .post("/v1/chat/completions", &body, Some("cap-1"))
        .await;
    assert_eq!(replay.status(), 200);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let second: Value = replay.json().await.unwrap();
    assert_eq!(first, second);
    let submissions = fake.server.submissions();
    assert_eq!(submissions.total, 1);
    assert_eq!(submissions.idempotent_replays, 1);
}

#[tokio::test]
async fn a_chat_replay_while_the_first_is_in_flight_waits_for_it() {
    let fake = start().await;
    fake.server.add_rule(rule(json!({"run_ms": 400})));
    let body = chat_body("slow caption");
    let first = {
        let request = fake
            .http
            .post(fake.url("/v1/chat/completions"))
            .header("Idempotency-Key", "slow")
            .json(&body);
        tokio::spawn(async move { request.send().await.unwrap().json::<Value>().await })
    };
    fake.eventually_total(1).await;
    let second: Value = fake
        .post("/v1/chat/completions", &body, Some("slow"))
        .await
        .json()
        .await
        .unwrap();
    let first = first.await.unwrap().unwrap();
    assert_eq!(first, second);
    assert!(first["id"].as_str().unwrap().starts_with("chatcmpl-"));
    let submissions = fake.server.submissions();
    assert_eq!(submissions.total, 1);
    assert_eq!(submissions.idempotent_replays, 1);
}

#[tokio::test]
async fn a_chat_failure_is_replayed_as_the_same_failure() {
    let fake = start().await;
    fake.server
        .add_rule(rule(json!({"times": 1, "outcome": "fail"})));
    let body = chat_body("x");
    let first = fake.post("/v1/chat/completions", &body, Some("f")).await;
    assert_eq!(first.status(), 400);
    let replay = fake.post("/v1/chat/completions", &body, Some("f")).await;
    assert_eq!(replay.status(), 400);
    assert_eq!(fake.server.submissions().total, 1);
}

#[tokio::test]
async fn the_two_endpoints_have_separate_key_caches() {
    let fake = start().await;
    fake.submit_task(&task_body(), Some("shared")).await;
    let chat = fake
        .post("/v1/chat/completions", &chat_body("x"), Some("shared"))
        .await;
    assert_eq!(chat.status(), 200);
    assert!(chat.headers().get("idempotent-replayed").is_none());
    let submissions = fake.server.submissions();
    assert_eq!(submissions.total, 2);
    assert_eq!(submissions.idempotent_replays, 0);
}
