//! The gateway beyond chat (docs/design.md §9 "Beyond chat"), black-box over HTTP on both
//! stores with the fake provider as the upstream: each endpoint keeps the one-job contract
//! of `POST /v1/chat/completions` — the same key is the same answer (`Idempotent-Replayed`),
//! another body under it a `422`, a job still running a `409` with `Retry-After` that a
//! retry attaches to, an unknown outcome a `409` naming the job, an answer without its
//! artifact a failure — and answers in its API's shape, validated against OpenAI's own
//! schemas (`openai_schemas.rs`) where the API is OpenAI's. The real SDKs drive the same
//! endpoints in `sdk.rs`.

use std::time::Duration;

use onejob::config::{Config, KindConfig};
use onejob_fake::{Behaviour, Outcome, Rule};
use reqwest::Response;
use serde_json::{Value, json};

use crate::{
    helpers::{
        Backend, Fakes, TestApp, TestDatabase, fake_task_api, json, postgres_and_sqlite_tests,
    },
    openai_schemas::conforms,
    upstream::{Answer, Upstream, named},
};
use onejob::gateway::{Endpoint, assembly::Assembly};

postgres_and_sqlite_tests!(
    embeddings_keep_the_one_job_contract,
    embeddings_pass_the_encoding_through_and_keep_the_usage,
    a_model_is_served_only_at_its_own_endpoint,
    messages_keep_the_one_job_contract,
    messages_stream_live_and_replayed_as_anthropics_events,
    messages_take_x_api_key_and_answer_errors_in_anthropics_shape,
    an_anthropic_messages_provider_is_sent_anthropics_headers,
    responses_keep_the_one_job_contract,
    responses_stream_openais_typed_events_live_and_replayed,
    responses_refuse_conversation_state_and_pass_text_format_and_tools,
    a_stalled_responses_stream_ends_with_an_error_event_naming_the_job,
    images_keep_the_one_job_contract,
    images_come_as_urls_or_b64_json_as_asked,
    an_async_task_image_provider_answers_images_as_one_job,
    verify_certifies_providers_for_every_endpoint,
    a_stalled_messages_stream_ends_with_anthropics_error_event_naming_the_job,
    a_responses_call_goes_upstream_with_store_false_and_never_in_the_background,
    an_anthropic_overload_proves_nothing_ran_and_the_job_retries,
    an_async_task_image_that_is_any_other_string_is_no_image,
    a_message_of_thinking_only_streams_without_message_stop_then_the_error,
    a_response_of_reasoning_only_streams_without_response_completed_then_the_error,
    a_messages_stream_the_upstream_refused_ends_with_the_refusals_error_type,
    a_replayed_messages_stream_assembles_as_the_live_one,
    a_replayed_responses_stream_assembles_as_the_live_one,
);

const WITHIN: Duration = Duration::from_secs(30);

/// One endpoint under test.
struct Case {
    /// Its path.
    path: &'static str,
    /// The demo's kind serving it.
    kind: &'static str,
    /// Where the fake counts its calls.
    upstream: &'static str,
    /// OpenAI's schema of its answer (`None`: Anthropic's API).
    schema: Option<&'static str>,
    /// A request asking about `text`.
    request: fn(&str) -> Value,
    /// The same request with another intent.
    changed: fn(&str) -> (Value, &'static str),
}

const EMBEDDINGS: Case = Case {
    path: "/v1/embeddings",
    kind: "embed.fast",
    upstream: "embeddings",
    schema: Some("CreateEmbeddingResponse"),
    request: |text| json!({"model": "embed", "input": text}),
    changed: |text| {
        (
            json!({"model": "embed", "input": text, "dimensions": 4}),
            "/dimensions",
        )
    },
};

const MESSAGES: Case = Case {
    path: "/v1/messages",
    kind: "messages.fast",
    upstream: "messages",
    schema: None,
    request: |text| {
        json!({"model": "converse", "max_tokens": 64,
            "messages": [{"role": "user", "content": text}]})
    },
    changed: |text| {
        (
            json!({"model": "converse", "max_tokens": 128,
                "messages": [{"role": "user", "content": text}]}),
            "/max_tokens",
        )
    },
};

const RESPONSES: Case = Case {
    path: "/v1/responses",
    kind: "respond.fast",
    upstream: "responses",
    schema: Some("Response"),
    request: |text| json!({"model": "respond", "input": text}),
    changed: |text| {
        (
            json!({"model": "respond", "input": text, "instructions": "Be brief."}),
            "/instructions",
        )
    },
};

const IMAGES: Case = Case {
    path: "/v1/images/generations",
    kind: "image.draw",
    upstream: "images",
    schema: Some("ImagesResponse"),
    request: |text| json!({"model": "draw", "prompt": text}),
    changed: |text| (json!({"model": "draw", "prompt": text, "n": 2}), "/n"),
};

/// The kind `name` served by the primary fake only, with one attempt; its attempts time out
/// after 2 s and callers wait 300 ms.
fn quick(config: &mut Config, name: &str) {
    let kind = kind(config, name);
    kind.providers = vec!["fake".into()];
    kind.max_attempts = 1;
    kind.attempt_timeout = Duration::from_secs(2);
    config.gateway.wait = Duration::from_millis(300);
}

fn kind<'c>(config: &'c mut Config, name: &str) -> &'c mut KindConfig {
    config
        .kinds
        .iter_mut()
        .find(|k| k.name == name)
        .unwrap_or_else(|| panic!("the demo declares kind {name}"))
}

fn rule(matches: &str, behaviour: Behaviour) -> Rule {
    Rule {
        matches: Some(matches.into()),
        times: None,
        behaviour,
    }
}

impl TestApp {
    /// `POST path` with `body` under `key`.
    pub async fn call(&self, path: &str, key: &str, body: &Value) -> Response {
        self.client
            .post(self.url(path))
            .bearer_auth(&self.token)
            .header("Idempotency-Key", key)
            .json(body)
            .send()
            .await
            .unwrap()
    }
}

/// The answer's status, headers and JSON body, checked to be what the endpoint's API
/// answers: its schema's document for a `200`, its error shape otherwise.
async fn answered(case: &Case, response: Response) -> (u16, reqwest::header::HeaderMap, Value) {
    let headers = response.headers().clone();
    let (status, body) = json(response).await;
    match (case.schema, status) {
        (Some(schema), 200) => conforms(schema, &body),
        (Some(_), _) => conforms("ErrorResponse", &body),
        (None, 200) => assert_eq!(body["type"], "message", "{body}"),
        (None, _) => {
            assert_eq!(body["type"], "error", "{body}");
            assert!(body["error"]["type"].is_string(), "{body}");
            assert!(body["error"]["message"].is_string(), "{body}");
        }
    }
    (status, headers, body)
}

/// The error member of an error answer (the same place in both shapes).
fn error(body: &Value) -> &Value {
    &body["error"]
}

/// The calls the fake received at the case's endpoint whose input mentions `text`.
fn upstream_calls(case: &Case, fakes: &Fakes, text: &str) -> usize {
    fakes
        .primary
        .submissions()
        .requests
        .iter()
        .filter(|r| r.endpoint == case.upstream && r.input.to_string().contains(text))
        .count()
}

