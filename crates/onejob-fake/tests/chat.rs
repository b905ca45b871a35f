//! The OpenAI-compatible chat endpoint over real HTTP: the completion's shape, every scripted
//! outcome, scripted statuses and hangs.

mod harness;

use std::time::Duration;

use harness::{chat_body, rule, start};
use onejob_fake::input_hash;
use serde_json::{Value, json};

/// The parsed `content` text of a completion's first choice.
fn content(completion: &Value) -> &str {
    completion["choices"][0]["message"]["content"]
        .as_str()
        .expect("content is a string")
}

#[tokio::test]
async fn a_completion_has_the_openai_shape_and_echoes_the_last_user_message() {
    let fake = start().await;
    let body = json!({
        "model": "fake-1",
        "temperature": 0,
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "Describe a red fox."},
        ],
    });
    let response = fake.post("/v1/chat/completions", &body, None).await;
    assert_eq!(response.status(), 200);
    let completion: Value = response.json().await.unwrap();
    assert!(completion["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(completion["object"], "chat.completion");
    assert!(completion["created"].as_u64().unwrap() > 1_600_000_000);
    assert_eq!(completion["model"], "fake-1");
    assert_eq!(completion["choices"][0]["index"], 0);
    assert_eq!(completion["choices"][0]["message"]["role"], "assistant");
    assert_eq!(completion["choices"][0]["finish_reason"], "stop");
    let usage = &completion["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
    );
    let output: Value = serde_json::from_str(content(&completion)).unwrap();
    assert_eq!(output, json!({"text": "fake answer: Describe a red fox."}));
}

#[tokio::test]
async fn a_request_without_a_model_is_answered_by_model_fake_and_long_prompts_are_truncated() {
    let fake = start().await;
    let long = "y".repeat(300);
    let body = json!({"messages": [{"role": "user", "content": long}]});
    let completion: Value = fake
        .post("/v1/chat/completions", &body, None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(completion["model"], "fake");
    let output: Value = serde_json::from_str(content(&completion)).unwrap();
    assert_eq!(output["text"], format!("fake answer: {}", "y".repeat(200)));
}

#[tokio::test]
async fn each_outcome_shapes_the_content() {
    let cases = [
        ("missing_artifact", Some(json!({"text": ""}))),
        (
            "drifted_keys",
            Some(json!({"answer": "fake answer: the prompt"})),
        ),
        ("malformed", None),
    ];
    for (outcome, expected) in cases {
        let fake = start().await;
        fake.server.add_rule(rule(json!({"outcome": outcome})));
        let response = fake
            .post("/v1/chat/completions", &chat_body("the prompt"), None)
            .await;
        assert_eq!(response.status(), 200, "{outcome}");
        let completion: Value = response.json().await.unwrap();
        match expected {
            Some(output) => assert_eq!(
                serde_json::from_str::<Value>(content(&completion)).unwrap(),
                output,
                "{outcome}"
            ),
            None => assert_eq!(content(&completion), "not json {"),
        }
    }
}

#[tokio::test]
async fn fail_answers_400_with_an_openai_error() {
    let fake = start().await;
    fake.server.add_rule(rule(json!({"outcome": "fail"})));
    let response = fake
        .post("/v1/chat/completions", &chat_body("x"), None)
        .await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(
        error,
        json!({"error": {"message": "scripted failure", "type": "invalid_request_error"}})
    );
}

#[tokio::test]
async fn output_is_returned_as_the_exact_content() {
    let fake = start().await;
    let output = json!({"caption": "a fox", "tags": ["red", "fox"]});
    fake.server
        .add_rule(rule(json!({"output": output.clone()})));
    let completion: Value = fake
        .post("/v1/chat/completions", &chat_body("x"), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(content(&completion)).unwrap(),
        output
    );
}

#[tokio::test]
async fn http_status_answers_that_status_with_a_json_error_and_is_counted() {
    let fake = start().await;
    fake.server.add_rule(rule(json!({"http_status": 503})));
    let response = fake
        .post("/v1/chat/completions", &chat_body("x"), None)
        .await;
    assert_eq!(response.status(), 503);
    let error: Value = response.json().await.unwrap();
    assert_eq!(
        error,
        json!({"error": {"message": "scripted status", "type": "server_error"}})
    );
    assert_eq!(fake.server.submissions().total, 1);
}

#[tokio::test]
async fn latency_delays_but_still_answers() {
    let fake = start().await;
    fake.server
        .add_rule(rule(json!({"ack_delay_ms": 50, "run_ms": 100})));
    let response = fake
        .post("/v1/chat/completions", &chat_body("x"), None)
        .await;
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn a_hanging_completion_never_answers_but_is_counted() {
    for hang in ["hang_before_ack", "hang_after_ack"] {
        let fake = start().await;
        fake.server.add_rule(rule(json!({ hang: true })));
        let body = chat_body("hang");
        let result = fake
            .http
            .post(fake.url("/v1/chat/completions"))
            .json(&body)
            .timeout(Duration::from_millis(300))
            .send()
            .await;
        let error = result.expect_err("a hanging request is never answered");
        assert!(error.is_timeout(), "{hang}: {error}");
        let submissions = fake.server.submissions();
        assert_eq!(submissions.total, 1, "{hang}");
        assert_eq!(submissions.by_input[&input_hash(&body["messages"])], 1);
        assert_eq!(submissions.requests[0].endpoint, "chat");
    }
}

#[tokio::test]
async fn a_request_without_messages_is_a_400_and_not_counted() {
    let fake = start().await;
    let response = fake
        .post("/v1/chat/completions", &json!({"model": "m"}), None)
        .await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert_eq!(fake.server.submissions().total, 0);
}
