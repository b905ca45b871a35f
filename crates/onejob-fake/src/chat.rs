//! The OpenAI-compatible chat shape: `POST /v1/chat/completions`, answered as one JSON
//! completion or, for `"stream": true`, as server-sent events (see [`crate::completion`]
//! for both wire forms).
//!
//! The request's input (what rules match and what the side-effect log keys on) is its
//! `messages` array; the whole body is recorded too. The answer's `content` is the JSON text
//! of the output, by default `{"text": "fake answer: <last user message>"}`, whatever the
//! `response_format`. The answer is a tool call instead when the request has `tools` and its
//! `tool_choice` is `"required"` or names a function, or the last user message says
//! `call <name>` of a listed tool (unless `tool_choice` is `"none"`, or the messages end
//! with `role: "tool"` results: that call was answered, see [`crate::tool_loop`]); the
//! call's arguments are the JSON text of the scripted `output`, else `{}`. After tool
//! results the text names them: `fake answer: <last user message> (tool result: …)`.
//!
//! The timeline: the acknowledgement (a stream's role chunk) comes after `ack_delay_ms`, the
//! content chunks follow spread evenly over `run_ms`, and a non-streamed answer comes when
//! the last chunk would. The work runs in its own task and publishes its progress in the
//! request's slot, so it completes even when the caller gave up, and a request replaying
//! its `Idempotency-Key` follows the same slot: live while the work is still running (the
//! chunks as they come out), at once when it is over, in whichever form the replay asked.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::{
    Json,
    body::{Body, Bytes},
    extract::State,
    http::{HeaderMap, HeaderValue, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::behaviour::{Behaviour, Outcome};
use crate::completion::{Answer, Completion, DONE};
use crate::error::{FakeError, parse_json};
use crate::idempotency::{idempotency_key, mark_replayed};
use crate::state::{ChatAdmission, ChatSlot, Progress, SentChat, Shared, StoredReply};
use crate::submissions::canonical_text;
use crate::tool_loop::{answer_text, mentioned_tool, result_text, unforced_call};

/// How long a cut answer waits after its last bytes before the connection closes, so they
/// leave the server first.
const CUT_GRACE: Duration = Duration::from_millis(20);

/// The form a request wants its answer in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// One `chat.completion` document.
    Json,
    /// Server-sent `chat.completion.chunk`s, with the usage chunk if `include_usage`.
    Stream {
        /// `stream_options.include_usage`.
        include_usage: bool,
    },
}

impl Form {
    fn of(request: &Value) -> Form {
        if request["stream"] == true {
            Form::Stream {
                include_usage: request["stream_options"]["include_usage"] == true,
            }
        } else {
            Form::Json
        }
    }
}

/// `POST /v1/chat/completions`. Every answer names the request in an `x-request-id`
/// header, as OpenAI's do.
pub(crate) async fn completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request_id = format!("req_{}", uuid::Uuid::now_v7().simple());
    let mut response = match answer_request(shared, headers, body, &request_id).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    };
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert("x-request-id", value);
    }
    response
}

async fn answer_request(
    shared: Arc<Shared>,
    headers: HeaderMap,
    body: Bytes,
    request_id: &str,
) -> Result<Response, FakeError> {
    let request = parse_json(&body)?;
    let sent = SentChat {
        body_text: String::from_utf8_lossy(&body).into_owned(),
        request_id: request_id.to_owned(),
    };
    let key = idempotency_key(&headers)?;
    let Some(messages) = request.get("messages").filter(|m| m.is_array()) else {
        return Err(FakeError::BadRequest(
            "the request needs a `messages` array".into(),
        ));
    };
    let tool = called_tool(&request, messages)?;
    let form = Form::of(&request);
    match shared.admit_chat(&request, &sent, key) {
        ChatAdmission::Replay(progress) => {
            Ok(mark_replayed(answer(&shared, progress, form).await?))
        }
        ChatAdmission::Scripted(status, retry_after) => {
            Err(FakeError::ScriptedStatus(status, retry_after))
        }
        ChatAdmission::Run { behaviour, slot } => {
            let progress = slot.subscribe();
            let outcome = outcome_of(&request, tool, &behaviour);
            tokio::spawn(run(Arc::clone(&shared), outcome, behaviour, slot));
            answer(&shared, progress, form).await
        }
    }
}

