//! Streamed chat completions over real HTTP: OpenAI's server-sent chunk format, latency
//! spread over the chunks, the optional usage chunk, replays of a streamed call in either
//! form, concurrent streams under one key, a stream that breaks, and hangs.

mod harness;

use std::time::{Duration, Instant};

use harness::{Fake, chat_body, read_events, rule, start, stream_body};
use serde_json::{Value, json};

/// A prompt long enough for a many-word answer.
const PROMPT: &str = "Describe a red fox in the snow.";

/// Posts a body (with an optional key) and asserts a 200 event stream.
async fn stream(fake: &Fake, body: &Value, key: Option<&str>) -> reqwest::Response {
    let response = fake.post("/v1/chat/completions", body, key).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    response
}

/// The non-streamed completion of a body (asserting a 200).
async fn completion(fake: &Fake, body: &Value, key: Option<&str>) -> Value {
    let response = fake.post("/v1/chat/completions", body, key).await;
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

#[tokio::test]
async fn a_stream_has_the_openai_chunk_format_and_assembles_to_the_completion() {
    let fake = start().await;
    let streamed = read_events(stream(&fake, &stream_body(PROMPT), None).await).await;
    assert!(!streamed.cut, "the body ends cleanly");
    assert!(streamed.rest.is_empty(), "nothing after the last event");
    assert!(streamed.done(), "the last event is [DONE]");
    let chunks = streamed.chunks();
    assert_eq!(chunks.len() + 1, streamed.events.len(), "one [DONE] only");
    let id = chunks[0]["id"].as_str().unwrap();
    assert!(id.starts_with("chatcmpl-"));
    for chunk in &chunks {
        assert_eq!(chunk["id"], id, "one id for every chunk");
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["model"], "fake-1");
        assert_eq!(chunk["created"], chunks[0]["created"]);
        assert!(
            chunk.get("usage").is_none(),
            "no usage unless asked: {chunk}"
        );
        assert_eq!(chunk["choices"].as_array().unwrap().len(), 1);
        assert_eq!(chunk["choices"][0]["index"], 0);
    }
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    let (finish, middle) = chunks[1..].split_last().unwrap();
    assert!(middle.len() >= 3, "the content comes in pieces: {middle:?}");
    for chunk in middle {
        let delta = chunk["choices"][0]["delta"].as_object().unwrap();
        assert_eq!(delta.keys().collect::<Vec<_>>(), ["content"], "{chunk}");
        assert_eq!(chunk["choices"][0]["finish_reason"], Value::Null);
    }
    assert_eq!(finish["choices"][0]["delta"], json!({}));
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");

    let whole = completion(&fake, &chat_body(PROMPT), None).await;
    assert_eq!(
        streamed.text(),
        whole["choices"][0]["message"]["content"].as_str().unwrap(),
        "the pieces assemble to the non-streamed content"
    );
    let output: Value = serde_json::from_str(&streamed.text()).unwrap();
    assert_eq!(output, json!({"text": format!("fake answer: {PROMPT}")}));
}

#[tokio::test]
async fn include_usage_adds_one_usage_chunk_before_done() {
    let fake = start().await;
    let mut body = stream_body(PROMPT);
    body["stream_options"] = json!({"include_usage": true});
    let streamed = read_events(stream(&fake, &body, None).await).await;
    assert!(streamed.done());
    let chunks = streamed.chunks();
    let usage_chunk = chunks.last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(usage_chunk["object"], "chat.completion.chunk");
    assert_eq!(usage_chunk["id"], chunks[0]["id"]);
    let usage = &usage_chunk["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
    );
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    let usages = chunks.iter().filter(|c| c.get("usage").is_some()).count();
    assert_eq!(usages, 1);
    let whole = completion(&fake, &chat_body(PROMPT), None).await;
    assert_eq!(
        *usage, whole["usage"],
        "the same usage as the non-streamed answer"
    );
}