/// The whole contract at one endpoint, on one server.
async fn keeps_the_one_job_contract(backend: Backend, case: Case) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "slow",
        Behaviour {
            run_ms: 1_000,
            ..Default::default()
        },
    ));
    fakes.primary.add_rule(rule(
        "silent",
        Behaviour {
            hang_after_ack: true,
            ..Default::default()
        },
    ));
    fakes.primary.add_rule(rule(
        "empty",
        Behaviour {
            outcome: Outcome::MissingArtifact,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |config| quick(config, case.kind)).await;

    // One key, one job, one upstream call; the retry is the same answer, replayed.
    let body = (case.request)("a red fox");
    let (status, headers, first) = answered(&case, app.call(case.path, "fox", &body).await).await;
    assert_eq!(status, 200, "{first}");
    assert!(headers.get("idempotent-replayed").is_none());
    let job_id = headers["onejob-job-id"].to_str().unwrap().to_owned();
    assert_eq!(app.job(&job_id).await["kind"], case.kind);
    let (status, headers, again) = answered(&case, app.call(case.path, "fox", &body).await).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(headers["onejob-job-id"], job_id.as_str());
    assert_eq!(again, first, "the replay is the stored answer");
    assert_eq!(upstream_calls(&case, &fakes, "a red fox"), 1);

    // Another body under the key: 422 naming what changed, nothing run.
    let (other, changed) = (case.changed)("a red fox");
    let (status, _, refused) = answered(&case, app.call(case.path, "fox", &other).await).await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(error(&refused)["code"], "key-reused");
    assert_eq!(error(&refused)["changed"], json!([changed]), "{refused}");
    assert_eq!(upstream_calls(&case, &fakes, "a red fox"), 1);

    // Still running after the wait: 409 with Retry-After; retries attach to the one job.
    let slow = (case.request)("a slow fox");
    let (status, headers, running) =
        answered(&case, app.call(case.path, "slow", &slow).await).await;
    assert_eq!(status, 409, "{running}");
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(error(&running)["state"], "running");
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let (status, _, body) = answered(&case, app.call(case.path, "slow", &slow).await).await;
        if status == 200 {
            break;
        }
        assert_eq!(status, 409, "{body}");
        assert!(tokio::time::Instant::now() < deadline, "{body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(upstream_calls(&case, &fakes, "a slow fox"), 1);

    // An attempt that timed out: its outcome is unknown, a 409 naming the job.
    let silent = (case.request)("a silent fox");
    let deadline = tokio::time::Instant::now() + WITHIN;
    let unknown = loop {
        let (status, _, body) = answered(&case, app.call(case.path, "silent", &silent).await).await;
        assert_eq!(status, 409, "{body}");
        if error(&body)["state"] == "unknown" {
            break body;
        }
        assert!(tokio::time::Instant::now() < deadline, "{body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let message = error(&unknown)["message"].as_str().unwrap();
    let job = error(&unknown)["job_id"].as_str().unwrap();
    assert!(
        message.contains(job) && message.contains("awaits proof"),
        "{message}"
    );

    // An answer without its artifact is a failure, never a success.
    let empty = (case.request)("an empty fox");
    let (status, headers, failed) =
        answered(&case, app.call(case.path, "empty", &empty).await).await;
    assert_eq!(status, 502, "{failed}");
    let job_id = headers["onejob-job-id"].to_str().unwrap();
    assert_eq!(app.job(job_id).await["state"], "failed");
}

async fn embeddings_keep_the_one_job_contract(backend: Backend) {
    keeps_the_one_job_contract(backend, EMBEDDINGS).await;
}

async fn embeddings_pass_the_encoding_through_and_keep_the_usage(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |config| quick(config, "embed.fast")).await;
    let body = json!({"model": "embed", "input": ["a red fox", "a grey hen"],
        "encoding_format": "base64"});
    let response = app.call("/v1/embeddings", "b64", &body).await;
    let (status, mut answer) = json(response).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"].as_array().unwrap().len(), 2);
    // OpenAI's schema knows only float arrays; its API (and SDKs) send base64 as a string of
    // little-endian f32s, as asked: decoded, the answer is what the schema describes.
    for item in answer["data"].as_array_mut().unwrap() {
        let encoded = item["embedding"].as_str().expect("base64, as asked");
        let floats: Vec<f32> = decode_base64(encoded)
            .chunks(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(floats.len(), 8, "{encoded}");
        item["embedding"] = json!(floats);
    }
    conforms("CreateEmbeddingResponse", &answer);
    assert_eq!(
        answer["usage"]["prompt_tokens"], 6,
        "the upstream's usage, kept"
    );
    let sent = &fakes.primary.submissions().requests[0];
    assert_eq!(sent.endpoint, "embeddings");
    assert_eq!(sent.request["encoding_format"], "base64");
    assert_eq!(sent.request["model"], "fake", "the provider's own model");
}

async fn a_model_is_served_only_at_its_own_endpoint(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |config| quick(config, "embed.fast")).await;
    let chat = json!({"model": "fast", "input": "a fox"});
    let (status, _, body) =
        answered(&EMBEDDINGS, app.call("/v1/embeddings", "k", &chat).await).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["served_at"], "/v1/chat/completions");
    let (status, body) = json(app.get("/v1/models").send().await.unwrap()).await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"embed") && ids.contains(&"fast"), "{ids:?}");
    assert_eq!(fakes.primary.submissions().total, 0);
}

/// Standard base64 (with padding) decoded.
fn decode_base64(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let values: Vec<u32> = text
        .bytes()
        .filter(|b| *b != b'=')
        .map(|b| ALPHABET.iter().position(|a| *a == b).expect("base64") as u32)
        .collect();
    let mut bytes = Vec::new();
    for group in values.chunks(4) {
        let n = group
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, v)| n | v << (18 - 6 * i));
        bytes.extend(n.to_be_bytes()[1..group.len()].iter());
    }
    bytes
}

async fn messages_keep_the_one_job_contract(backend: Backend) {
    keeps_the_one_job_contract(backend, MESSAGES).await;
}

/// The events of a `text/event-stream` answer: each one's `event:` name and JSON data.
async fn events(response: Response) -> Vec<(String, Value)> {
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let text = response.text().await.unwrap();
    text.split("\n\n")
        .filter(|block| block.lines().any(|l| l.starts_with("data:")))
        .map(|block| {
            let mut name = String::new();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(value) = line.strip_prefix("event:") {
                    name = value.trim().to_owned();
                } else if let Some(value) = line.strip_prefix("data:") {
                    data.push_str(value.trim_start());
                }
            }
            let data: Value = serde_json::from_str(&data)
                .unwrap_or_else(|e| panic!("an event's data is JSON: {e}: {data}"));
            (name, data)
        })
        .collect()
}