/// Plays the behaviour's timeline, publishing the progress in `slot` (never finishing, if
/// it hangs).
async fn run(
    shared: Arc<Shared>,
    outcome: Result<Completion, StoredReply>,
    behaviour: Behaviour,
    slot: ChatSlot,
) {
    // Keeping `slot` alive while hanging keeps the caller and replays waiting until the
    // server stops.
    if behaviour.hang_before_ack {
        shared.until_shutdown().await;
        return;
    }
    let started = Instant::now();
    let acknowledged = started + Duration::from_millis(behaviour.ack_delay_ms);
    let completion = match outcome {
        Err(failure) => {
            if behaviour.hang_after_ack {
                shared.until_shutdown().await;
                return;
            }
            let over = acknowledged + Duration::from_millis(behaviour.run_ms);
            if pause_until(&shared, over).await {
                slot.send_replace(Progress::Failed(failure));
            }
            return;
        }
        Ok(completion) => Arc::new(completion),
    };
    if !pause_until(&shared, acknowledged).await {
        return;
    }
    let publish = |pieces: usize, finished: bool| {
        slot.send_replace(Progress::Answering {
            completion: Arc::clone(&completion),
            pieces,
            finished,
        });
    };
    publish(0, false);
    if behaviour.hang_after_ack {
        shared.until_shutdown().await;
        return;
    }
    let total = completion.pieces().len();
    let sent = completion.pieces_sent();
    if sent == 0 {
        // Nothing to spread the run over: a break right after the role chunk comes at once.
        let over = if completion.breaks() {
            acknowledged
        } else {
            acknowledged + Duration::from_millis(behaviour.run_ms)
        };
        if pause_until(&shared, over).await {
            publish(0, true);
        }
        return;
    }
    for piece in 1..=sent {
        let share = behaviour.run_ms.saturating_mul(piece as u64) / total as u64;
        if !pause_until(&shared, acknowledged + Duration::from_millis(share)).await {
            return;
        }
        publish(piece, piece == sent);
    }
}

/// Sleeps until `deadline`; false if the server stopped first.
async fn pause_until(shared: &Shared, deadline: Instant) -> bool {
    tokio::select! {
        () = tokio::time::sleep_until(deadline) => true,
        () = shared.until_shutdown() => false,
    }
}

/// Waits until `ready` holds for the progress; a 503 if the server stops first.
async fn progress_when(
    shared: &Shared,
    progress: &mut watch::Receiver<Progress>,
    ready: impl FnMut(&Progress) -> bool,
) -> Result<Progress, FakeError> {
    tokio::select! {
        reached = progress.wait_for(ready) => {
            reached.map(|now| now.clone()).map_err(|_| FakeError::ShuttingDown)
        }
        () = shared.until_shutdown() => Err(FakeError::ShuttingDown),
    }
}

/// Answers a request following `progress`, in its form.
async fn answer(
    shared: &Arc<Shared>,
    progress: watch::Receiver<Progress>,
    form: Form,
) -> Result<Response, FakeError> {
    match form {
        Form::Json => json_answer(shared, progress).await,
        Form::Stream { include_usage } => stream_answer(shared, progress, include_usage).await,
    }
}

/// The non-streamed answer, once the completion is over.
async fn json_answer(
    shared: &Shared,
    mut progress: watch::Receiver<Progress>,
) -> Result<Response, FakeError> {
    let over = progress_when(shared, &mut progress, |now| match now {
        Progress::Waiting => false,
        Progress::Answering { finished, .. } => *finished,
        Progress::Failed(_) => true,
    })
    .await?;
    Ok(match over {
        Progress::Failed(failure) => failure_response(failure),
        Progress::Answering { completion, .. } if completion.breaks() => cut_response(),
        Progress::Answering { completion, .. } => Json(completion.json()).into_response(),
        // Excluded by the wait.
        Progress::Waiting => FakeError::ShuttingDown.into_response(),
    })
}

