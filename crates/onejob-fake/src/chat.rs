//! The OpenAI-compatible, synchronous chat shape: `POST /v1/chat/completions`.
//!
//! The request's input is its `messages` array. The answer comes after `ack_delay_ms +
//! run_ms` (never, if the behaviour hangs); its `content` is the JSON text of the output,
//! by default `{"text": "fake answer: <last user message>"}`. The work runs in its own
//! task, so it completes (and a replay of its `Idempotency-Key` gets the same answer) even
//! when the caller gave up waiting.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::{
    Json,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::behaviour::{Behaviour, Outcome};
use crate::error::{FakeError, parse_json};
use crate::idempotency::{idempotency_key, mark_replayed};
use crate::state::{ChatAdmission, ChatSlot, Shared, StoredReply};
use crate::submissions::canonical_text;
use crate::task::{ECHO_CHARS, truncate};

/// `POST /v1/chat/completions`.
pub(crate) async fn completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, FakeError> {
    let request = parse_json(&body)?;
    let key = idempotency_key(&headers)?;
    if request.get("messages").filter(|m| m.is_array()).is_none() {
        return Err(FakeError::BadRequest(
            "the request needs a `messages` array".into(),
        ));
    };
    match shared.admit_chat(&request, key) {
        ChatAdmission::Replay(waiting) => {
            let reply = wait_for_reply(&shared, waiting).await?;
            Ok(mark_replayed(reply_response(reply)))
        }
        ChatAdmission::Scripted(status) => Err(FakeError::ScriptedStatus(status)),
        ChatAdmission::Run { behaviour, slot } => {
            let waiting = slot.subscribe();
            tokio::spawn(run(Arc::clone(&shared), request, behaviour, slot));
            Ok(reply_response(wait_for_reply(&shared, waiting).await?))
        }
    }
}

/// Waits out the behaviour's latency, then publishes the answer (never, if it hangs).
async fn run(shared: Arc<Shared>, request: Value, behaviour: Behaviour, slot: ChatSlot) {
    if behaviour.hang_before_ack || behaviour.hang_after_ack {
        // Keeps `slot` alive so the caller and replays wait until the server stops.
        shared.until_shutdown().await;
        return;
    }
    let latency = Duration::from_millis(behaviour.ack_delay_ms.saturating_add(behaviour.run_ms));
    tokio::select! {
        () = tokio::time::sleep(latency) => {}
        () = shared.until_shutdown() => return,
    }
    slot.send_replace(Some(reply_of(&request, &behaviour)));
}

async fn wait_for_reply(
    shared: &Shared,
    mut waiting: watch::Receiver<Option<StoredReply>>,
) -> Result<StoredReply, FakeError> {
    tokio::select! {
        ready = waiting.wait_for(Option::is_some) => {
            ready.ok().and_then(|reply| reply.clone()).ok_or(FakeError::ShuttingDown)
        }
        () = shared.until_shutdown() => Err(FakeError::ShuttingDown),
    }
}

fn reply_response(reply: StoredReply) -> Response {
    (reply.status, Json(reply.body)).into_response()
}

/// The answer a chat request with this behaviour gets once its latency is over.
fn reply_of(request: &Value, behaviour: &Behaviour) -> StoredReply {
    if behaviour.outcome == Outcome::Fail {
        let failure = FakeError::ScriptedFailure;
        return StoredReply {
            status: failure.status(),
            body: failure.body(),
        };
    }
    let messages = request.get("messages").unwrap_or(&Value::Null);
    let text = format!(
        "fake answer: {}",
        truncate(&last_user_text(messages), ECHO_CHARS)
    );
    let content = match (&behaviour.output, behaviour.outcome) {
        (Some(output), _) => output.to_string(),
        (None, Outcome::Malformed) => "not json {".to_owned(),
        (None, Outcome::MissingArtifact) => json!({"text": ""}).to_string(),
        (None, Outcome::DriftedKeys) => json!({"answer": text}).to_string(),
        (None, _) => json!({"text": text}).to_string(),
    };
    let prompt_tokens = words(&canonical_text(messages));
    let completion_tokens = words(&content);
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    StoredReply {
        status: StatusCode::OK,
        body: json!({
            "id": format!("chatcmpl-{}", uuid::Uuid::now_v7()),
            "object": "chat.completion",
            "created": created,
            "model": request.get("model").and_then(Value::as_str).unwrap_or("fake"),
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }),
    }
}

/// The text of the last `user` message: a string content, the `text` parts of an array
/// content, or the canonical JSON of anything else; empty when there is no user message.
fn last_user_text(messages: &Value) -> String {
    let last_user = messages
        .as_array()
        .and_then(|all| all.iter().rev().find(|m| m["role"] == "user"));
    match last_user.map(|message| &message["content"]) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(" "),
        Some(other) => canonical_text(other),
    }
}

/// A rough token count: whitespace-separated words, at least 1.
fn words(text: &str) -> u64 {
    (text.split_whitespace().count() as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_user_message_is_echoed() {
        let messages = json!([
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ignored"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "system", "content": "also ignored"},
        ]);
        assert_eq!(last_user_text(&messages), "a b");
        assert_eq!(last_user_text(&json!([])), "");
    }

    #[test]
    fn output_replaces_the_content_but_fail_still_fails() {
        let request = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        let custom = Behaviour {
            output: Some(json!({"x": 1})),
            ..Behaviour::default()
        };
        let reply = reply_of(&request, &custom);
        assert_eq!(reply.body["choices"][0]["message"]["content"], "{\"x\":1}");
        assert_eq!(reply.body["model"], "m");
        let failing = Behaviour {
            outcome: Outcome::Fail,
            ..custom
        };
        assert_eq!(reply_of(&request, &failing).status, StatusCode::BAD_REQUEST);
    }
}