async fn messages_stream_live_and_replayed_as_anthropics_events(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "fox",
        Behaviour {
            run_ms: 600,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |config| quick(config, "messages.fast")).await;
    let mut body = (MESSAGES.request)("Stream a red fox.");
    body["stream"] = json!(true);
    // Two readers of one key at once: one upstream call, the same events, live.
    let (first, second) = tokio::join!(app.call("/v1/messages", "stream", &body), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        app.call("/v1/messages", "stream", &body).await
    });
    let job_id = first.headers()["onejob-job-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let (first, second) = (events(first).await, events(second).await);
    assert_eq!(first, second);
    let names: Vec<&str> = first.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(names.last(), Some(&"message_stop"));
    assert!(names.contains(&"content_block_delta"), "{names:?}");
    for (name, data) in &first {
        assert_eq!(
            data["type"],
            name.as_str(),
            "each event is named by its type"
        );
    }
    assert_eq!(upstream_calls(&MESSAGES, &fakes, "Stream a red fox."), 1);
    // The job's result is the message the events add up to.
    let job = app.job(&job_id).await;
    assert_eq!(job["state"], "succeeded", "{job}");
    let stored = &job["result"];
    assert_eq!(stored["type"], "message");
    assert!(
        stored["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Stream a red fox."),
        "{stored}"
    );
    assert_eq!(stored["stop_reason"], "end_turn");
    // Asked again after completion: as JSON, the stored message; as a stream, its events.
    body.as_object_mut().unwrap().remove("stream");
    let (status, headers, message) =
        answered(&MESSAGES, app.call("/v1/messages", "stream", &body).await).await;
    assert_eq!(status, 200, "{message}");
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(&message, stored);
    body["stream"] = json!(true);
    let replayed = events(app.call("/v1/messages", "stream", &body).await).await;
    let replayed_names: Vec<&str> = replayed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        replayed_names.iter().filter(|n| **n != "ping").count(),
        names.iter().filter(|n| **n != "ping").count()
    );
    assert_eq!(upstream_calls(&MESSAGES, &fakes, "Stream a red fox."), 1);
}

async fn messages_take_x_api_key_and_answer_errors_in_anthropics_shape(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |config| quick(config, "messages.fast")).await;
    let body = (MESSAGES.request)("A fox by x-api-key.");
    let call = |key: Option<&str>| {
        let mut call = app
            .client
            .post(app.url("/v1/messages"))
            .header("Idempotency-Key", "x-api-key")
            .header("anthropic-version", "2023-06-01")
            .json(&body);
        if let Some(key) = key {
            call = call.header("x-api-key", key);
        }
        call.send()
    };
    let (status, _, message) = answered(&MESSAGES, call(Some(&app.token)).await.unwrap()).await;
    assert_eq!(status, 200, "{message}");
    let (status, _, refused) = answered(&MESSAGES, call(None).await.unwrap()).await;
    assert_eq!(status, 401, "{refused}");
    assert_eq!(refused["error"]["type"], "authentication_error");
    let (status, _, refused) = answered(&MESSAGES, call(Some("oj_nope")).await.unwrap()).await;
    assert_eq!(status, 401, "{refused}");
    // Not a Messages request: Anthropic's invalid_request_error, naming the field.
    let no_limit = json!({"model": "converse", "messages": [{"role": "user", "content": "x"}]});
    let (status, _, refused) = answered(
        &MESSAGES,
        app.call("/v1/messages", "no-limit", &no_limit).await,
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["type"], "invalid_request_error");
    assert!(refused.to_string().contains("max_tokens"), "{refused}");
    // A method the path does not take: still Anthropic's shape.
    let (status, _, refused) =
        answered(&MESSAGES, app.get("/v1/messages").send().await.unwrap()).await;
    assert_eq!(status, 405, "{refused}");
}

async fn an_anthropic_messages_provider_is_sent_anthropics_headers(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    // An upstream that answers one message and keeps the headers it was sent.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let kept = seen.clone();
    let upstream = axum::Router::new().route(
        "/v1/messages",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
            let kept = kept.clone();
            async move {
                kept.lock().unwrap().push((headers, body));
                axum::Json(
                    json!({"id": "msg_1", "type": "message", "role": "assistant",
                    "model": "claude-x", "content": [{"type": "text", "text": "a fox"}],
                    "stop_reason": "end_turn", "stop_sequence": null,
                    "usage": {"input_tokens": 1, "output_tokens": 2}}),
                )
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, upstream).await });
    let app = TestApp::running(&db, &fakes, |config| {
        quick(config, "messages.fast");
        let mut provider = onejob::config::ProviderConfig::new(
            "claude",
            onejob::config::Adapter::AnthropicMessages,
        );
        provider.base_url = Some(format!("http://{addr}/v1"));
        provider.model = Some("claude-x".into());
        // Any variable set in the test's environment: its value is the upstream key.
        provider.api_key_env = Some("CARGO_PKG_NAME".into());
        config.providers.push(provider);
        kind(config, "messages.fast").providers = vec!["claude".into()];
    })
    .await;
    let body = (MESSAGES.request)("A fox for Claude.");
    let (status, _, message) =
        answered(&MESSAGES, app.call("/v1/messages", "claude", &body).await).await;
    assert_eq!(status, 200, "{message}");
    assert_eq!(message["content"][0]["text"], "a fox");
    let seen = seen.lock().unwrap();
    let (headers, sent) = &seen[0];
    assert_eq!(headers["anthropic-version"], "2023-06-01");
    assert_eq!(headers["x-api-key"], env!("CARGO_PKG_NAME"));
    assert!(headers.get("authorization").is_none(), "{headers:?}");
    let sent: Value = serde_json::from_str(sent).unwrap();
    assert_eq!(sent["model"], "claude-x", "the provider's own model");
    assert_eq!(sent["max_tokens"], 64, "the caller's, untouched");
}

#[test]
fn the_gateway_pages_configs_beyond_chat_compile() {
    let page = crate::docs::page("docs/gateway.md");
    let configs = crate::docs::blocks(&page, "toml");
    assert!(!configs.is_empty(), "docs/gateway.md shows its configs");
    for config in configs {
        let parsed = onejob::config::Config::from_toml(
            &config,
            "docs/gateway.md".as_ref(),
            ".".into(),
            std::iter::empty(),
        )
        .unwrap_or_else(|e| panic!("{e}:\n{config}"));
        onejob::kind::Kinds::compile(&parsed).unwrap_or_else(|e| panic!("{e}:\n{config}"));
    }
}

async fn responses_keep_the_one_job_contract(backend: Backend) {
    keeps_the_one_job_contract(backend, RESPONSES).await;
}