/// The streamed answer: its headers once the completion is acknowledged (or the JSON error
/// it failed with), then its events as they come out.
async fn stream_answer(
    shared: &Arc<Shared>,
    mut progress: watch::Receiver<Progress>,
    include_usage: bool,
) -> Result<Response, FakeError> {
    let acknowledged = progress_when(shared, &mut progress, |now| {
        !matches!(now, Progress::Waiting)
    })
    .await?;
    if let Progress::Failed(failure) = acknowledged {
        return Ok(failure_response(failure));
    }
    let (events, received) = mpsc::channel(16);
    tokio::spawn(stream_events(
        Arc::clone(shared),
        progress,
        include_usage,
        events,
    ));
    Ok(event_stream_response(received))
}

/// What the event pump hands the response body.
enum Emit {
    /// Bytes to send.
    Data(Bytes),
    /// Close the connection without finishing the body.
    Cut,
}

/// Follows `progress` and sends a stream's events as they come out: the role chunk, the
/// pieces, then the finish, usage and `[DONE]` events, or a cut.
async fn stream_events(
    shared: Arc<Shared>,
    mut progress: watch::Receiver<Progress>,
    include_usage: bool,
    sender: mpsc::Sender<Emit>,
) {
    let mut sent: Option<usize> = None;
    loop {
        let now = progress.borrow_and_update().clone();
        let Progress::Answering {
            completion,
            pieces,
            finished,
        } = now
        else {
            // Not reachable once acknowledged; a stream that cannot go on is cut.
            let _ = sender.send(Emit::Cut).await;
            return;
        };
        let mut events = Vec::new();
        if sent.is_none() {
            events.push(completion.role_event());
        }
        let from = sent.unwrap_or(0);
        events.extend((from..pieces).map(|piece| completion.piece_event(piece)));
        sent = Some(pieces.max(from));
        for event in events {
            if sender.send(Emit::Data(event)).await.is_err() {
                return; // The caller hung up.
            }
        }
        if finished {
            if completion.breaks() {
                let _ = sender.send(Emit::Cut).await;
                return;
            }
            let mut tail = vec![completion.finish_event()];
            if include_usage {
                tail.push(completion.usage_event());
            }
            tail.push(Bytes::from_static(DONE));
            for event in tail {
                if sender.send(Emit::Data(event)).await.is_err() {
                    return;
                }
            }
            return;
        }
        let going_on = tokio::select! {
            changed = progress.changed() => changed.is_ok(),
            () = shared.until_shutdown() => false,
        };
        if !going_on {
            let _ = sender.send(Emit::Cut).await;
            return;
        }
    }
}

/// A response body fed by the event pump; a cut ends it with an error, which closes the
/// connection without the rest of the body (after [`CUT_GRACE`], so the bytes before it
/// are flushed first).
fn pumped_body(received: mpsc::Receiver<Emit>) -> Body {
    let chunks = futures::stream::unfold(Some(received), |state| async move {
        let mut received = state?;
        match received.recv().await? {
            Emit::Data(bytes) => Some((Ok(bytes), Some(received))),
            Emit::Cut => {
                tokio::time::sleep(CUT_GRACE).await;
                let cut = std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "the fake provider cuts this answer short",
                );
                Some((Err(cut), None))
            }
        }
    });
    Body::from_stream(chunks)
}

fn with_content_type(body: Body, content_type: &'static str) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if content_type == "text/event-stream" {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    response
}

/// `200 text/event-stream` with the events the pump sends.
fn event_stream_response(received: mpsc::Receiver<Emit>) -> Response {
    with_content_type(pumped_body(received), "text/event-stream")
}

/// `200 application/json` whose body never comes: the connection closes after the headers.
fn cut_response() -> Response {
    let (sender, received) = mpsc::channel(1);
    // The channel has room for this one message.
    let _ = sender.try_send(Emit::Cut);
    with_content_type(pumped_body(received), "application/json")
}

fn failure_response(failure: StoredReply) -> Response {
    (failure.status, Json(failure.body)).into_response()
}

