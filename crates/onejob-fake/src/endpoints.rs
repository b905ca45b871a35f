//! The upstream shapes beyond chat: OpenAI's `POST /v1/embeddings`, `POST /v1/responses`
//! and `POST /v1/images/generations`, and Anthropic's `POST /v1/messages`.
//!
//! Each request is counted as a side effect (endpoint `embeddings`, `responses`, `images`,
//! `messages`), its input being the request's `input` (`prompt` for images, `messages` for
//! Anthropic), which is what rules match. A rule's `http_status` answers that status,
//! `outcome: fail` a 400, `outcome: missing_artifact` an answer without its artifact (no
//! embedding, empty text, no image); `ack_delay_ms` and `run_ms` are its latency, spread
//! over a stream's events; `hang_before_ack` never answers, `hang_after_ack` sends a
//! stream's first event (or nothing) and then nothing until the server stops.
//!
//! The answers: embeddings of 8 dimensions made from the input's hash (as base64 little-endian
//! `f32`s for `encoding_format: "base64"`); a message or response whose text is
//! `fake answer: <the last user text>` (the JSON `{"text": …}` for a response asking for a
//! JSON schema in `text.format`), or a call of the tool `tool_choice` names (a response's
//! `"required"` and a message's `{"type": "any"}` call the first tool, unless the user
//! text says `call <name>` of another), or of the tool the last user text asks for with
//! `call <name>` while the conversation does not end with a tool's result (a response's
//! trailing `function_call_output` items, a message's trailing `user` turn of `tool_result`
//! blocks), after which the text is `fake answer: <the last user text> (tool result: …)`
//! (see [`crate::tool_loop`]); `tool_choice` `"none"` (`{"type": "none"}`) never calls one;
//! images at `https://fake.invalid/images/…` or as a
//! tiny PNG in `b64_json`; a rule's `output` is the answer itself, whatever it holds (a
//! message of thinking blocks only, a response of reasoning items only, …). `stream: true`
//! (messages, responses) streams the answer's events (see `onejob_domain::wire`), each as
//! `event: <type>` and `data: <json>`. Errors come in the endpoint's API's shape
//! (Anthropic's for messages).
//!
//! A request whose `Idempotency-Key` was already seen at the same endpoint is not run again:
//! it answers what the first one answered (waiting for it while it runs), in the form it
//! asks for, with `Idempotent-Replayed: true`, and counts as an idempotent replay.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::{
    Json,
    body::{Body, Bytes},
    extract::State,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use futures::StreamExt as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::behaviour::{Behaviour, Outcome};
use crate::error::{FakeError, parse_json};
use crate::idempotency::{idempotency_key, mark_replayed};
use crate::state::{OtherAdmission, OtherSlot, Shared, StoredReply};
use crate::tool_loop::{self, result_text};

/// One endpoint beyond chat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Embeddings,
    Responses,
    Images,
    Messages,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Embeddings => "embeddings",
            Shape::Responses => "responses",
            Shape::Images => "images",
            Shape::Messages => "messages",
        }
    }

    /// The member of the request that is its input.
    fn input_member(self) -> &'static str {
        match self {
            Shape::Embeddings | Shape::Responses => "input",
            Shape::Images => "prompt",
            Shape::Messages => "messages",
        }
    }

    /// An error answer in this API's shape.
    fn error(self, status: StatusCode, message: &str) -> Response {
        (status, Json(self.error_body(status, message))).into_response()
    }

    /// The body of an error answer in this API's shape.
    fn error_body(self, status: StatusCode, message: &str) -> Value {
        if self == Shape::Messages {
            let kind = match status.as_u16() {
                400 => "invalid_request_error",
                401 => "authentication_error",
                403 => "permission_error",
                404 => "not_found_error",
                429 => "rate_limit_error",
                529 => "overloaded_error",
                _ => "api_error",
            };
            json!({"type": "error", "error": {"type": kind, "message": message}})
        } else {
            let kind = if status.is_client_error() {
                "invalid_request_error"
            } else {
                "server_error"
            };
            json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
        }
    }
}

/// `POST /v1/embeddings`.
pub(crate) async fn embeddings(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve(shared, headers, body, Shape::Embeddings).await
}

/// `POST /v1/responses`.
pub(crate) async fn responses(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve(shared, headers, body, Shape::Responses).await
}