async fn responses_stream_openais_typed_events_live_and_replayed(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "fox",
        Behaviour {
            run_ms: 600,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |config| quick(config, "respond.fast")).await;
    let mut body = json!({"model": "respond", "input": [{"role": "user",
        "content": [{"type": "input_text", "text": "Stream a red fox."}]}], "stream": true});
    let (first, second) = tokio::join!(app.call("/v1/responses", "stream", &body), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        app.call("/v1/responses", "stream", &body).await
    });
    let job_id = first.headers()["onejob-job-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let (first, second) = (events(first).await, events(second).await);
    assert_eq!(
        first, second,
        "two readers of one key read the same live events"
    );
    for (name, event) in &first {
        conforms("ResponseStreamEvent", event);
        assert_eq!(
            event["type"],
            name.as_str(),
            "each event is named by its type"
        );
    }
    let names: Vec<&str> = first.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names.first(), Some(&"response.created"));
    assert_eq!(names.last(), Some(&"response.completed"));
    assert!(names.contains(&"response.output_text.delta"), "{names:?}");
    assert_eq!(upstream_calls(&RESPONSES, &fakes, "Stream a red fox."), 1);
    // The job's result is the completed response, which a JSON replay answers.
    let completed = &first.last().unwrap().1["response"];
    let job = app.job(&job_id).await;
    assert_eq!(&job["result"], completed, "{job}");
    body.as_object_mut().unwrap().remove("stream");
    let (status, headers, answer) =
        answered(&RESPONSES, app.call("/v1/responses", "stream", &body).await).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(&answer, completed);
    // A stream asked after completion: the stored response as the same typed events.
    body["stream"] = json!(true);
    let replayed = events(app.call("/v1/responses", "stream", &body).await).await;
    for (_, event) in &replayed {
        conforms("ResponseStreamEvent", event);
    }
    let replayed_names: Vec<&str> = replayed.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(replayed_names, names);
    assert_eq!(&replayed.last().unwrap().1["response"], completed);
    assert_eq!(upstream_calls(&RESPONSES, &fakes, "Stream a red fox."), 1);
}

async fn responses_refuse_conversation_state_and_pass_text_format_and_tools(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |config| quick(config, "respond.fast")).await;
    for (field, value) in [
        ("store", json!(true)),
        ("previous_response_id", json!("resp_123")),
    ] {
        let mut body = (RESPONSES.request)("A stateful fox.");
        body[field] = value;
        let (status, _, refused) =
            answered(&RESPONSES, app.call("/v1/responses", field, &body).await).await;
        assert_eq!(status, 400, "{refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(field) && message.contains("does not keep conversation state"),
            "{message}"
        );
    }
    assert_eq!(fakes.primary.submissions().total, 0, "nothing was sent");
    // `store: false` is what onejob does anyway: served.
    let mut body = (RESPONSES.request)("A stateless fox.");
    body["store"] = json!(false);
    body["text"] = json!({"format": {"type": "json_schema", "name": "fox", "strict": true,
        "schema": {"type": "object", "properties": {"text": {"type": "string"}},
        "required": ["text"], "additionalProperties": false}}});
    let (status, _, answer) =
        answered(&RESPONSES, app.call("/v1/responses", "schema", &body).await).await;
    assert_eq!(status, 200, "{answer}");
    let text = answer["output"][0]["content"][0]["text"].as_str().unwrap();
    let parsed: Value = serde_json::from_str(text).expect("JSON, as text.format asked");
    assert!(
        parsed["text"]
            .as_str()
            .unwrap()
            .contains("A stateless fox.")
    );
    let sent = &fakes.primary.submissions().requests[0].request;
    assert_eq!(
        sent["text"], body["text"],
        "text.format reached the upstream"
    );
    // Tools: the upstream's function call is a real answer.
    let tools = json!([{"type": "function", "name": "weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    let body = json!({"model": "respond", "input": "Weather in Oslo?", "tools": tools,
        "tool_choice": "required"});
    let (status, _, answer) =
        answered(&RESPONSES, app.call("/v1/responses", "tools", &body).await).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["output"][0]["type"], "function_call");
    assert_eq!(answer["output"][0]["name"], "weather");
}

async fn a_stalled_responses_stream_ends_with_an_error_event_naming_the_job(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "stalls",
        Behaviour {
            hang_after_ack: true,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |config| {
        quick(config, "respond.fast");
        kind(config, "respond.fast").stream_idle_timeout = Duration::from_millis(500);
    })
    .await;
    let body = json!({"model": "respond", "input": "A fox that stalls.", "stream": true});
    let response = app.call("/v1/responses", "stalls", &body).await;
    let job_id = response.headers()["onejob-job-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let events = events(response).await;
    let (name, last) = events.last().unwrap();
    assert_eq!(
        events[0].0, "response.created",
        "the first event came through"
    );
    assert_eq!(name, "error");
    conforms("ResponseStreamEvent", last);
    assert_eq!(last["code"], "attempt_failed");
    assert!(
        last["message"].as_str().unwrap().contains(&job_id),
        "{last}"
    );
    assert_eq!(last["sequence_number"], events.len() - 1);
}

async fn images_keep_the_one_job_contract(backend: Backend) {
    keeps_the_one_job_contract(backend, IMAGES).await;
}

async fn images_come_as_urls_or_b64_json_as_asked(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |config| quick(config, "image.draw")).await;
    let path = "/v1/images/generations";
    let body = json!({"model": "draw", "prompt": "Two red foxes.", "n": 2});
    let (status, _, urls) = answered(&IMAGES, app.call(path, "urls", &body).await).await;
    assert_eq!(status, 200, "{urls}");
    assert_eq!(urls["data"].as_array().unwrap().len(), 2);
    assert!(
        urls["data"][0]["url"]
            .as_str()
            .unwrap()
            .starts_with("https://")
    );
    let body = json!({"model": "draw", "prompt": "A red fox, inline.",
        "response_format": "b64_json"});
    let (status, _, inline) = answered(&IMAGES, app.call(path, "b64", &body).await).await;
    assert_eq!(status, 200, "{inline}");
    let png = decode_base64(inline["data"][0]["b64_json"].as_str().unwrap());
    assert_eq!(&png[1..4], b"PNG", "the image itself");
    let sent = fakes.primary.submissions();
    assert_eq!(sent.requests[1].request["response_format"], "b64_json");
}

