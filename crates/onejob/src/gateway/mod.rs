//! The OpenAI-compatible gateway's domain (docs/design.md §9): what a chat request is as a
//! job, what a real chat completion is, and the in-process plumbing that lets a caller wait
//! for its job and watch its stream live.
//!
//! A call to `POST /v1/chat/completions` names a model; the kind serving it
//! (`openai_models`) takes the request body, less the delivery-only `stream` and
//! `stream_options`, as the job's params, so the fingerprint is the request's intent and a
//! retry under the same key is the same job. The job's result is the winning upstream's own
//! `chat.completion`. The use case is `crate::jobs::gateway`, its HTTP adapter
//! `crate::http::gateway`.
//!
//! The same contract serves the endpoints beyond chat ([`endpoint`]): embeddings, the
//! Responses API, image generation and Anthropic's Messages API, each kind serving one.
//!
//! * [`endpoint`]: each endpoint's request, real answer, delivery fields and replayed stream;
//! * [`assembly`]: a streamed answer put together from its events, per endpoint;
//! * [`completion`]: assembling a streamed completion, and streaming a stored one;
//! * [`request`]: the caller's request as sent, and the copy forwarded upstream;
//! * [`streams`]: live streams of running attempts, which callers attach to from the start;
//! * [`watch`]: in-process notice that a job changed, so a waiting caller answers at once.

pub mod assembly;
pub mod completion;
pub mod endpoint;
pub mod request;
pub mod streams;
pub mod watch;

use serde_json::{Map, Value};

pub use endpoint::Endpoint;

use onejob_domain::FieldError;

/// How a caller wants its answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delivery {
    /// As server-sent `chat.completion.chunk` events.
    pub stream: bool,
    /// With a final `usage` chunk (`stream_options.include_usage`).
    pub include_usage: bool,
}

/// Splits a request to `endpoint` into the job's params and the caller's delivery.
pub fn split_request(endpoint: Endpoint, mut body: Map<String, Value>) -> (Value, Delivery) {
    let mut stream = None;
    let mut options = None;
    for field in endpoint.delivery_fields() {
        let value = body.remove(*field);
        match *field {
            "stream" => stream = value,
            _ => options = value,
        }
    }
    let delivery = Delivery {
        stream: stream.as_ref().and_then(Value::as_bool).unwrap_or(false),
        include_usage: options
            .as_ref()
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            .unwrap_or(false),
    };
    (Value::Object(body), delivery)
}

/// A gateway kind's params without a schema of its own: an OpenAI chat request, an object
/// with a non-empty `messages` array whose entries are objects with a `role`.
pub fn check_request(params: &Value) -> Result<(), Vec<FieldError>> {
    let error = |path: &str, message: &str| {
        Err(vec![FieldError {
            path: path.into(),
            message: message.into(),
        }])
    };
    let Some(request) = params.as_object() else {
        return error("/", "a chat request is a JSON object");
    };
    match request.get("messages").and_then(Value::as_array) {
        Some(messages) if !messages.is_empty() => {
            for (i, message) in messages.iter().enumerate() {
                if !message.get("role").is_some_and(Value::is_string) {
                    return error(
                        &format!("/messages/{i}"),
                        "each message is an object with a string `role`",
                    );
                }
            }
            Ok(())
        }
        _ => error(
            "/messages",
            "a chat request needs a non-empty `messages` array",
        ),
    }
}

/// Whether `completion` is a real answer ("no fake success"): a `chat.completion` whose first
/// choice's message carries non-blank content or at least one tool call.
pub fn check_completion(completion: &Value) -> Result<(), Vec<FieldError>> {
    let message = completion.pointer("/choices/0/message");
    let content = message
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .is_some_and(|text| !text.trim().is_empty());
    let tool_calls = message
        .and_then(|m| m.get("tool_calls"))
        .and_then(Value::as_array)
        .is_some_and(|calls| !calls.is_empty());
    if content || tool_calls {
        Ok(())
    } else {
        Err(vec![FieldError {
            path: "/choices/0/message".into(),
            message: "the completion has no message content and no tool calls: no real answer"
                .into(),
        }])
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn delivery_fields_are_not_params() {
        let body = json!({"model": "fast", "messages": [{"role": "user", "content": "hi"}],
            "stream": true, "stream_options": {"include_usage": true}, "seed": 7});
        let (params, delivery) = split_request(Endpoint::Chat, body.as_object().unwrap().clone());
        assert_eq!(
            params,
            json!({"model": "fast", "messages": [{"role": "user", "content": "hi"}], "seed": 7})
        );
        assert!(delivery.stream && delivery.include_usage);
    }

    #[test]
    fn a_completion_needs_content_or_tool_calls() {
        let answer = |message: Value| json!({"choices": [{"message": message}]});
        assert!(check_completion(&answer(json!({"content": "a fox"}))).is_ok());
        assert!(
            check_completion(&answer(json!({"content": null,
            "tool_calls": [{"id": "c", "type": "function"}]})))
            .is_ok()
        );
        for empty in [
            json!({"content": ""}),
            json!({"content": " "}),
            json!({"content": null}),
        ] {
            assert!(check_completion(&answer(empty)).is_err());
        }
        assert!(check_completion(&json!({"choices": []})).is_err());
    }

    #[test]
    fn a_request_needs_messages_with_roles() {
        assert!(check_request(&json!({"messages": [{"role": "user", "content": "x"}]})).is_ok());
        assert_eq!(
            check_request(&json!({"messages": []})).unwrap_err()[0].path,
            "/messages"
        );
        assert_eq!(
            check_request(&json!({"messages": [{"content": "x"}]})).unwrap_err()[0].path,
            "/messages/0"
        );
    }
}