/// `POST /v1/images/generations`.
pub(crate) async fn images(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve(shared, headers, body, Shape::Images).await
}

/// `POST /v1/messages` (Anthropic's Messages API).
pub(crate) async fn messages(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve(shared, headers, body, Shape::Messages).await
}

async fn serve(shared: Arc<Shared>, headers: HeaderMap, body: Bytes, shape: Shape) -> Response {
    let request_id = format!("req_{}", uuid::Uuid::now_v7().simple());
    let mut response = match answer(shared, &headers, &body, shape, &request_id).await {
        Ok(response) => response,
        Err(error) => shape.error(error.status(), &error.to_string()),
    };
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert("x-request-id", value);
    }
    response
}

async fn answer(
    shared: Arc<Shared>,
    headers: &HeaderMap,
    body: &Bytes,
    shape: Shape,
    request_id: &str,
) -> Result<Response, FakeError> {
    let request = parse_json(body)?;
    let key = idempotency_key(headers)?;
    let Some(input) = request.get(shape.input_member()).filter(|i| !i.is_null()) else {
        return Err(FakeError::BadRequest(format!(
            "the request needs `{}`",
            shape.input_member()
        )));
    };
    let admitted = shared.admit_other(
        shape.name(),
        input,
        &request,
        String::from_utf8_lossy(body).into_owned(),
        key,
        request_id,
    );
    let (behaviour, slot) = match admitted {
        OtherAdmission::Replay(answer) => {
            return replay(&shared, shape, &request, answer)
                .await
                .map(mark_replayed);
        }
        OtherAdmission::Run { behaviour, slot } => (behaviour, slot),
    };
    if behaviour.hang_before_ack {
        shared.until_shutdown().await;
        return Err(FakeError::ShuttingDown);
    }
    if let Some(status) = behaviour.http_status {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = shape.error(status, "scripted status");
        if let Some(seconds) = behaviour.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        return Ok(response);
    }
    let acknowledged = Instant::now() + Duration::from_millis(behaviour.ack_delay_ms);
    if !pause_until(&shared, acknowledged).await {
        return Err(FakeError::ShuttingDown);
    }
    if behaviour.outcome == Outcome::Fail {
        pause_until(
            &shared,
            acknowledged + Duration::from_millis(behaviour.run_ms),
        )
        .await;
        let failure = FakeError::ScriptedFailure;
        let body = shape.error_body(failure.status(), &failure.to_string());
        publish(&slot, failure.status(), body);
        return Err(FakeError::ScriptedFailure);
    }
    let made = behaviour.output.clone().unwrap_or_else(|| match shape {
        Shape::Embeddings => embedding_list(&request, &behaviour),
        Shape::Responses => response_of(&request, &behaviour),
        Shape::Images => images_of(&request, &behaviour),
        Shape::Messages => message_of(&request, &behaviour),
    });
    let events = match shape {
        Shape::Messages if request["stream"] == true => onejob_domain::wire::message_events(&made),
        Shape::Responses if request["stream"] == true => {
            onejob_domain::wire::response_events(&made)
        }
        _ => {
            if behaviour.hang_after_ack {
                shared.until_shutdown().await;
                return Err(FakeError::ShuttingDown);
            }
            pause_until(
                &shared,
                acknowledged + Duration::from_millis(behaviour.run_ms),
            )
            .await;
            publish(&slot, StatusCode::OK, made.clone());
            return Ok(Json(made).into_response());
        }
    };
    // A stream's answer is known once it starts: replays need not wait for its end.
    publish(&slot, StatusCode::OK, made);
    Ok(stream_of(shared, events, acknowledged, behaviour))
}

/// Publishes a request's answer for the replays of its key.
fn publish(slot: &OtherSlot, status: StatusCode, body: Value) {
    slot.send_replace(Some(StoredReply { status, body }));
}

