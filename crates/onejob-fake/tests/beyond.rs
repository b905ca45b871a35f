//! The endpoints beyond chat over real HTTP: embeddings, the Responses API, image generation
//! and Anthropic's Messages API, each answered in its API's shape, streamed where asked,
//! scripted by rules, counted per endpoint, and replayed (not run again) under a repeated
//! `Idempotency-Key`.

mod harness;

use harness::{rule, start};
use serde_json::{Value, json};

#[tokio::test]
async fn each_endpoint_answers_in_its_shape_and_is_counted_under_its_name() {
    let fake = start().await;
    let cases = [
        (
            "/v1/embeddings",
            json!({"model": "e", "input": "a fox"}),
            "embeddings",
        ),
        (
            "/v1/responses",
            json!({"model": "r", "input": "a fox"}),
            "responses",
        ),
        (
            "/v1/images/generations",
            json!({"model": "i", "prompt": "a fox"}),
            "images",
        ),
        (
            "/v1/messages",
            json!({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "a fox"}]}),
            "messages",
        ),
    ];
    for (path, body, _) in &cases {
        let response = fake.post(path, body, None).await;
        assert_eq!(response.status(), 200, "{path}");
        assert!(response.headers().contains_key("x-request-id"), "{path}");
        let answer: Value = response.json().await.unwrap();
        match *path {
            "/v1/embeddings" => assert_eq!(answer["data"][0]["object"], "embedding"),
            "/v1/responses" => assert_eq!(
                answer["output"][0]["content"][0]["text"],
                "fake answer: a fox"
            ),
            "/v1/images/generations" => assert!(answer["data"][0]["url"].is_string()),
            _ => assert_eq!(answer["content"][0]["text"], "fake answer: a fox"),
        }
    }
    let seen = fake.server.submissions();
    let endpoints: Vec<&str> = seen.requests.iter().map(|r| r.endpoint.as_str()).collect();
    assert_eq!(
        endpoints,
        cases.iter().map(|(_, _, name)| *name).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_repeated_key_is_answered_the_same_without_running_again() {
    let fake = start().await;
    let body = json!({"model": "e", "input": "a fox"});
    let first: Value = fake
        .post("/v1/embeddings", &body, Some("k"))
        .await
        .json()
        .await
        .unwrap();
    let again = fake.post("/v1/embeddings", &body, Some("k")).await;
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.json::<Value>().await.unwrap(), first);
    // The same key at another endpoint is another request.
    let message = json!({"model": "m", "max_tokens": 8,
        "messages": [{"role": "user", "content": "a fox"}]});
    let answer: Value = fake
        .post("/v1/messages", &message, Some("k"))
        .await
        .json()
        .await
        .unwrap();
    // Replayed as a stream when the replay asks for one.
    let mut streamed = message.clone();
    streamed["stream"] = json!(true);
    let replay = fake.post("/v1/messages", &streamed, Some("k")).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let text = replay.text().await.unwrap();
    assert!(text.starts_with("event: message_start\n"), "{text}");
    assert!(text.contains(answer["id"].as_str().unwrap()), "{text}");
    let seen = fake.server.submissions();
    assert_eq!(seen.total, 2);
    assert_eq!(seen.idempotent_replays, 2);
}

#[tokio::test]
async fn rules_script_failures_missing_artifacts_and_statuses() {
    let fake = start().await;
    fake.server
        .add_rule(rule(json!({"matches": "broken", "outcome": "fail"})));
    fake.server.add_rule(rule(
        json!({"matches": "blank", "outcome": "missing_artifact"}),
    ));
    fake.server.add_rule(rule(
        json!({"matches": "busy", "http_status": 429, "retry_after": 3}),
    ));
    let ask = |text: &str| json!({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": text}]});
    let failed = fake.post("/v1/messages", &ask("broken"), None).await;
    assert_eq!(failed.status(), 400);
    let failed: Value = failed.json().await.unwrap();
    assert_eq!(failed["type"], "error", "Anthropic's shape: {failed}");
    assert_eq!(failed["error"]["type"], "invalid_request_error");
    let blank: Value = fake
        .post("/v1/messages", &ask("blank"), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(blank["content"][0]["text"], "");
    let busy = fake.post("/v1/messages", &ask("busy"), None).await;
    assert_eq!(busy.status(), 429);
    assert_eq!(busy.headers()["retry-after"], "3");
    let blank = fake
        .post(
            "/v1/images/generations",
            &json!({"model": "i", "prompt": "blank"}),
            None,
        )
        .await;
    assert_eq!(blank.json::<Value>().await.unwrap()["data"], json!([]));
}
