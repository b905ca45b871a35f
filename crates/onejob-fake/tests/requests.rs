//! What an OpenAI-compatible caller passes through reaches the fake unchanged, over real
//! HTTP: the whole request body is recorded with each side effect, and `response_format`
//! still gets JSON content.

mod harness;

use harness::{chat_body, start};
use serde_json::{Value, json};

#[tokio::test]
async fn each_side_effect_records_the_whole_request_body() {
    let fake = start().await;
    let body = json!({
        "model": "upstream-model-7",
        "messages": [{"role": "user", "content": "weather?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "response_format": {"type": "json_object"},
        "temperature": 0.25,
        "max_tokens": 64,
        "seed": 7,
        "stream": true,
        "stream_options": {"include_usage": true},
        "user": "someone",
    });
    for _ in 0..2 {
        // The second is a replay: not a side effect, nothing recorded.
        let response = fake.post("/v1/chat/completions", &body, Some("rec")).await;
        assert_eq!(response.status(), 200);
        response.bytes().await.unwrap();
    }
    let submissions = fake.server.submissions();
    assert_eq!(submissions.requests.len(), 1);
    assert_eq!(submissions.idempotent_replays, 1);
    let record = &submissions.requests[0];
    assert_eq!(record.request, body, "every field, unchanged");
    assert_eq!(
        record.input, body["messages"],
        "the input is still the messages"
    );

    let over_http: Value = fake.get("/_fake/submissions").await.json().await.unwrap();
    assert_eq!(over_http["requests"][0]["request"], body);

    let task = json!({"kind": "image.generate", "params": {"prompt": "a fox"}});
    fake.submit_task(&task, None).await;
    assert_eq!(fake.server.submissions().requests[1].request, task);
}

#[tokio::test]
async fn response_format_keeps_the_content_json() {
    let fake = start().await;
    for format in [
        json!({"type": "json_object"}),
        json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}}}),
    ] {
        let mut body = chat_body("a fox");
        body["response_format"] = format.clone();
        let response = fake.post("/v1/chat/completions", &body, None).await;
        assert_eq!(response.status(), 200);
        let answer: Value = response.json().await.unwrap();
        let content = answer["choices"][0]["message"]["content"].as_str().unwrap();
        let parsed: Value = serde_json::from_str(content).unwrap();
        assert_eq!(parsed, json!({"text": "fake answer: a fox"}), "{format}");
    }
}
