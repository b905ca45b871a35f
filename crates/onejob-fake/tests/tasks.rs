//! The async task API over real HTTP: the lifecycle queued → running → succeeded, default
//! results per kind and outcome, failures, hangs before and after the ack, cancellation,
//! scripted statuses and unknown ids.

mod harness;

use std::time::Duration;

use harness::{POLL, rule, start};
use onejob_fake::input_hash;
use serde_json::{Value, json};

fn caption(prompt: &str) -> Value {
    json!({"kind": "chat.completion", "params": {"prompt": prompt}})
}

#[tokio::test]
async fn a_task_is_acked_queued_then_runs_and_eventually_succeeds() {
    let fake = start().await;
    fake.server.add_rule(rule(json!({"run_ms": 200})));
    let task_id = fake.submit_task(&caption("a red fox"), None).await;
    assert!(task_id.starts_with("task_"));
    let first = fake.task(&task_id).await;
    assert_eq!(first["task_id"], task_id.as_str());
    assert!(
        first["status"] == "running" || first["status"] == "succeeded",
        "after the ack the task runs: {first}"
    );
    if first["status"] == "running" {
        assert!(first.get("result").is_none(), "no result while running");
    }
    let done = fake.eventually_status(&task_id, "succeeded").await;
    assert_eq!(done["result"], json!({"text": "fake answer: a red fox"}));
    assert!(done.get("error").is_none());
}

#[tokio::test]
async fn a_task_is_queued_until_acked_and_running_until_run_ms_is_over() {
    let fake = start().await;
    fake.server.add_rule(rule(
        json!({"matches": "slow ack", "hang_before_ack": true, "ack_delay_ms": 600_000}),
    ));
    fake.server
        .add_rule(rule(json!({"matches": "long run", "run_ms": 600_000})));
    let body = caption("slow ack");
    let waiting = fake
        .http
        .post(fake.url("/v1/tasks"))
        .header("Idempotency-Key", "k-slow")
        .json(&body)
        .timeout(Duration::from_millis(200))
        .send()
        .await;
    assert!(waiting.expect_err("never acked").is_timeout());
    let queued: Value = fake
        .get("/v1/tasks?idempotency_key=k-slow")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(queued["status"], "queued");
    let task_id = fake.submit_task(&caption("long run"), None).await;
    assert_eq!(fake.task(&task_id).await["status"], "running");
}

fn image_url(task_id: &str) -> String {
    format!("https://fake.invalid/images/{task_id}.png")
}

#[tokio::test]
async fn image_kinds_get_image_results_and_each_outcome_its_shape() {
    let image = json!({"kind": "image.generate", "params": {"prompt": "a fox"}});
    type Expected = fn(&str) -> Value;
    let cases: [(&str, Value, Expected); 5] = [
        (
            "succeed",
            image.clone(),
            |id| json!({"images": [{"url": image_url(id)}]}),
        ),
        ("missing_artifact", image.clone(), |_| json!({"images": []})),
        (
            "drifted_keys",
            image.clone(),
            |id| json!({"image_urls": [image_url(id)]}),
        ),
        ("missing_artifact", caption("x"), |_| json!({"text": ""})),
        (
            "drifted_keys",
            caption("x"),
            |_| json!({"answer": "fake answer: x"}),
        ),
    ];
    for (outcome, body, expected) in cases {
        let fake = start().await;
        fake.server.add_rule(rule(json!({"outcome": outcome})));
        let task_id = fake.submit_task(&body, None).await;
        let done = fake.eventually_status(&task_id, "succeeded").await;
        assert_eq!(done["result"], expected(&task_id), "{outcome} on {body}");
    }
}

#[tokio::test]
async fn malformed_results_are_a_json_string_and_output_is_returned_exactly() {
    let fake = start().await;
    fake.server
        .add_rule(rule(json!({"matches": "bad", "outcome": "malformed"})));
    fake.server
        .add_rule(rule(json!({"matches": "exact", "output": {"n": 7}})));
    let bad = fake.submit_task(&caption("bad"), None).await;
    let exact = fake.submit_task(&caption("exact"), None).await;
    assert_eq!(
        fake.eventually_status(&bad, "succeeded").await["result"],
        json!("not json {")
    );
    assert_eq!(
        fake.eventually_status(&exact, "succeeded").await["result"],
        json!({"n": 7})
    );
}

#[tokio::test]
async fn fail_ends_the_task_failed_with_an_error() {
    let fake = start().await;
    fake.server.add_rule(rule(json!({"outcome": "fail"})));
    let task_id = fake.submit_task(&caption("x"), None).await;
    let failed = fake.eventually_status(&task_id, "failed").await;
    assert_eq!(failed["error"], "scripted failure");
    assert!(failed.get("result").is_none());
}

#[tokio::test]
async fn hang_after_ack_stays_running() {
    let fake = start().await;
    fake.server.add_rule(rule(json!({"hang_after_ack": true})));
    let task_id = fake.submit_task(&caption("x"), None).await;
    for _ in 0..10 {
        assert_eq!(fake.task(&task_id).await["status"], "running");
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test]
async fn hang_before_ack_never_answers_but_is_counted() {
    let fake = start().await;
    fake.server.add_rule(rule(json!({"hang_before_ack": true})));
    let body = caption("lost ack");
    let result = fake
        .http
        .post(fake.url("/v1/tasks"))
        .json(&body)
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(result.expect_err("never answered").is_timeout());
    let submissions = fake.server.submissions();
    assert_eq!(submissions.total, 1);
    assert_eq!(submissions.by_input[&input_hash(&body)], 1);
    assert!(submissions.requests[0].task_id.is_some());
}

#[tokio::test]
async fn a_cancelled_task_never_succeeds_and_the_cancel_is_counted() {
    let fake = start().await;
    fake.server.add_rule(rule(json!({"run_ms": 2000})));
    let task_id = fake.submit_task(&caption("x"), None).await;
    let response = fake
        .post(&format!("/v1/tasks/{task_id}/cancel"), &json!({}), None)
        .await;
    assert_eq!(response.status(), 200);
    let cancelled: Value = response.json().await.unwrap();
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(fake.server.submissions().cancels, 1);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let later = fake.task(&task_id).await;
    assert_eq!(later["status"], "cancelled", "past run_ms: {later}");
    assert!(later.get("result").is_none());
}

#[tokio::test]
async fn http_status_answers_that_status_creates_no_task_and_is_counted() {
    let fake = start().await;
    fake.server.add_rule(rule(json!({"http_status": 429})));
    let response = fake.post("/v1/tasks", &caption("x"), None).await;
    assert_eq!(response.status(), 429);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["type"], "server_error");
    let submissions = fake.server.submissions();
    assert_eq!(submissions.total, 1);
    assert_eq!(submissions.requests[0].task_id, None);
}

#[tokio::test]
async fn unknown_task_ids_are_404_json_for_status_and_cancel() {
    let fake = start().await;
    let status = fake.get("/v1/tasks/task_nope").await;
    assert_eq!(status.status(), 404);
    let error: Value = status.json().await.unwrap();
    assert_eq!(error["error"]["type"], "not_found_error");
    let cancel = fake
        .post("/v1/tasks/task_nope/cancel", &json!({}), None)
        .await;
    assert_eq!(cancel.status(), 404);
    assert_eq!(fake.server.submissions().cancels, 0);
}

#[tokio::test]
async fn a_task_body_must_be_a_json_object() {
    let fake = start().await;
    let response = fake.post("/v1/tasks", &json!([1, 2]), None).await;
    assert_eq!(response.status(), 400);
    assert_eq!(fake.server.submissions().total, 0);
}