async fn an_async_task_image_provider_answers_images_as_one_job(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "blank",
        Behaviour {
            outcome: Outcome::MissingArtifact,
            ..Default::default()
        },
    ));
    fakes.primary.add_rule(rule(
        "",
        Behaviour {
            run_ms: 300,
            ..Default::default()
        },
    ));
    let base = fakes.primary.base_url();
    let app = TestApp::running(&db, &fakes, |config| {
        quick(config, "image.draw");
        // The seed's own case: an image API that answers a task id and a status to poll.
        let mut tasks = fake_task_api("tasks", &base);
        tasks.failed.push("cancelled".into());
        config.providers.push(tasks);
        kind(config, "image.draw").providers = vec!["tasks".into()];
        // Long enough for the task's status to be polled to its end within one call.
        config.gateway.wait = Duration::from_secs(10);
    })
    .await;
    let path = "/v1/images/generations";
    let tasks = |fakes: &Fakes| {
        fakes
            .primary
            .submissions()
            .requests
            .iter()
            .filter(|r| r.endpoint == "tasks")
            .count()
    };
    // The task's images are the answer: an ImagesResponse, replayed under the key.
    let body = json!({"model": "draw", "prompt": "A red fox, polled."});
    let (status, headers, first) = answered(&IMAGES, app.call(path, "task", &body).await).await;
    assert_eq!(status, 200, "{first}");
    let url = first["data"][0]["url"].as_str().unwrap();
    assert!(
        url.starts_with("https://fake.invalid/images/task_"),
        "{first}"
    );
    let job_id = headers["onejob-job-id"].to_str().unwrap().to_owned();
    let attempts = app.attempts(&job_id).await;
    assert!(
        attempts[0]["task_id"]
            .as_str()
            .unwrap()
            .starts_with("task_"),
        "the task id was kept: {attempts:?}"
    );
    let (status, headers, again) = answered(&IMAGES, app.call(path, "task", &body).await).await;
    assert_eq!(status, 200);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(again, first);
    assert_eq!(tasks(&fakes), 1, "one task for the key");
    // b64_json asked: the task's image itself.
    let inline = json!({"model": "draw", "prompt": "A red fox, polled inline.",
        "response_format": "b64_json"});
    let (status, _, answer) = answered(&IMAGES, app.call(path, "task-b64", &inline).await).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["data"][0]["b64_json"].is_string(), "{answer}");
    assert!(answer["data"][0].get("url").is_none(), "{answer}");
    // A task that succeeds without an image: a failure, never a success.
    let blank = json!({"model": "draw", "prompt": "A blank fox."});
    let (status, headers, failed) = answered(&IMAGES, app.call(path, "blank", &blank).await).await;
    assert_eq!(status, 502, "{failed}");
    let job_id = headers["onejob-job-id"].to_str().unwrap();
    assert_eq!(app.job(job_id).await["state"], "failed");
}

async fn verify_certifies_providers_for_every_endpoint(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |_| {}).await;
    for kind in ["embed.fast", "messages.fast", "respond.fast", "image.draw"] {
        let report = app.verify("fake-backup", kind).await;
        assert!(report.passed, "{kind}: {report:?}");
        // Messages and responses carry an id, so a second send under the key answering the
        // same id proves the fake deduplicates; embeddings and images carry none to compare.
        let proven = matches!(kind, "messages.fast" | "respond.fast");
        assert_eq!(
            report.idempotency.as_ref().unwrap().deduplicated,
            proven,
            "{kind}: {report:?}"
        );
    }
    let backup = fakes.backup.submissions();
    for endpoint in ["embeddings", "messages", "responses", "images"] {
        assert!(
            backup.requests.iter().any(|r| r.endpoint == endpoint),
            "verify sent its contract cases to /v1/{endpoint}"
        );
    }
}

async fn a_stalled_messages_stream_ends_with_anthropics_error_event_naming_the_job(
    backend: Backend,
) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "stalls",
        Behaviour {
            hang_after_ack: true,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |config| {
        quick(config, "messages.fast");
        kind(config, "messages.fast").stream_idle_timeout = Duration::from_millis(500);
    })
    .await;
    let mut body = (MESSAGES.request)("A fox that stalls.");
    body["stream"] = json!(true);
    let response = app.call("/v1/messages", "stalls", &body).await;
    let job_id = response.headers()["onejob-job-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let events = events(response).await;
    assert_eq!(events[0].0, "message_start", "the first event came through");
    let (name, last) = events.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(last["type"], "error");
    assert_eq!(last["error"]["type"], "api_error");
    assert_eq!(last["error"]["code"], "attempt_failed");
    assert!(
        last["error"]["message"].as_str().unwrap().contains(&job_id),
        "{last}"
    );
}

/// A Responses call is stateless upstream too: it goes out with `store: false` whether the
/// caller left `store` out (OpenAI's default is `true`: the upstream would keep what onejob
/// says it does not) or sent `false`, streamed or not. `background: true` (the upstream
/// would answer `queued` with no output, and onejob re-send a billed background run) and an
/// `item_reference` input item (which only an upstream that stored the response can resolve)
/// are refused with a `400` saying why, before anything is created or sent.
async fn a_responses_call_goes_upstream_with_store_false_and_never_in_the_background(
    backend: Backend,
) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |config| quick(config, "respond.fast")).await;
    let sent = |fakes: &Fakes, text: &str| {
        fakes
            .primary
            .submissions()
            .requests
            .iter()
            .find(|r| r.endpoint == "responses" && r.input.to_string().contains(text))
            .map(|r| (r.request.clone(), r.body_text.clone()))
            .unwrap_or_else(|| panic!("{text} reached the upstream"))
    };
    let unset = (RESPONSES.request)("A fox with store unset.");
    let (status, _, answer) =
        answered(&RESPONSES, app.call("/v1/responses", "unset", &unset).await).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(sent(&fakes, "store unset").0["store"], json!(false));
    let mut kept_false = (RESPONSES.request)("A fox with store false.");
    kept_false["store"] = json!(false);
    let (status, _, _) = answered(
        &RESPONSES,
        app.call("/v1/responses", "false", &kept_false).await,
    )
    .await;
    assert_eq!(status, 200);
    let (request, text) = sent(&fakes, "store false");
    assert_eq!(request["store"], json!(false));
    if let Some(text) = text {
        assert_eq!(
            text.matches("\"store\"").count(),
            1,
            "one store member: {text}"
        );
    }
    let mut streamed = (RESPONSES.request)("A streamed fox with store unset.");
    streamed["stream"] = json!(true);
    let events = events(app.call("/v1/responses", "streamed", &streamed).await).await;
    assert_eq!(events.last().unwrap().0, "response.completed");
    assert_eq!(sent(&fakes, "streamed fox").0["store"], json!(false));

    let before = fakes.primary.submissions().total;
    let mut background = (RESPONSES.request)("A fox in the background.");
    background["background"] = json!(true);
    let (status, _, refused) = answered(
        &RESPONSES,
        app.call("/v1/responses", "background", &background).await,
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`background: true` is not supported"),
        "{message}"
    );
    let referenced = json!({"model": "respond", "input": [
        {"role": "user", "content": "Name a fox."},
        {"type": "item_reference", "id": "msg_0123"},
        {"role": "user", "content": "And another."}]});
    let (status, _, refused) = answered(
        &RESPONSES,
        app.call("/v1/responses", "reference", &referenced).await,
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("input item 1 is an `item_reference`") && message.contains("store: false"),
        "{message}"
    );
    assert_eq!(
        fakes.primary.submissions().total,
        before,
        "nothing was sent"
    );
    for key in ["background", "reference"] {
        let status = app
            .get(&format!("/v1/jobs?idempotency_key={key}"))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 404, "nothing was created under {key}");
    }
}