/// The first request's answer, once there, in the form this one asks for.
async fn replay(
    shared: &Arc<Shared>,
    shape: Shape,
    request: &Value,
    mut answer: tokio::sync::watch::Receiver<Option<StoredReply>>,
) -> Result<Response, FakeError> {
    let reply = tokio::select! {
        reply = answer.wait_for(Option::is_some) => {
            reply.map_err(|_| FakeError::ShuttingDown)?.clone()
        }
        () = shared.until_shutdown() => return Err(FakeError::ShuttingDown),
    };
    let Some(StoredReply { status, body }) = reply else {
        return Err(FakeError::ShuttingDown);
    };
    if status != StatusCode::OK {
        return Ok((status, Json(body)).into_response());
    }
    let events = match shape {
        Shape::Messages if request["stream"] == true => onejob_domain::wire::message_events(&body),
        Shape::Responses if request["stream"] == true => {
            onejob_domain::wire::response_events(&body)
        }
        _ => return Ok(Json(body).into_response()),
    };
    Ok(stream_of(
        Arc::clone(shared),
        events,
        Instant::now(),
        Behaviour::default(),
    ))
}

/// `text/event-stream` of `events`, the first at once, the rest spread over `run_ms`.
fn stream_of(
    shared: Arc<Shared>,
    events: Vec<Value>,
    acknowledged: Instant,
    behaviour: Behaviour,
) -> Response {
    let total = events.len().max(1) as u64;
    let pieces = futures::stream::iter(events.into_iter().enumerate()).then(move |(n, event)| {
        let shared = Arc::clone(&shared);
        let hang = behaviour.hang_after_ack && n > 0;
        let at = acknowledged + Duration::from_millis(behaviour.run_ms * n as u64 / total);
        async move {
            if hang {
                shared.until_shutdown().await;
                return Err(std::io::Error::other("the fake provider is shutting down"));
            }
            pause_until(&shared, at).await;
            let name = event["type"].as_str().unwrap_or("message").to_owned();
            Ok::<_, std::io::Error>(Bytes::from(format!("event: {name}\ndata: {event}\n\n")))
        }
    });
    let mut response = Response::new(Body::from_stream(pieces));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Sleeps until `deadline`; false if the server stopped first.
async fn pause_until(shared: &Shared, deadline: Instant) -> bool {
    tokio::select! {
        () = tokio::time::sleep_until(deadline) => true,
        () = shared.until_shutdown() => false,
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn hash(value: &Value) -> [u8; 32] {
    Sha256::digest(value.to_string().as_bytes()).into()
}

fn id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

fn model(request: &Value) -> Value {
    request
        .get("model")
        .cloned()
        .filter(Value::is_string)
        .unwrap_or_else(|| json!("fake"))
}

/// Words in a text, as the fake counts tokens.
fn tokens(text: &str) -> u64 {
    text.split_whitespace().count().max(1) as u64
}

/// A `list` of embeddings, one per input.
fn embedding_list(request: &Value, behaviour: &Behaviour) -> Value {
    let inputs: Vec<Value> = match &request["input"] {
        Value::Array(items) if items.iter().all(|i| !i.is_number()) => items.clone(),
        other => vec![other.clone()],
    };
    let base64 = request["encoding_format"] == "base64";
    let mut prompt_tokens = 0;
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, input)| {
            prompt_tokens += match input {
                Value::String(text) => tokens(text),
                Value::Array(ids) => ids.len() as u64,
                _ => 1,
            };
            let digest = hash(input);
            let vector: Vec<f32> = if behaviour.outcome == Outcome::MissingArtifact {
                Vec::new()
            } else {
                digest[..8]
                    .iter()
                    .map(|b| f32::from(*b) / 255.0 - 0.5)
                    .collect()
            };
            let embedding = if base64 {
                let bytes: Vec<u8> = vector.iter().flat_map(|f| f.to_le_bytes()).collect();
                json!(base64_encode(&bytes))
            } else {
                json!(vector)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    json!({"object": "list", "data": data, "model": model(request),
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}})
}

/// The text of the last user turn of a chat-like `messages` or Responses `input` (an
/// Anthropic `user` turn of `tool_result` blocks only is a tool's answer, not the user's).
fn last_user_text(turns: &Value) -> String {
    let Some(turns) = turns.as_array() else {
        return turns.as_str().unwrap_or_default().to_owned();
    };
    let Some(turn) = turns
        .iter()
        .rev()
        .find(|t| t["role"] == "user" && !only_tool_results(t))
    else {
        return String::new();
    };
    match &turn["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// Whether an Anthropic turn is a `user` turn of `tool_result` blocks only.
fn only_tool_results(turn: &Value) -> bool {
    turn["content"].as_array().is_some_and(|blocks| {
        !blocks.is_empty() && blocks.iter().all(|b| b["type"] == "tool_result")
    })
}

/// The results of the tool calls an Anthropic conversation ends with: the `tool_result`
/// blocks of its last turn, a `user` one.
fn message_tool_results(messages: &Value) -> Option<Vec<String>> {
    let last = messages.as_array()?.last()?;
    if last["role"] != "user" {
        return None;
    }
    let results: Vec<String> = last["content"]
        .as_array()?
        .iter()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| result_text(&b["content"]))
        .collect();
    (!results.is_empty()).then_some(results)
}

/// The results of the tool calls a Responses `input` ends with: its trailing
/// `function_call_output` items, in order.
fn response_tool_results(input: &Value) -> Option<Vec<String>> {
    let items = input.as_array()?;
    let results: Vec<String> = items
        .iter()
        .rev()
        .take_while(|item| item["type"] == "function_call_output")
        .map(|item| result_text(&item["output"]))
        .collect();
    (!results.is_empty()).then(|| results.into_iter().rev().collect())
}

/// The names of the tools in `tools` (Responses' and Anthropic's: `name` at the top).
fn tool_names(tools: &[Value]) -> Vec<&str> {
    tools.iter().filter_map(|t| t["name"].as_str()).collect()
}

fn answer_text(text: &str, results: Option<&[String]>, behaviour: &Behaviour) -> String {
    if behaviour.outcome == Outcome::MissingArtifact {
        return String::new();
    }
    tool_loop::answer_text(text, results)
}

/// An Anthropic `message`: text, or a `tool_use` (see the module docs): of the tool
/// `tool_choice` names (`{"type": "tool", "name"}`), of the mentioned or else the first tool
/// for `{"type": "any"}`, of the mentioned one unless the messages end with its result.
fn message_of(request: &Value, behaviour: &Behaviour) -> Value {
    let asked = last_user_text(&request["messages"]);
    let tools = request["tools"].as_array().cloned().unwrap_or_default();
    let names = tool_names(&tools);
    let results = message_tool_results(&request["messages"]);
    let called = match request["tool_choice"]["type"].as_str() {
        Some("tool") => request["tool_choice"]["name"].as_str().map(str::to_owned),
        Some("any") => tool_loop::mentioned_tool(&asked, &names)
            .or_else(|| names.first().map(|name| (*name).to_owned())),
        Some("none") => None,
        _ => tool_loop::unforced_call(&asked, &names, results.as_deref()),
    };
    let text = answer_text(&asked, results.as_deref(), behaviour);
    let (content, stop_reason) = match called {
        Some(name) => (
            json!([{"type": "tool_use", "id": id("toolu"), "name": name, "input": {}}]),
            "tool_use",
        ),
        None => (json!([{"type": "text", "text": text}]), "end_turn"),
    };
    json!({
        "id": id("msg"), "type": "message", "role": "assistant", "model": model(request),
        "content": content, "stop_reason": stop_reason, "stop_sequence": null,
        "usage": {"input_tokens": tokens(&asked), "output_tokens": tokens(&text)},
    })
}

/// An OpenAI `response` (see the module docs).
fn response_of(request: &Value, behaviour: &Behaviour) -> Value {
    let asked = last_user_text(&request["input"]);
    let tools = request["tools"].as_array().cloned().unwrap_or_default();
    let names = tool_names(&tools);
    let results = response_tool_results(&request["input"]);
    let unforced = || tool_loop::unforced_call(&asked, &names, results.as_deref());
    let called = match &request["tool_choice"] {
        Value::String(choice) if choice == "none" => None,
        Value::String(choice) if choice == "required" => tool_loop::mentioned_tool(&asked, &names)
            .or_else(|| names.first().map(|name| (*name).to_owned())),
        Value::Object(choice) => match choice.get("name").and_then(Value::as_str) {
            Some(name) => Some(name.to_owned()),
            None => unforced(),
        },
        _ => unforced(),
    };
    let mut text = answer_text(&asked, results.as_deref(), behaviour);
    if request["text"]["format"]["type"] == "json_schema" && !text.is_empty() {
        text = json!({ "text": text }).to_string();
    }
    let item = match called {
        Some(name) => json!({"type": "function_call", "id": id("fc"), "call_id": id("call"),
            "name": name, "arguments": "{}", "status": "completed"}),
        None => json!({"type": "message", "id": id("msg"), "status": "completed",
            "role": "assistant", "content": [{"type": "output_text", "text": text,
            "annotations": [], "logprobs": []}]}),
    };
    let (input_tokens, output_tokens) = (tokens(&asked), tokens(&text));
    // As OpenAI answers them: a function tool's `strict` is always there (default true).
    let tools: Vec<Value> = tools
        .into_iter()
        .map(|mut tool| {
            if tool["type"] == "function" && tool.get("strict").is_none() {
                tool["strict"] = json!(true);
            }
            tool
        })
        .collect();
    let pass = |name: &str, default: Value| request.get(name).cloned().unwrap_or(default);
    json!({
        "id": id("resp"), "object": "response", "created_at": now(), "status": "completed",
        "completed_at": now(), "model": model(request), "output": [item],
        "error": null, "incomplete_details": null,
        "instructions": pass("instructions", Value::Null),
        "metadata": pass("metadata", json!({})),
        "parallel_tool_calls": pass("parallel_tool_calls", json!(true)),
        "temperature": pass("temperature", json!(1.0)),
        "top_p": pass("top_p", json!(1.0)),
        "tool_choice": pass("tool_choice", json!("auto")),
        "tools": tools,
        "text": pass("text", json!({"format": {"type": "text"}})),
        "store": false,
        "usage": {"input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens},
    })
}

/// A 1×1 PNG, for `b64_json` answers.
pub(crate) const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0,
    0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// An `ImagesResponse` with `n` images (none for a missing artifact).
fn images_of(request: &Value, behaviour: &Behaviour) -> Value {
    let n = request["n"].as_u64().unwrap_or(1).clamp(1, 10);
    let digest = hex::encode(&hash(&request["prompt"])[..8]);
    let data: Vec<Value> = if behaviour.outcome == Outcome::MissingArtifact {
        Vec::new()
    } else {
        (0..n)
            .map(|i| {
                if request["response_format"] == "b64_json" {
                    json!({"b64_json": base64_encode(PNG)})
                } else {
                    json!({"url": format!("https://fake.invalid/images/{digest}-{i}.png")})
                }
            })
            .collect()
    };
    json!({"created": now(), "data": data})
}

/// Standard base64 with padding.
pub(crate) fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_pads_like_the_standard() {
        assert_eq!(base64_encode(b""), "");
        assert_eq!(base64_encode(b"f"), "Zg==");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
        assert_eq!(base64_encode(b"foo"), "Zm9v");
        assert_eq!(base64_encode(b"foob"), "Zm9vYg==");
    }

    #[test]
    fn embeddings_follow_the_input_and_the_encoding() {
        let plain = embedding_list(
            &json!({"model": "e", "input": ["a fox", "a hen"]}),
            &Behaviour::default(),
        );
        assert_eq!(plain["data"].as_array().unwrap().len(), 2);
        assert_eq!(plain["data"][1]["index"], 1);
        assert_eq!(plain["data"][0]["embedding"].as_array().unwrap().len(), 8);
        assert_eq!(plain["usage"]["prompt_tokens"], 4);
        let encoded = embedding_list(
            &json!({"input": "a fox", "encoding_format": "base64"}),
            &Behaviour::default(),
        );
        assert_eq!(encoded["data"][0]["embedding"].as_str().unwrap().len(), 44);
    }

    /// The text of a response's only output item, or the name of the function it calls.
    fn response_answer(response: &Value) -> (&str, &str) {
        let item = &response["output"][0];
        match item["type"].as_str() {
            Some("function_call") => ("function_call", item["name"].as_str().unwrap()),
            _ => ("message", item["content"][0]["text"].as_str().unwrap()),
        }
    }

    #[test]
    fn a_response_calls_the_tool_the_input_asks_for_then_answers_its_result() {
        let tools = json!([
            {"type": "function", "name": "lookup", "parameters": {"type": "object"}},
            {"type": "function", "name": "weigh", "parameters": {"type": "object"}},
        ]);
        let asked = "please call weigh the fox";
        let step = |input: Value, choice: Value| {
            let mut request = json!({"model": "m", "tools": tools, "input": input});
            if !choice.is_null() {
                request["tool_choice"] = choice;
            }
            response_of(&request, &Behaviour::default())
        };
        // As text, or as items with content parts: the mention calls the tool.
        let first = json!([{"role": "user", "content": [{"type": "input_text", "text": asked}]}]);
        for input in [json!(asked), first.clone()] {
            assert_eq!(
                response_answer(&step(input, Value::Null)),
                ("function_call", "weigh")
            );
        }
        assert_eq!(
            response_answer(&step(first.clone(), json!("none"))).0,
            "message",
            "`none` never calls"
        );
        // The call and its output appended: the answer names the result.
        let mut answered = first.as_array().unwrap().clone();
        answered.push(
            json!({"type": "function_call", "id": "fc_1", "call_id": "call_1",
            "name": "weigh", "arguments": "{}", "status": "completed"}),
        );
        answered.push(json!({"type": "function_call_output", "call_id": "call_1",
            "output": "7 kg"}));
        let answered = Value::Array(answered);
        for choice in [Value::Null, json!("auto")] {
            let response = step(answered.clone(), choice);
            assert_eq!(
                response_answer(&response),
                (
                    "message",
                    "fake answer: please call weigh the fox (tool result: 7 kg)"
                )
            );
        }
        assert_eq!(
            response_answer(&step(answered.clone(), json!("required"))),
            ("function_call", "weigh"),
            "`required` still forces a call (of the tool asked for)"
        );
        assert_eq!(
            response_answer(&step(
                answered.clone(),
                json!({"type": "function", "name": "lookup"})
            )),
            ("function_call", "lookup")
        );
        // An output given as content parts is read as its text.
        let parts = json!([{"type": "function_call_output", "call_id": "c",
            "output": [{"type": "input_text", "text": "red"}]}]);
        assert_eq!(response_tool_results(&parts), Some(vec!["red".to_owned()]));
        assert_eq!(response_tool_results(&json!("text")), None);
    }

    /// The text of a message's only block, or the name of the tool it uses.
    fn message_answer(message: &Value) -> (&str, &str) {
        let block = &message["content"][0];
        match block["type"].as_str() {
            Some("tool_use") => ("tool_use", block["name"].as_str().unwrap()),
            _ => ("text", block["text"].as_str().unwrap()),
        }
    }

    #[test]
    fn a_message_uses_the_tool_the_user_asks_for_then_answers_its_result() {
        let tools = json!([
            {"name": "lookup", "input_schema": {"type": "object"}},
            {"name": "weigh", "input_schema": {"type": "object"}},
        ]);
        let asked = "please call weigh the fox";
        let step = |messages: Value, choice: Value| {
            let mut request =
                json!({"model": "m", "max_tokens": 100, "tools": tools, "messages": messages});
            if !choice.is_null() {
                request["tool_choice"] = choice;
            }
            message_of(&request, &Behaviour::default())
        };
        let first = json!([{"role": "user", "content": [{"type": "text", "text": asked}]}]);
        let used = step(first.clone(), Value::Null);
        assert_eq!(message_answer(&used), ("tool_use", "weigh"));
        assert_eq!(used["stop_reason"], "tool_use");
        assert_eq!(
            message_answer(&step(
                json!([{"role": "user", "content": asked}]),
                json!({"type": "auto"})
            )),
            ("tool_use", "weigh")
        );
        assert_eq!(
            message_answer(&step(first.clone(), json!({"type": "none"}))).0,
            "text"
        );
        let mut answered = first.as_array().unwrap().clone();
        answered.push(json!({"role": "assistant", "content": [{"type": "tool_use",
            "id": "toolu_1", "name": "weigh", "input": {}}]}));
        answered.push(json!({"role": "user", "content": [{"type": "tool_result",
            "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "7 kg"}]}]}));
        let answered = Value::Array(answered);
        let after = step(answered.clone(), Value::Null);
        assert_eq!(
            message_answer(&after),
            (
                "text",
                "fake answer: please call weigh the fox (tool result: 7 kg)"
            ),
            "the user's text is the turn before the tool results"
        );
        assert_eq!(after["stop_reason"], "end_turn");
        assert_eq!(
            message_answer(&step(answered.clone(), json!({"type": "any"}))),
            ("tool_use", "weigh"),
            "`any` still forces a call (of the tool asked for)"
        );
        assert_eq!(
            message_answer(&step(answered, json!({"type": "tool", "name": "lookup"}))),
            ("tool_use", "lookup")
        );
        // Without a mention, `any` calls the first tool, as before.
        let plain = json!([{"role": "user", "content": "hello"}]);
        assert_eq!(
            message_answer(&step(plain, json!({"type": "any"}))),
            ("tool_use", "lookup")
        );
    }
}
