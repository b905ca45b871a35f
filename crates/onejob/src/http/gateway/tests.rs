//! Unit tests of `http/gateway.rs`.

use super::*;

/// The JSON data of the one event `event` is, as a caller reads it.
async fn data_of(event: Result<Event, Infallible>) -> Value {
    let response = sse(stream::iter(vec![event]));
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let text = String::from_utf8(body.to_vec()).unwrap();
    let data = text
        .lines()
        .find_map(|line| line.strip_prefix("data: "))
        .unwrap_or_else(|| panic!("an event with data: {text}"));
    serde_json::from_str(data).unwrap()
}

#[tokio::test]
async fn a_failed_streams_error_event_has_the_type_of_the_upstreams_refusal() {
    let job = Uuid::now_v7();
    let anthropic = |status| async move {
        let event = data_of(stream_error(Endpoint::Messages, job, "no", status, 3)).await;
        assert_eq!(event["type"], "error");
        assert_eq!(event["error"]["code"], "attempt_failed");
        assert_eq!(event["error"]["job_id"], json!(job));
        event["error"]["type"].as_str().unwrap().to_owned()
    };
    assert_eq!(anthropic(Some(400)).await, "invalid_request_error");
    assert_eq!(anthropic(Some(429)).await, "rate_limit_error");
    assert_eq!(anthropic(Some(529)).await, "overloaded_error");
    assert_eq!(anthropic(Some(401)).await, "api_error", "onejob's account");
    assert_eq!(anthropic(None).await, "api_error");
    let openai = |status| async move {
        let event = data_of(stream_error(Endpoint::Chat, job, "no", status, 3)).await;
        assert_eq!(event["error"]["code"], "attempt_failed");
        event["error"]["type"].as_str().unwrap().to_owned()
    };
    assert_eq!(openai(Some(400)).await, "invalid_request_error");
    assert_eq!(openai(Some(429)).await, "rate_limit_error");
    assert_eq!(openai(Some(403)).await, "api_error", "onejob's account");
    assert_eq!(openai(None).await, "api_error");
}