/// Anthropic's `529 overloaded_error` says the request was not processed: the attempt fails
/// definitely and the job's next attempt runs (here on the same provider), instead of the
/// job waiting `unknown` for a proof the Messages API cannot give. A `500 api_error` still
/// proves nothing: that job's attempt is `unknown`.
async fn an_anthropic_overload_proves_nothing_ran_and_the_job_retries(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    for (matches, status) in [("overloaded", 529), ("broken", 500)] {
        fakes.primary.add_rule(Rule {
            matches: Some(matches.into()),
            times: Some(1),
            behaviour: Behaviour {
                http_status: Some(status),
                ..Default::default()
            },
        });
    }
    let app = TestApp::running(&db, &fakes, |config| {
        quick(config, "messages.fast");
        let kind = kind(config, "messages.fast");
        kind.max_attempts = 2;
        kind.retry_backoff = Duration::from_millis(50);
        config.gateway.wait = Duration::from_secs(10);
    })
    .await;
    let body = (MESSAGES.request)("An overloaded fox.");
    let (status, headers, message) = answered(
        &MESSAGES,
        app.call("/v1/messages", "overloaded", &body).await,
    )
    .await;
    assert_eq!(status, 200, "{message}");
    let job_id = headers["onejob-job-id"].to_str().unwrap();
    let attempts = app.attempts(job_id).await;
    let states: Vec<&str> = attempts
        .iter()
        .map(|a| a["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["failed", "succeeded"], "{attempts:?}");
    assert_eq!(attempts[0]["error"]["status"], 529);
    assert_eq!(upstream_calls(&MESSAGES, &fakes, "An overloaded fox."), 2);
    let body = (MESSAGES.request)("A broken fox.");
    let (status, headers, refused) =
        answered(&MESSAGES, app.call("/v1/messages", "broken", &body).await).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["state"], "unknown", "{refused}");
    let job_id = headers["onejob-job-id"].to_str().unwrap();
    assert_eq!(app.attempts(job_id).await[0]["state"], "unknown");
}

/// An async-task image provider whose task "succeeds" with a string that is neither an
/// `http(s)` URL, a `data:image/` URL nor base64 image bytes (`"content policy
/// violation"`) gave no image: the attempt fails and the call answers an error, never an
/// `ImagesResponse` with that string as its URL.
async fn an_async_task_image_that_is_any_other_string_is_no_image(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "refused",
        Behaviour {
            output: Some(json!("content policy violation")),
            ..Default::default()
        },
    ));
    let base = fakes.primary.base_url();
    let app = TestApp::running(&db, &fakes, |config| {
        quick(config, "image.draw");
        config.providers.push(fake_task_api("tasks", &base));
        kind(config, "image.draw").providers = vec!["tasks".into()];
        config.gateway.wait = Duration::from_secs(10);
    })
    .await;
    let body = json!({"model": "draw", "prompt": "A fox the provider refused."});
    let (status, headers, failed) = answered(
        &IMAGES,
        app.call("/v1/images/generations", "refused", &body).await,
    )
    .await;
    assert_eq!(status, 502, "{failed}");
    let job_id = headers["onejob-job-id"].to_str().unwrap();
    assert_eq!(app.job(job_id).await["state"], "failed");
    assert_eq!(app.attempts(job_id).await[0]["state"], "failed");
}

