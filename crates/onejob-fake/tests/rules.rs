//! Rule matching over real HTTP: substring matches on the canonical input, `times`
//! exhaustion falling through to the next rule and then to the default, and the side-effect
//! counters keyed by input hash.

mod harness;

use harness::{chat_body, rule, start};
use onejob_fake::input_hash;
use serde_json::{Value, json};

async fn chat_status(fake: &harness::Fake, prompt: &str) -> u16 {
    fake.post("/v1/chat/completions", &chat_body(prompt), None)
        .await
        .status()
        .as_u16()
}

#[tokio::test]
async fn a_rule_matches_by_substring_of_the_canonical_input() {
    let fake = start().await;
    fake.server.add_rule(rule(
        json!({"matches": "\"content\":\"fox", "http_status": 502}),
    ));
    assert_eq!(chat_status(&fake, "fox in the snow").await, 502);
    assert_eq!(chat_status(&fake, "a hen").await, 200);
    let task = fake
        .post(
            "/v1/tasks",
            &json!({"params": {"prompt": "fox"}, "kind": "chat.completion"}),
            None,
        )
        .await;
    assert_eq!(task.status(), 200, "the task input has no `content` key");
}

#[tokio::test]
async fn an_exhausted_rule_falls_through_to_the_next_rule_then_the_default() {
    let fake = start().await;
    fake.server.add_rule(rule(
        json!({"matches": "fox", "times": 2, "http_status": 503}),
    ));
    fake.server.add_rule(rule(
        json!({"matches": "fox", "times": 1, "outcome": "fail"}),
    ));
    let statuses = [
        chat_status(&fake, "fox").await,
        chat_status(&fake, "fox").await,
        chat_status(&fake, "fox").await,
        chat_status(&fake, "fox").await,
    ];
    assert_eq!(statuses, [503, 503, 400, 200]);
}

#[tokio::test]
async fn rules_are_tried_in_the_order_added() {
    let fake = start().await;
    fake.server.add_rule(rule(json!({"http_status": 500})));
    fake.server
        .add_rule(rule(json!({"matches": "fox", "http_status": 418})));
    assert_eq!(chat_status(&fake, "fox").await, 500);
    fake.server.clear_rules();
    assert_eq!(chat_status(&fake, "fox").await, 200);
}

#[tokio::test]
async fn side_effects_are_counted_by_input_hash() {
    let fake = start().await;
    let fox = chat_body("fox");
    let hen = chat_body("hen");
    for body in [&fox, &fox, &hen] {
        fake.post("/v1/chat/completions", body, None).await;
    }
    let task = json!({"kind": "chat.completion", "params": {"prompt": "fox", "n": 1}});
    fake.submit_task(&task, None).await;
    // The same task in another key order and formatting is the same input.
    let reordered: Value = serde_json::from_str(
        r#"{ "params": { "n": 1, "prompt": "fox" }, "kind": "chat.completion" }"#,
    )
    .unwrap();
    fake.submit_task(&reordered, None).await;

    let submissions = fake.server.submissions();
    assert_eq!(submissions.total, 5);
    assert_eq!(submissions.by_input[&input_hash(&fox["messages"])], 2);
    assert_eq!(submissions.by_input[&input_hash(&hen["messages"])], 1);
    assert_eq!(submissions.by_input[&input_hash(&task)], 2);
    assert_eq!(submissions.count_for(&task), 2);
    assert_eq!(submissions.idempotent_replays, 0);
    let endpoints: Vec<&str> = submissions
        .requests
        .iter()
        .map(|r| r.endpoint.as_str())
        .collect();
    assert_eq!(endpoints, ["chat", "chat", "chat", "tasks", "tasks"]);
    assert_eq!(submissions.requests[0].input, fox["messages"]);
}