/// The function the answer calls, if any (see the module docs); a `tool_choice` that cannot
/// be honoured is a 400, as upstream.
fn called_tool(request: &Value, messages: &Value) -> Result<Option<String>, FakeError> {
    let names: Vec<&str> = request
        .get("tools")
        .and_then(Value::as_array)
        .map(|tools| {
            tools
                .iter()
                .filter_map(|tool| tool["function"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    let asked = last_user_text(messages);
    let results = tool_results(messages);
    let unforced = || unforced_call(&asked, &names, results.as_deref());
    match request.get("tool_choice") {
        Some(Value::String(choice)) if choice == "none" => Ok(None),
        Some(Value::String(choice)) if choice == "required" => {
            let first = names.first().ok_or_else(|| {
                FakeError::BadRequest("tool_choice `required` needs a non-empty `tools`".into())
            })?;
            Ok(Some(
                mentioned_tool(&asked, &names).unwrap_or_else(|| (*first).to_owned()),
            ))
        }
        Some(Value::Object(choice)) => match choice
            .get("function")
            .and_then(|function| function.get("name"))
            .and_then(Value::as_str)
        {
            Some(name) if names.contains(&name) => Ok(Some(name.to_owned())),
            Some(name) => Err(FakeError::BadRequest(format!(
                "tool_choice names the function `{name}`, which is not in `tools`"
            ))),
            None => Ok(unforced()),
        },
        _ => Ok(unforced()),
    }
}

/// What the work ends with: the completion, or the scripted failure.
fn outcome_of(
    request: &Value,
    tool: Option<String>,
    behaviour: &Behaviour,
) -> Result<Completion, StoredReply> {
    if behaviour.outcome == Outcome::Fail {
        let failure = FakeError::ScriptedFailure;
        return Err(StoredReply {
            status: failure.status(),
            body: failure.body(),
        });
    }
    let messages = request.get("messages").unwrap_or(&Value::Null);
    let answer = match tool {
        Some(name) => Answer::ToolCall {
            id: format!("call_{}", uuid::Uuid::now_v7().simple()),
            name,
            arguments: match (&behaviour.output, behaviour.outcome) {
                (Some(output), _) => output.to_string(),
                (None, Outcome::Malformed) => "not json {".to_owned(),
                (None, _) => "{}".to_owned(),
            },
        },
        None => {
            let text = answer_text(&last_user_text(messages), tool_results(messages).as_deref());
            Answer::Content(match (&behaviour.output, behaviour.outcome) {
                (Some(output), _) => output.to_string(),
                (None, Outcome::Malformed) => "not json {".to_owned(),
                (None, Outcome::MissingArtifact) => json!({"text": ""}).to_string(),
                (None, Outcome::DriftedKeys) => json!({"answer": text}).to_string(),
                (None, _) => json!({"text": text}).to_string(),
            })
        }
    };
    let prompt_tokens = words(&canonical_text(messages));
    let completion_tokens = match &answer {
        Answer::Content(content) => words(content),
        Answer::ToolCall {
            name, arguments, ..
        } => words(name) + words(arguments),
    };
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    Ok(Completion::new(
        format!("chatcmpl-{}", uuid::Uuid::now_v7()),
        created,
        request
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("fake")
            .to_owned(),
        answer,
        json!({
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }),
        behaviour
            .break_stream_after
            .map(|pieces| usize::try_from(pieces).unwrap_or(usize::MAX)),
    )
    .thinking(behaviour.reasoning.clone())
    .with_logprobs(request.get("logprobs") == Some(&Value::Bool(true))))
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

/// The results of the tool calls the messages end with (their trailing `role: "tool"`
/// messages, in order), if they end so.
fn tool_results(messages: &Value) -> Option<Vec<String>> {
    let all = messages.as_array()?;
    let results: Vec<String> = all
        .iter()
        .rev()
        .take_while(|m| m["role"] == "tool")
        .map(|m| result_text(&m["content"]))
        .collect();
    (!results.is_empty()).then(|| results.into_iter().rev().collect())
}

/// A rough token count: whitespace-separated words, at least 1.
fn words(text: &str) -> u64 {
    (text.split_whitespace().count() as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

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
        let completion = outcome_of(&request, None, &custom)
            .expect("a completion")
            .json();
        assert_eq!(completion["choices"][0]["message"]["content"], "{\"x\":1}");
        assert_eq!(completion["model"], "m");
        let failing = Behaviour {
            outcome: Outcome::Fail,
            ..custom
        };
        let failure = outcome_of(&request, None, &failing).expect_err("a failure");
        assert_eq!(failure.status, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn a_tool_is_called_when_required_named_or_asked_for() {
        let tools = json!([
            {"type": "function", "function": {"name": "lookup"}},
            {"type": "function", "function": {"name": "lookup_all"}},
        ]);
        let asking = |text: &str, choice: Value| {
            let mut request =
                json!({"tools": tools, "messages": [{"role": "user", "content": text}]});
            if !choice.is_null() {
                request["tool_choice"] = choice;
            }
            called_tool(&request, &request["messages"])
        };
        assert_eq!(asking("hello", Value::Null).unwrap(), None);
        assert_eq!(asking("hello", json!("auto")).unwrap(), None);
        assert_eq!(
            asking("hello", json!("required")).unwrap().as_deref(),
            Some("lookup")
        );
        assert_eq!(
            asking("please call lookup_all now", Value::Null)
                .unwrap()
                .as_deref(),
            Some("lookup_all"),
            "a whole-word match, not the prefix `lookup`"
        );
        assert_eq!(
            asking("call lookup_all, then call lookup", json!("required"))
                .unwrap()
                .as_deref(),
            Some("lookup_all"),
            "the first mention wins"
        );
        assert_eq!(asking("recall lookup", Value::Null).unwrap(), None);
        assert_eq!(asking("call lookup", json!("none")).unwrap(), None);
        let named = json!({"type": "function", "function": {"name": "lookup_all"}});
        assert_eq!(asking("hi", named).unwrap().as_deref(), Some("lookup_all"));
        let unknown = json!({"type": "function", "function": {"name": "nope"}});
        assert!(matches!(
            asking("hi", unknown),
            Err(FakeError::BadRequest(_))
        ));
        let bare = json!({"messages": [], "tool_choice": "required"});
        assert!(matches!(
            called_tool(&bare, &bare["messages"]),
            Err(FakeError::BadRequest(_))
        ));
    }

    #[test]
    fn after_a_tools_result_the_answer_is_text_naming_it_unless_a_call_is_forced() {
        let tools = json!([
            {"type": "function", "function": {"name": "lookup"}},
            {"type": "function", "function": {"name": "weigh"}},
        ]);
        let asked = "please call weigh the fox";
        let call = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weigh", "arguments": "{}"}},
        ]});
        let answered = json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": asked},
            call,
            {"role": "tool", "tool_call_id": "call_1", "content": "7 kg"},
        ]);
        let request = |messages: &Value, choice: Value| {
            let mut request = json!({"model": "m", "tools": tools, "messages": messages});
            if !choice.is_null() {
                request["tool_choice"] = choice;
            }
            request
        };
        let first = json!([{"role": "user", "content": asked}]);
        assert_eq!(
            called_tool(&request(&first, Value::Null), &first)
                .unwrap()
                .as_deref(),
            Some("weigh"),
            "the first step calls the tool the user asked for"
        );
        for choice in [Value::Null, json!("auto")] {
            let step = request(&answered, choice);
            let tool = called_tool(&step, &answered).unwrap();
            assert_eq!(tool, None, "{step}");
            let completion = outcome_of(&step, tool, &Behaviour::default())
                .expect("a completion")
                .json();
            let message = &completion["choices"][0]["message"];
            assert_eq!(completion["choices"][0]["finish_reason"], "stop");
            assert_eq!(
                message["content"],
                json!({"text": format!("fake answer: {asked} (tool result: 7 kg)")}).to_string()
            );
        }
        assert_eq!(
            called_tool(&request(&answered, json!("required")), &answered)
                .unwrap()
                .as_deref(),
            Some("weigh"),
            "`required` still forces a call"
        );
        let named = json!({"type": "function", "function": {"name": "lookup"}});
        assert_eq!(
            called_tool(&request(&answered, named), &answered)
                .unwrap()
                .as_deref(),
            Some("lookup"),
            "a named function still forces a call"
        );
        // Two results of parallel calls, as parts: both named, in order.
        let mut parallel = answered.clone();
        parallel
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "tool", "tool_call_id": "call_2",
                "content": [{"type": "text", "text": "red"}]}));
        assert_eq!(
            tool_results(&parallel),
            Some(vec!["7 kg".into(), "red".into()])
        );
        // A user turn after the result starts over: the mention asks again.
        let mut again = answered.clone();
        again
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "user", "content": "now call lookup"}));
        assert_eq!(tool_results(&again), None);
        assert_eq!(
            called_tool(&request(&again, Value::Null), &again)
                .unwrap()
                .as_deref(),
            Some("lookup")
        );
    }
}