#[tokio::test]
async fn the_latency_is_spread_over_the_chunks() {
    let fake = start().await;
    fake.server
        .add_rule(rule(json!({"ack_delay_ms": 150, "run_ms": 800})));
    let sent = Instant::now();
    let response = stream(&fake, &stream_body(PROMPT), None).await;
    assert!(
        sent.elapsed() >= Duration::from_millis(150),
        "the headers and the role chunk wait for ack_delay_ms"
    );
    let streamed = read_events(response).await;
    assert!(streamed.done());
    let role = &streamed.events[0];
    let content: Vec<_> = streamed.events[1..streamed.events.len() - 2]
        .iter()
        .collect();
    assert!(content.len() >= 3);
    let last = content.last().unwrap();
    assert!(
        last.at.duration_since(sent) >= Duration::from_millis(150 + 800),
        "the last content chunk comes after ack_delay_ms + run_ms"
    );
    assert!(
        last.at.duration_since(role.at) >= Duration::from_millis(400),
        "the content chunks arrive over time, not at once"
    );
    let distinct = content
        .windows(2)
        .filter(|pair| pair[1].at > pair[0].at)
        .count();
    assert!(distinct >= 1, "chunks arrive at different times");
}

#[tokio::test]
async fn a_streamed_call_is_replayed_as_the_same_stream_or_the_same_completion() {
    let fake = start().await;
    let first = read_events(stream(&fake, &stream_body(PROMPT), Some("s-1")).await).await;
    let response = stream(&fake, &stream_body(PROMPT), Some("s-1")).await;
    assert_eq!(response.headers()["idempotent-replayed"], "true");
    let replay = read_events(response).await;
    let data = |streamed: &harness::Streamed| {
        streamed
            .events
            .iter()
            .map(|event| event.data.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        data(&first),
        data(&replay),
        "same id, same content, same chunking"
    );
    let as_json = fake
        .post("/v1/chat/completions", &chat_body(PROMPT), Some("s-1"))
        .await;
    assert_eq!(as_json.headers()["idempotent-replayed"], "true");
    assert!(
        as_json.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    let as_json: Value = as_json.json().await.unwrap();
    assert_eq!(as_json["object"], "chat.completion");
    assert_eq!(as_json["id"], first.chunks()[0]["id"]);
    assert_eq!(as_json["choices"][0]["message"]["content"], first.text());
    let submissions = fake.server.submissions();
    assert_eq!(submissions.total, 1);
    assert_eq!(submissions.idempotent_replays, 2);
}

#[tokio::test]
async fn a_non_streamed_call_is_replayed_as_a_stream_when_asked() {
    let fake = start().await;
    let first = completion(&fake, &chat_body(PROMPT), Some("j-1")).await;
    let replay = read_events(stream(&fake, &stream_body(PROMPT), Some("j-1")).await).await;
    assert!(replay.done());
    assert_eq!(replay.chunks()[0]["id"], first["id"]);
    assert_eq!(replay.text(), first["choices"][0]["message"]["content"]);
    let submissions = fake.server.submissions();
    assert_eq!(submissions.total, 1);
    assert_eq!(submissions.idempotent_replays, 1);
}

#[tokio::test]
async fn a_concurrent_stream_under_the_same_key_attaches_to_the_running_one() {
    let fake = start().await;
    fake.server.add_rule(rule(json!({"run_ms": 800})));
    let first = {
        let request = fake
            .http
            .post(fake.url("/v1/chat/completions"))
            .header("Idempotency-Key", "live")
            .json(&stream_body(PROMPT));
        tokio::spawn(async move { read_events(request.send().await.unwrap()).await })
    };
    fake.eventually_total(1).await;
    let response = stream(&fake, &stream_body(PROMPT), Some("live")).await;
    assert_eq!(response.headers()["idempotent-replayed"], "true");
    let second = read_events(response).await;
    let first = first.await.unwrap();
    assert!(first.done() && second.done());
    let data = |streamed: &harness::Streamed| {
        streamed
            .events
            .iter()
            .map(|event| event.data.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(data(&first), data(&second));
    assert!(
        second.events[0].at < first.events.last().unwrap().at,
        "the second stream starts while the first is still being produced"
    );
    let submissions = fake.server.submissions();
    assert_eq!(submissions.total, 1, "the work ran once");
    assert_eq!(submissions.idempotent_replays, 1);
}

#[tokio::test]
async fn break_stream_after_closes_the_connection_mid_stream() {
    let fake = start().await;
    fake.server
        .add_rule(rule(json!({"break_stream_after": 2, "run_ms": 100})));
    let broken = read_events(stream(&fake, &stream_body(PROMPT), Some("b")).await).await;
    assert!(broken.cut, "the connection closes mid-body");
    assert!(!broken.done(), "no [DONE]");
    let chunks = broken.chunks();
    assert_eq!(chunks.len(), 3, "the role chunk and two content chunks");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    for chunk in &chunks {
        assert_eq!(chunk["choices"][0]["finish_reason"], Value::Null);
    }

    let replay = read_events(stream(&fake, &stream_body(PROMPT), Some("b")).await).await;
    assert!(replay.cut && !replay.done());
    assert_eq!(replay.chunks(), chunks, "a replay breaks at the same place");

    let response = fake
        .post("/v1/chat/completions", &chat_body(PROMPT), None)
        .await;
    assert_eq!(response.status(), 200, "the headers come, then nothing");
    assert!(response.bytes().await.is_err(), "the body never completes");
    let submissions = fake.server.submissions();
    assert_eq!(submissions.total, 2);
    assert_eq!(submissions.idempotent_replays, 1);
}

#[tokio::test]
async fn break_stream_after_zero_sends_only_the_role_chunk() {
    let fake = start().await;
    fake.server.add_rule(rule(json!({"break_stream_after": 0})));
    let broken = read_events(stream(&fake, &stream_body(PROMPT), None).await).await;
    assert!(broken.cut);
    assert_eq!(broken.chunks().len(), 1);
}

#[tokio::test]
async fn hang_after_ack_streams_the_role_chunk_then_nothing_until_the_server_stops() {
    let fake = start().await;
    fake.server.add_rule(rule(json!({"hang_after_ack": true})));
    let mut response = stream(&fake, &stream_body(PROMPT), None).await;
    let first = response.chunk().await.unwrap().expect("the role chunk");
    let first = std::str::from_utf8(&first).unwrap();
    let role: Value =
        serde_json::from_str(first.strip_prefix("data: ").unwrap().trim_end()).unwrap();
    assert_eq!(
        role["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    let silence = tokio::time::timeout(Duration::from_millis(400), response.chunk()).await;
    assert!(silence.is_err(), "nothing after the role chunk");
    assert_eq!(fake.server.submissions().total, 1);
    drop(fake.server);
    let rest = tokio::time::timeout(harness::DEADLINE, read_events(response))
        .await
        .expect("the stream ends when the server stops");
    assert!(rest.cut && rest.events.is_empty(), "cut, without [DONE]");
}

#[tokio::test]
async fn hang_before_ack_sends_no_headers() {
    let fake = start().await;
    fake.server.add_rule(rule(json!({"hang_before_ack": true})));
    let result = fake
        .http
        .post(fake.url("/v1/chat/completions"))
        .json(&stream_body(PROMPT))
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(result.expect_err("no answer at all").is_timeout());
    assert_eq!(fake.server.submissions().total, 1);
}

#[tokio::test]
async fn failures_and_scripted_statuses_are_json_errors_before_any_stream() {
    for (script, status) in [
        (json!({"outcome": "fail", "run_ms": 50}), 400),
        (json!({"http_status": 503}), 503),
    ] {
        let fake = start().await;
        fake.server.add_rule(rule(script.clone()));
        let response = fake
            .post("/v1/chat/completions", &stream_body(PROMPT), None)
            .await;
        assert_eq!(response.status(), status, "{script}");
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json")
        );
        let error: Value = response.json().await.unwrap();
        assert!(error["error"]["message"].is_string(), "{error}");
    }
}

#[tokio::test]
async fn scripted_outcomes_and_output_are_streamed_as_their_content() {
    let cases = [
        (json!({"outcome": "malformed"}), "not json {".to_owned()),
        (
            json!({"outcome": "drifted_keys"}),
            json!({"answer": format!("fake answer: {PROMPT}")}).to_string(),
        ),
        (
            json!({"outcome": "missing_artifact"}),
            json!({"text": ""}).to_string(),
        ),
        (
            json!({"output": {"caption": "a fox", "tags": ["red", "fox"]}}),
            json!({"caption": "a fox", "tags": ["red", "fox"]}).to_string(),
        ),
    ];
    for (script, content) in cases {
        let fake = start().await;
        fake.server.add_rule(rule(script.clone()));
        let streamed = read_events(stream(&fake, &stream_body(PROMPT), None).await).await;
        assert!(streamed.done(), "{script}");
        assert_eq!(streamed.text(), content, "{script}");
    }
}