/// Streams `request` (its text mentioning "judged") from an upstream that answers `output`,
/// which the gateway judges no answer, and then a real answer (its text mentioning "real"):
/// the first caller's live stream never says the answer completed (`terminal`), it ends with
/// the error event naming the job; the second ends with `terminal`, as ever.
async fn judged_no_answer_is_never_told_complete(
    backend: Backend,
    case: Case,
    output: Value,
    terminal: &str,
) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "judged",
        Behaviour {
            output: Some(output),
            run_ms: 600,
            ..Default::default()
        },
    ));
    fakes.primary.add_rule(rule(
        "real",
        Behaviour {
            run_ms: 600,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |config| quick(config, case.kind)).await;
    let mut body = (case.request)("A judged fox.");
    body["stream"] = json!(true);
    let response = app.call(case.path, "judged", &body).await;
    let job_id = response.headers()["onejob-job-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let judged = events(response).await;
    let names: Vec<&str> = judged.iter().map(|(name, _)| name.as_str()).collect();
    assert!(
        names.len() > 2,
        "the answer streamed live before it was judged: {names:?}"
    );
    assert!(
        !names.contains(&terminal),
        "an answer judged no answer is never told complete: {names:?}"
    );
    let (name, last) = judged.last().unwrap();
    assert_eq!(name, "error", "{names:?}");
    let message = match case.schema {
        Some(_) => {
            conforms("ResponseStreamEvent", last);
            &last["message"]
        }
        None => &last["error"]["message"],
    };
    assert!(message.as_str().unwrap().contains(&job_id), "{last}");
    let job = app
        .wait_job(&job_id, WITHIN, |j| j["state"] == "failed")
        .await;
    assert_eq!(job["state"], "failed", "{job}");

    let mut body = (case.request)("A real fox.");
    body["stream"] = json!(true);
    let real = events(app.call(case.path, "real", &body).await).await;
    assert_eq!(
        real.last().map(|(name, _)| name.as_str()),
        Some(terminal),
        "a real answer's stream ends with its last event"
    );
}

async fn a_message_of_thinking_only_streams_without_message_stop_then_the_error(backend: Backend) {
    let thinking = json!({"id": "msg_judged", "type": "message", "role": "assistant",
        "model": "fake", "content": [{"type": "thinking", "thinking": "Foxes are red.",
        "signature": "c2ln"}], "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 3, "output_tokens": 4}});
    judged_no_answer_is_never_told_complete(backend, MESSAGES, thinking, "message_stop").await;
}

async fn a_response_of_reasoning_only_streams_without_response_completed_then_the_error(
    backend: Backend,
) {
    let reasoning = json!({"id": "resp_judged", "object": "response", "created_at": 1,
        "status": "completed", "completed_at": 2, "model": "fake", "error": null,
        "incomplete_details": null, "instructions": null, "metadata": {},
        "parallel_tool_calls": true, "temperature": 1.0, "top_p": 1.0, "tool_choice": "auto",
        "tools": [], "text": {"format": {"type": "text"}}, "store": false,
        "output": [{"type": "reasoning", "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Foxes are red."}]}],
        "usage": {"input_tokens": 3, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 4, "output_tokens_details": {"reasoning_tokens": 4},
            "total_tokens": 7}});
    judged_no_answer_is_never_told_complete(backend, RESPONSES, reasoning, "response.completed")
        .await;
}

/// An upstream that refuses a streamed request, after a while, with the status its text
/// names ("refuse 429"), in Anthropic's shape.
async fn refusing_upstream() -> Upstream {
    Upstream::spawn(|_, request| {
        let text = request.to_string();
        let status = [400, 429]
            .into_iter()
            .find(|status| text.contains(&format!("refuse {status}")))
            .unwrap_or(400);
        let kind = if status == 429 {
            "rate_limit_error"
        } else {
            "invalid_request_error"
        };
        Answer::Refuse {
            status,
            body: json!({"type": "error", "error": {"type": kind, "message": "refused"}}),
            after: Duration::from_millis(500),
        }
    })
    .await
}

async fn a_messages_stream_the_upstream_refused_ends_with_the_refusals_error_type(
    backend: Backend,
) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let upstream = refusing_upstream().await;
    let app = TestApp::running(&db, &fakes, |config| {
        upstream.serve(
            config,
            "claude",
            onejob::config::Adapter::AnthropicMessages,
            "messages.fast",
        );
    })
    .await;
    for (status, kind) in [(400, "invalid_request_error"), (429, "rate_limit_error")] {
        let mut body = (MESSAGES.request)(&format!("refuse {status}"));
        body["stream"] = json!(true);
        let key = format!("refused-{status}");
        let response = app.call("/v1/messages", &key, &body).await;
        let job_id = response.headers()["onejob-job-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let events = events(response).await;
        let (name, last) = events.last().unwrap();
        assert_eq!(name, "error", "{events:?}");
        assert_eq!(last["error"]["type"], kind, "{last}");
        assert_eq!(last["error"]["code"], "attempt_failed");
        assert_eq!(last["error"]["job_id"], job_id.as_str());
    }
}

/// What a named stream's events add up to at `endpoint`, as an SDK puts them together.
fn assembled(endpoint: Endpoint, events: &[(String, Value)]) -> Value {
    let mut assembly = Assembly::new(endpoint);
    let (last, before) = events.split_last().unwrap();
    for (name, event) in before {
        assert_eq!(assembly.push(event).unwrap(), None, "{name} ends nothing");
    }
    assembly
        .push(&last.1)
        .unwrap()
        .expect("the last event ends the stream")
}

/// Streams `body` at `case` live from the scripted upstream, then again under the same key
/// (a replay of the stored answer): both streams, and the job's result.
async fn live_and_replayed(
    app: &TestApp,
    case: &Case,
    body: &Value,
) -> (Vec<(String, Value)>, Vec<(String, Value)>, Value) {
    let response = app.call(case.path, "replayed", body).await;
    assert!(response.headers().get("idempotent-replayed").is_none());
    let job_id = response.headers()["onejob-job-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let live = events(response).await;
    let response = app.call(case.path, "replayed", body).await;
    assert_eq!(response.headers()["idempotent-replayed"], "true");
    let replayed = events(response).await;
    let job = app.job(&job_id).await;
    assert_eq!(job["state"], "succeeded", "{job}");
    (live, replayed, job["result"].clone())
}

/// A message with thinking, cited text and a tool call as Anthropic streams it: usage's input
/// and cache counts in `message_start`, the whole usage (cumulative) in `message_delta`,
/// citations as `citations_delta`, the signature as `signature_delta`, pings among them.
fn anthropic_stream() -> Vec<Value> {
    let usage = json!({"input_tokens": 3, "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 2, "output_tokens": 1, "service_tier": "standard"});
    let mut total = usage.clone();
    total["output_tokens"] = json!(12);
    let citation = json!({"type": "char_location", "cited_text": "Foxes are red.",
        "document_index": 0, "document_title": "Foxes", "start_char_index": 0,
        "end_char_index": 14});
    let delta = |index: u64, delta: Value| json!({"type": "content_block_delta", "index": index, "delta": delta});
    let start = |index: u64, block: Value| json!({"type": "content_block_start", "index": index, "content_block": block});
    let stop = |index: u64| json!({"type": "content_block_stop", "index": index});
    vec![
        json!({"type": "message_start", "message": {"id": "msg_up", "type": "message",
            "role": "assistant", "model": "claude-x", "content": [], "stop_reason": null,
            "stop_sequence": null, "usage": usage}}),
        json!({"type": "ping"}),
        start(
            0,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        ),
        delta(0, json!({"type": "thinking_delta", "thinking": "Red, "})),
        delta(
            0,
            json!({"type": "thinking_delta", "thinking": "I recall."}),
        ),
        delta(
            0,
            json!({"type": "signature_delta", "signature": "c2lnbmVk"}),
        ),
        stop(0),
        start(1, json!({"type": "text", "text": ""})),
        delta(1, json!({"type": "citations_delta", "citation": citation})),
        delta(1, json!({"type": "text_delta", "text": "A fox "})),
        delta(1, json!({"type": "text_delta", "text": "is red."})),
        stop(1),
        start(
            2,
            json!({"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}),
        ),
        delta(2, json!({"type": "input_json_delta", "partial_json": ""})),
        delta(
            2,
            json!({"type": "input_json_delta", "partial_json": "{\"city\": \"Os"}),
        ),
        delta(
            2,
            json!({"type": "input_json_delta", "partial_json": "lo\"}"}),
        ),
        stop(2),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use",
            "stop_sequence": null}, "usage": total}),
        json!({"type": "message_stop"}),
    ]
}

async fn a_replayed_messages_stream_assembles_as_the_live_one(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let upstream = Upstream::spawn(|_, _| Answer::Stream {
        events: named(&anthropic_stream()),
        gap: Duration::from_millis(20),
    })
    .await;
    let app = TestApp::running(&db, &fakes, |config| {
        upstream.serve(
            config,
            "claude",
            onejob::config::Adapter::AnthropicMessages,
            "messages.fast",
        );
    })
    .await;
    let mut body = (MESSAGES.request)("Is a fox red? Cite it.");
    body["stream"] = json!(true);
    let (live, replayed, stored) = live_and_replayed(&app, &MESSAGES, &body).await;
    assert_eq!(
        stored["content"][1]["citations"][0]["cited_text"],
        "Foxes are red."
    );
    assert_eq!(stored["content"][0]["signature"], "c2lnbmVk");
    assert_eq!(assembled(Endpoint::Messages, &live), stored);
    assert_eq!(assembled(Endpoint::Messages, &replayed), stored);
    // The usage where the API puts it: the input counts at the start, the whole of it in
    // message_delta (where LangChain's ChatAnthropic reads it).
    let started = &replayed[0].1["message"]["usage"];
    assert_eq!(started["input_tokens"], 3);
    assert_eq!(started["output_tokens"], 0);
    let (_, delta) = replayed
        .iter()
        .find(|(name, _)| name == "message_delta")
        .unwrap();
    assert_eq!(delta["usage"], stored["usage"]);
    assert_eq!(delta["usage"]["input_tokens"], 3);
}

/// The text a Responses stream's deltas add up to, per output item, what and part, with its
/// annotations and log probabilities: what an SDK that builds the answer from its deltas
/// (LangChain's) has, rather than from `response.completed`.
fn response_deltas(events: &[(String, Value)]) -> std::collections::BTreeMap<String, Value> {
    let mut parts = std::collections::BTreeMap::new();
    for (name, event) in events {
        let what = match name.as_str() {
            "response.output_text.delta" => "text",
            "response.output_text.annotation.added" => "annotations",
            "response.reasoning_summary_text.delta" => "summary",
            "response.function_call_arguments.delta" => "arguments",
            _ => continue,
        };
        let part = event["content_index"]
            .as_u64()
            .or(event["summary_index"].as_u64())
            .unwrap_or(0);
        let at = |what: &str| format!("{}/{what}/{part}", event["output_index"]);
        if what == "annotations" {
            let slot = parts.entry(at(what)).or_insert_with(|| json!([]));
            slot.as_array_mut()
                .unwrap()
                .push(event["annotation"].clone());
            continue;
        }
        let slot = parts.entry(at(what)).or_insert_with(|| json!(""));
        let text = format!(
            "{}{}",
            slot.as_str().unwrap(),
            event["delta"].as_str().unwrap()
        );
        *slot = json!(text);
        if what == "text" {
            let slot = parts.entry(at("logprobs")).or_insert_with(|| json!([]));
            let more = event["logprobs"].as_array().unwrap().clone();
            slot.as_array_mut().unwrap().extend(more);
        }
    }
    parts
}

/// A response with a reasoning summary, cited text with log probabilities, and a function
/// call, as OpenAI streams it.
fn responses_stream() -> Vec<Value> {
    let annotation = json!({"type": "url_citation", "url": "https://example.com/fox",
        "title": "Foxes", "start_index": 0, "end_index": 5});
    let logprob = |token: &str| {
        json!({"token": token, "logprob": -0.5, "bytes": token.as_bytes(),
            "top_logprobs": []})
    };
    let reasoning = json!({"type": "reasoning", "id": "rs_1", "summary": [
        {"type": "summary_text", "text": "Foxes are red."}]});
    let message = json!({"type": "message", "id": "msg_1", "status": "completed",
        "role": "assistant", "content": [{"type": "output_text", "text": "A red fox.",
        "annotations": [annotation], "logprobs": [logprob("A red"), logprob(" fox.")]}]});
    let call = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1",
        "name": "weather", "arguments": "{\"city\":\"Oslo\"}", "status": "completed"});
    let response = json!({"id": "resp_up", "object": "response", "created_at": 1,
        "status": "completed", "completed_at": 2, "model": "upstream-model",
        "output": [reasoning, message, call], "error": null, "incomplete_details": null,
        "instructions": null, "metadata": {}, "parallel_tool_calls": true,
        "temperature": 1.0, "top_p": 1.0, "tool_choice": "auto", "tools": [],
        "text": {"format": {"type": "text"}}, "store": false,
        "usage": {"input_tokens": 9,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 3},
            "total_tokens": 16}});
    let mut started = response.clone();
    started["status"] = json!("in_progress");
    started["output"] = json!([]);
    started.as_object_mut().unwrap().remove("usage");
    started["completed_at"] = Value::Null;
    let at = |index: u64, id: &str, mut event: Value| {
        event["output_index"] = json!(index);
        event["item_id"] = json!(id);
        event
    };
    let mut message_added = message.clone();
    message_added["status"] = json!("in_progress");
    message_added["content"] = json!([]);
    let mut call_added = call.clone();
    call_added["status"] = json!("in_progress");
    call_added["arguments"] = json!("");
    let text_part = json!({"type": "output_text", "text": "", "annotations": [],
        "logprobs": []});
    let mut events = vec![
        json!({"type": "response.created", "response": started}),
        json!({"type": "response.in_progress", "response": started}),
        json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
        at(
            0,
            "rs_1",
            json!({"type": "response.reasoning_summary_part.added",
            "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
        ),
        at(
            0,
            "rs_1",
            json!({"type": "response.reasoning_summary_text.delta",
            "summary_index": 0, "delta": "Foxes "}),
        ),
        at(
            0,
            "rs_1",
            json!({"type": "response.reasoning_summary_text.delta",
            "summary_index": 0, "delta": "are red."}),
        ),
        at(
            0,
            "rs_1",
            json!({"type": "response.reasoning_summary_text.done",
            "summary_index": 0, "text": "Foxes are red."}),
        ),
        at(
            0,
            "rs_1",
            json!({"type": "response.reasoning_summary_part.done",
            "summary_index": 0, "part": {"type": "summary_text", "text": "Foxes are red."}}),
        ),
        json!({"type": "response.output_item.done", "output_index": 0, "item": reasoning}),
        json!({"type": "response.output_item.added", "output_index": 1,
            "item": message_added}),
        at(
            1,
            "msg_1",
            json!({"type": "response.content_part.added", "content_index": 0,
            "part": text_part}),
        ),
        at(
            1,
            "msg_1",
            json!({"type": "response.output_text.delta", "content_index": 0,
            "delta": "A red", "logprobs": [logprob("A red")]}),
        ),
        at(
            1,
            "msg_1",
            json!({"type": "response.output_text.delta", "content_index": 0,
            "delta": " fox.", "logprobs": [logprob(" fox.")]}),
        ),
        at(
            1,
            "msg_1",
            json!({"type": "response.output_text.annotation.added",
            "content_index": 0, "annotation_index": 0, "annotation": annotation}),
        ),
        at(
            1,
            "msg_1",
            json!({"type": "response.output_text.done", "content_index": 0,
            "text": "A red fox.", "logprobs": message["content"][0]["logprobs"]}),
        ),
        at(
            1,
            "msg_1",
            json!({"type": "response.content_part.done", "content_index": 0,
            "part": message["content"][0]}),
        ),
        json!({"type": "response.output_item.done", "output_index": 1, "item": message}),
        json!({"type": "response.output_item.added", "output_index": 2, "item": call_added}),
        at(
            2,
            "fc_1",
            json!({"type": "response.function_call_arguments.delta",
            "delta": "{\"city\":"}),
        ),
        at(
            2,
            "fc_1",
            json!({"type": "response.function_call_arguments.delta",
            "delta": "\"Oslo\"}"}),
        ),
        at(
            2,
            "fc_1",
            json!({"type": "response.function_call_arguments.done",
            "name": "weather", "arguments": call["arguments"]}),
        ),
        json!({"type": "response.output_item.done", "output_index": 2, "item": call}),
        json!({"type": "response.completed", "response": response}),
    ];
    for (n, event) in events.iter_mut().enumerate() {
        event["sequence_number"] = json!(n);
    }
    events
}

async fn a_replayed_responses_stream_assembles_as_the_live_one(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let upstream = Upstream::spawn(|_, _| Answer::Stream {
        events: named(&responses_stream()),
        gap: Duration::from_millis(20),
    })
    .await;
    let app = TestApp::running(&db, &fakes, |config| {
        upstream.serve(
            config,
            "openai",
            onejob::config::Adapter::OpenaiChat,
            "respond.fast",
        );
    })
    .await;
    let body = json!({"model": "respond", "input": "Weather for a red fox?", "stream": true});
    let (live, replayed, stored) = live_and_replayed(&app, &RESPONSES, &body).await;
    for (_, event) in live.iter().chain(&replayed) {
        conforms("ResponseStreamEvent", event);
    }
    assert_eq!(assembled(Endpoint::Responses, &live), stored);
    assert_eq!(assembled(Endpoint::Responses, &replayed), stored);
    // Put together from their deltas, as LangChain does, the same again.
    let deltas = response_deltas(&live);
    assert_eq!(deltas["0/summary/0"], "Foxes are red.");
    assert_eq!(deltas["1/text/0"], "A red fox.");
    assert_eq!(
        deltas["1/annotations/0"],
        stored["output"][1]["content"][0]["annotations"]
    );
    assert_eq!(
        deltas["1/logprobs/0"],
        stored["output"][1]["content"][0]["logprobs"]
    );
    assert_eq!(deltas["2/arguments/0"], stored["output"][2]["arguments"]);
    assert_eq!(response_deltas(&replayed), deltas);
}
