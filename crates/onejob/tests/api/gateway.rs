//! The OpenAI-compatible gateway (docs/design.md §9), black-box over HTTP on both stores, with the
//! fake provider's chat endpoint as the upstream: one Idempotency-Key, one job, one
//! upstream call; answers and errors in OpenAI's shapes, each one validated against OpenAI's
//! own schemas (`openai_schemas.rs`) as it is read. The real OpenAI SDKs drive the same
//! server in `sdk.rs`.

use std::time::Duration;

use onejob::config::{Adapter, Config, KindConfig, ProviderConfig};
use onejob_fake::{Behaviour, Rule};
use reqwest::Response;
use serde_json::{Value, json};

use crate::{
    helpers::{Backend, Fakes, TestApp, TestDatabase, json, postgres_and_sqlite_tests},
    openai_schemas::{conforms, conforms_as_answer, conforms_as_event},
    upstream::{Answer, Upstream},
};
use onejob::gateway::{Endpoint, assembly::Assembly};

postgres_and_sqlite_tests!(
    the_models_are_listed_in_openai_shape,
    a_call_is_one_job_and_its_retry_is_replayed,
    a_different_body_under_the_key_is_refused_naming_what_changed,
    bad_calls_get_openai_errors,
    a_call_still_running_after_the_wait_is_a_409_its_retry_attaches,
    a_failed_job_answers_the_upstreams_definite_status,
    a_finished_jobs_error_tells_sdks_not_to_retry,
    an_unknown_outcome_is_a_409_naming_the_job,
    tools_and_response_format_reach_the_upstream_unchanged,
    an_empty_completion_is_no_success,
    a_gateway_kind_is_certified_like_any_other,
    keyless_calls_are_refused_unless_allowed,
    two_concurrent_streams_get_the_same_live_chunks_from_one_upstream_call,
    a_stream_asked_after_completion_replays_the_stored_answer,
    a_quick_stream_is_relayed_in_pieces_even_when_it_ends_before_its_caller_looks,
    a_live_stream_carries_the_usage_chunk_only_when_asked,
    a_client_that_disconnects_does_not_cancel_the_job,
    a_stream_whose_attempt_breaks_off_ends_with_an_error_naming_the_job,
    the_upstream_receives_the_callers_bytes_with_only_the_model_changed,
    a_v1_path_onejob_does_not_serve_answers_in_openais_shape,
    a_number_beyond_the_exact_range_is_refused,
    a_stream_outlives_attempt_timeout_and_a_silent_one_ends_unknown,
    an_upstream_rate_limit_fails_over_where_certified,
    upstream_account_errors_are_a_502_naming_the_provider,
    a_new_call_on_a_node_with_its_own_worker_starts_its_attempt_with_its_job,
    an_answer_with_an_integer_past_2_53_is_kept_exactly,
    a_gateway_job_submitted_as_a_job_never_asks_its_upstream_for_a_stream,
    a_stream_the_upstream_refused_ends_with_the_refusals_error_type,
    a_replayed_stream_assembles_as_the_live_one,
);

const WITHIN: Duration = Duration::from_secs(30);

/// The gateway kind of the demo config (`chat.fast`, model `fast`) served by the primary
/// fake only, quick.
pub(crate) fn gateway(config: &mut Config) {
    let kind = fast(config);
    kind.providers = vec!["fake".into()];
    kind.max_attempts = 1;
}

/// The demo's gateway kind, `chat.fast` (model `fast`).
fn fast(config: &mut Config) -> &mut KindConfig {
    config
        .kinds
        .iter_mut()
        .find(|k| k.name == "chat.fast")
        .expect("the demo serves model fast")
}

fn request(text: &str) -> Value {
    json!({"model": "fast", "messages": [{"role": "user", "content": text}]})
}

fn rule(matches: &str, behaviour: Behaviour) -> Rule {
    Rule {
        matches: Some(matches.into()),
        times: None,
        behaviour,
    }
}

impl TestApp {
    /// `POST /v1/chat/completions` under `key` (none when `None`).
    pub async fn chat(&self, key: Option<&str>, body: &Value) -> Response {
        let mut call = self
            .client
            .post(self.url("/v1/chat/completions"))
            .bearer_auth(&self.token)
            .json(body);
        if let Some(key) = key {
            call = call.header("Idempotency-Key", key);
        }
        call.send().await.unwrap()
    }
}

/// The answer's status, headers and JSON body, which is checked to be what OpenAI answers
/// there (a `chat.completion`, or an error).
async fn answered(response: Response) -> (u16, reqwest::header::HeaderMap, Value) {
    let headers = response.headers().clone();
    let (status, body) = json(response).await;
    conforms_as_answer(status, &body);
    (status, headers, body)
}

fn chat_side_effects(fakes: &Fakes) -> u64 {
    let seen = fakes.primary.submissions();
    seen.requests
        .iter()
        .filter(|r| r.endpoint == "chat")
        .count() as u64
}

async fn the_models_are_listed_in_openai_shape(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, gateway).await;
    let (status, body) = json(app.get("/v1/models").send().await.unwrap()).await;
    assert_eq!(status, 200);
    conforms("ListModelsResponse", &body);
    assert_eq!(body["object"], "list");
    let fast = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "fast")
        .unwrap_or_else(|| panic!("model fast is listed: {body}"));
    assert_eq!(fast["object"], "model");
    let (status, body) = json(app.client.get(app.url("/v1/models")).send().await.unwrap()).await;
    assert_eq!(status, 401);
    conforms("ErrorResponse", &body);
    assert_eq!(body["error"]["type"], "authentication_error");
}

async fn a_call_is_one_job_and_its_retry_is_replayed(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, gateway).await;
    let body = request("Describe a red fox.");
    let (status, headers, first) = answered(app.chat(Some("order-42:caption"), &body).await).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["object"], "chat.completion");
    let content = first["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.contains("Describe a red fox."), "{content}");
    assert!(headers.get("idempotent-replayed").is_none());
    let job_id = headers["onejob-job-id"].to_str().unwrap().to_owned();
    // The same call again, in another key order: the same job, replayed, nothing sent.
    let reordered =
        json!({"messages": [{"content": "Describe a red fox.", "role": "user"}], "model": "fast"});
    let (status, headers, again) =
        answered(app.chat(Some("order-42:caption"), &reordered).await).await;
    assert_eq!(status, 200);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(headers["onejob-job-id"], job_id.as_str());
    assert_eq!(again, first, "the stored winning completion");
    assert_eq!(chat_side_effects(&fakes), 1);
    // It is a job like any other.
    let job = app.job(&job_id).await;
    assert_eq!(job["kind"], "chat.fast");
    assert_eq!(job["state"], "succeeded");
    assert_eq!(job["result"], first);
}

async fn a_different_body_under_the_key_is_refused_naming_what_changed(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, gateway).await;
    let (status, _, _) = answered(app.chat(Some("k"), &request("a fox")).await).await;
    assert_eq!(status, 200);
    let mut other = request("a fox");
    other["temperature"] = json!(0.7);
    let (status, _, body) = answered(app.chat(Some("k"), &other).await).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "key-reused");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["changed"], json!(["/temperature"]));
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("/temperature"), "{message}");
    // Delivery is not intent: the same body asked as a stream is the same call.
    let mut streamed = request("a fox");
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let response = app.chat(Some("k"), &streamed).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["idempotent-replayed"], "true");
    assert_eq!(chat_side_effects(&fakes), 1);
}

async fn bad_calls_get_openai_errors(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, gateway).await;
    let cases: Vec<(Value, u16, &str)> = vec![
        (
            json!({"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}),
            404,
            "not-found",
        ),
        (
            json!({"messages": [{"role": "user", "content": "x"}]}),
            400,
            "invalid-request",
        ),
        (
            json!({"model": "fast", "messages": []}),
            400,
            "params-invalid",
        ),
        (
            json!({"model": "fast", "messages": [{"content": "no role"}]}),
            400,
            "params-invalid",
        ),
        (json!(["not", "an", "object"]), 400, "invalid-request"),
        (
            json!({"model": "fast", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}),
            400,
            "invalid-request",
        ),
        (
            json!({"model": "fast", "messages": [{"role": "user", "content": "x"}], "stream_options": 1}),
            400,
            "invalid-request",
        ),
    ];
    for (n, (body, status, code)) in cases.into_iter().enumerate() {
        let (got, _, answer) = answered(app.chat(Some(&format!("bad-{n}")), &body).await).await;
        assert_eq!(got, status, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], code, "{answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    let raw = app
        .client
        .post(app.url("/v1/chat/completions"))
        .bearer_auth(&app.token)
        .header("Idempotency-Key", "raw")
        .header("Content-Type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    let (status, body) = json(raw).await;
    assert_eq!(status, 400);
    conforms("ErrorResponse", &body);
    assert_eq!(body["error"]["code"], "invalid-json");
    let unauthorized = app
        .client
        .post(app.url("/v1/chat/completions"))
        .json(&request("x"))
        .send()
        .await
        .unwrap();
    let (status, body) = json(unauthorized).await;
    assert_eq!(status, 401);
    conforms("ErrorResponse", &body);
    assert_eq!(body["error"]["type"], "authentication_error");
    // Nothing was created or sent for any of them.
    assert_eq!(chat_side_effects(&fakes), 0);
}

async fn a_call_still_running_after_the_wait_is_a_409_its_retry_attaches(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "slow",
        Behaviour {
            run_ms: 1_500,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |config| {
        gateway(config);
        config.gateway.wait = Duration::from_millis(300);
    })
    .await;
    let (status, headers, body) = answered(app.chat(Some("slow"), &request("slow")).await).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(body["error"]["state"], "running");
    let job_id = body["error"]["job_id"].as_str().unwrap().to_owned();
    assert_eq!(headers["onejob-job-id"], job_id.as_str());
    let deadline = tokio::time::Instant::now() + WITHIN;
    let answer = loop {
        let (status, headers, body) =
            answered(app.chat(Some("slow"), &request("slow")).await).await;
        if status == 200 {
            assert_eq!(headers["onejob-job-id"], job_id.as_str());
            break body;
        }
        assert_eq!(status, 409, "{body}");
        assert!(tokio::time::Instant::now() < deadline);
    };
    assert_eq!(answer["object"], "chat.completion");
    assert_eq!(
        chat_side_effects(&fakes),
        1,
        "every retry attached to the one job"
    );
}

async fn a_failed_job_answers_the_upstreams_definite_status(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "refused",
        Behaviour {
            http_status: Some(400),
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, gateway).await;
    let (status, headers, body) =
        answered(app.chat(Some("refused"), &request("refused")).await).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "upstream_error");
    let job_id = headers["onejob-job-id"].to_str().unwrap();
    assert!(
        body["error"]["message"].as_str().unwrap().contains(job_id),
        "{body}"
    );
    assert_eq!(app.job(job_id).await["state"], "failed");
}

async fn a_finished_jobs_error_tells_sdks_not_to_retry(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "overloaded",
        Behaviour {
            http_status: Some(503),
            ..Default::default()
        },
    ));
    fakes.primary.add_rule(rule(
        "slow",
        Behaviour {
            run_ms: 5_000,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |config| {
        gateway(config);
        // Long enough for the failing job to end under a loaded CI machine (a new pooled
        // connection costs ~90 ms over TLS), well short of the slow job's 5 s.
        config.gateway.wait = Duration::from_secs(2);
    })
    .await;
    // OpenAI's SDKs retry 5xx, 408, 409 and 429 unless `x-should-retry: false`; a failed or
    // cancelled job answers every retry under its key the same, so none is worth making.
    for _ in 0..2 {
        let (status, headers, body) =
            answered(app.chat(Some("overloaded"), &request("overloaded")).await).await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(headers["x-should-retry"], "false");
    }
    assert_eq!(chat_side_effects(&fakes), 1);
    // Still running: worth retrying (and the SDK does, after Retry-After).
    let (status, headers, body) = answered(app.chat(Some("slow"), &request("slow")).await).await;
    assert_eq!(status, 409, "{body}");
    assert!(headers.get("x-should-retry").is_none());
    let job_id = body["error"]["job_id"].as_str().unwrap();
    let cancelled = app
        .client
        .post(app.url(&format!("/v1/jobs/{job_id}/cancel")))
        .bearer_auth(&app.token)
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), 200);
    let (status, headers, body) = answered(app.chat(Some("slow"), &request("slow")).await).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["state"], "cancelled");
    assert_eq!(headers["x-should-retry"], "false");
}

async fn an_unknown_outcome_is_a_409_naming_the_job(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "silent",
        Behaviour {
            hang_after_ack: true,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |config| {
        gateway(config);
        let kind = fast(config);
        kind.attempt_timeout = Duration::from_millis(300);
    })
    .await;
    let (status, headers, body) =
        answered(app.chat(Some("silent"), &request("silent")).await).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["state"], "unknown");
    assert_eq!(headers["retry-after"], "5");
    let message = body["error"]["message"].as_str().unwrap();
    let job_id = body["error"]["job_id"].as_str().unwrap();
    assert!(
        message.contains(job_id) && message.contains("awaits proof"),
        "{message}"
    );
}

async fn tools_and_response_format_reach_the_upstream_unchanged(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, gateway).await;
    let tools = json!([{"type": "function", "function": {"name": "weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let body = json!({
        "model": "fast",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Oslo?"}],
        "tools": tools,
        "tool_choice": "auto",
        "response_format": {"type": "json_object"},
        "temperature": 0.2,
        "max_tokens": 64,
        "seed": 7,
        "user": "end-user-1",
    });
    let (status, _, _) = answered(app.chat(Some("tools"), &body).await).await;
    assert_eq!(status, 200);
    let seen = fakes.primary.submissions();
    let sent = &seen
        .requests
        .iter()
        .find(|r| r.endpoint == "chat")
        .unwrap()
        .request;
    for field in [
        "messages",
        "tools",
        "tool_choice",
        "response_format",
        "temperature",
        "max_tokens",
        "seed",
        "user",
    ] {
        assert_eq!(sent[field], body[field], "{field} passed through");
    }
    assert_eq!(sent["model"], "fake", "the provider's own model");
}

async fn an_empty_completion_is_no_success(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    // An upstream that answers, with nothing in it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let empty = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(|| async {
            axum::Json(json!({"id": "chatcmpl-empty", "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": ""},
                "finish_reason": "stop"}]}))
        }),
    );
    tokio::spawn(async move { axum::serve(listener, empty).await });
    let app = TestApp::running(&db, &fakes, |config| {
        gateway(config);
        let mut provider = ProviderConfig::new("empty", Adapter::OpenaiChat);
        provider.base_url = Some(format!("http://{addr}/v1"));
        provider.model = Some("m".into());
        config.providers.push(provider);
        let kind = fast(config);
        kind.providers = vec!["empty".into()];
    })
    .await;
    let (status, headers, body) = answered(app.chat(Some("empty"), &request("empty")).await).await;
    assert_eq!(status, 502, "{body}");
    let job_id = headers["onejob-job-id"].to_str().unwrap();
    let attempts = app.attempts(job_id).await;
    assert_eq!(attempts[0]["state"], "failed");
    assert_eq!(app.job(job_id).await["state"], "failed");
}

async fn a_gateway_kind_is_certified_like_any_other(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, gateway).await;
    let report = app.verify("fake-backup", "chat.fast").await;
    assert!(report.passed, "{report:?}");
    assert!(
        report.idempotency.as_ref().unwrap().deduplicated,
        "{report:?}"
    );
}

async fn keyless_calls_are_refused_unless_allowed(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, gateway).await;
    let (status, _, body) = answered(app.chat(None, &request("x")).await).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "idempotency-key-missing");
    let db = TestDatabase::create(backend).await;
    let app = TestApp::running(&db, &fakes, |config| {
        gateway(config);
        config.gateway.allow_keyless = true;
    })
    .await;
    let before = chat_side_effects(&fakes);
    for _ in 0..2 {
        let (status, _, _) = answered(app.chat(None, &request("keyless")).await).await;
        assert_eq!(status, 200);
    }
    assert_eq!(
        chat_side_effects(&fakes) - before,
        2,
        "each keyless call its own job"
    );
}

/// The `data:` payloads of a server-sent event stream, read to its end, each checked to be
/// what OpenAI streams (a chunk, an error, or `[DONE]`).
async fn events(response: Response) -> Vec<String> {
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream",
        "a stream"
    );
    let text = response.text().await.unwrap();
    let events: Vec<String> = text
        .lines()
        .filter_map(|line| {
            line.strip_prefix("data: ")
                .or_else(|| line.strip_prefix("data:"))
        })
        .map(|data| data.trim().to_owned())
        .collect();
    for event in &events {
        conforms_as_event(event);
    }
    events
}

/// The text a stream's chunks add up to.
fn streamed_text(events: &[String]) -> String {
    events
        .iter()
        .filter(|e| *e != "[DONE]")
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

fn streaming(text: &str) -> Value {
    let mut body = request(text);
    body["stream"] = json!(true);
    body
}

async fn two_concurrent_streams_get_the_same_live_chunks_from_one_upstream_call(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "slowly",
        Behaviour {
            run_ms: 1_500,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, gateway).await;
    let body = streaming("tell it slowly please");
    let first = app.chat(Some("stream"), &body).await;
    assert_eq!(first.status(), 200);
    let job_id = first.headers()["onejob-job-id"]
        .to_str()
        .unwrap()
        .to_owned();
    // The stream is live: the job is still running when its first chunks are here.
    let mut bytes = first.bytes_stream();
    let first_piece = futures::StreamExt::next(&mut bytes).await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first_piece).contains("chat.completion.chunk"));
    assert_eq!(
        app.job(&job_id).await["state"],
        "running",
        "relayed before the answer is complete"
    );
    let second = app.chat(Some("stream"), &body).await;
    assert_eq!(second.status(), 200);
    assert_eq!(second.headers()["idempotent-replayed"], "true");
    let second = events(second).await;
    let mut rest = String::from_utf8_lossy(&first_piece).into_owned();
    while let Some(piece) = futures::StreamExt::next(&mut bytes).await {
        rest.push_str(&String::from_utf8_lossy(&piece.unwrap()));
    }
    let first: Vec<String> = rest
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|d| d.trim().to_owned())
        .collect();
    for event in &first {
        conforms_as_event(event);
    }
    assert_eq!(first.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(
        first, second,
        "the second caller read the same stream from its start"
    );
    let text = streamed_text(&first);
    assert!(text.contains("tell it slowly please"), "{text}");
    assert_eq!(chat_side_effects(&fakes), 1);
    // The assembled completion is the job's result.
    let job = app
        .wait_job(&job_id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    assert_eq!(job["result"]["choices"][0]["message"]["content"], text);
}

/// The pieces of content a stream's chunks carry, the empty ones left out.
fn content_pieces(events: &[String]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .filter(|piece| !piece.is_empty())
        .collect()
}

/// A provider that streams at once: on a busy machine an attempt can stream its whole
/// answer and win the job before its waiting caller runs again. The caller is still relayed
/// the attempt's chunks, not the stored answer in one piece (a LiteLLM stream once came as
/// one chunk that way).
async fn a_quick_stream_is_relayed_in_pieces_even_when_it_ends_before_its_caller_looks(
    backend: Backend,
) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, gateway).await;
    // Many at once, a few times over: on 2 cores most runs of the earlier code had some
    // stream ended before its caller looked.
    const CALLS: usize = 200;
    const ROUNDS: usize = 3;
    for round in 0..ROUNDS {
        let calls = (0..CALLS).map(|n| {
            let app = &app;
            async move {
                let text = format!("quick stream {round}.{n}: a fox");
                let key = format!("quick:{round}.{n}");
                let response = app.chat(Some(&key), &streaming(&text)).await;
                assert_eq!(response.status(), 200);
                (text, events(response).await)
            }
        });
        for (text, events) in futures::future::join_all(calls).await {
            assert_eq!(
                events.last().map(String::as_str),
                Some("[DONE]"),
                "{events:?}"
            );
            let pieces = content_pieces(&events);
            assert!(pieces.len() > 2, "relayed in pieces: {pieces:?}");
            assert!(pieces.concat().contains(&text), "{pieces:?}");
        }
    }
    assert_eq!(chat_side_effects(&fakes), (CALLS * ROUNDS) as u64);
}

async fn a_stream_asked_after_completion_replays_the_stored_answer(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, gateway).await;
    let (status, _, completion) = answered(app.chat(Some("later"), &request("a fox")).await).await;
    assert_eq!(status, 200);
    let mut body = streaming("a fox");
    body["stream_options"] = json!({"include_usage": true});
    let response = app.chat(Some("later"), &body).await;
    assert_eq!(response.headers()["idempotent-replayed"], "true");
    let events = events(response).await;
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(
        streamed_text(&events),
        completion["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
    );
    let usage: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"], completion["usage"]);
    assert_eq!(chat_side_effects(&fakes), 1);
}

async fn a_live_stream_carries_the_usage_chunk_only_when_asked(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "usage",
        Behaviour {
            run_ms: 500,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, gateway).await;
    // onejob asks its upstream for the usage chunk whatever the caller asked; a caller that
    // did not ask must not get it: OpenAI's examples read choices[0] of every chunk.
    let plain = app
        .chat(Some("plain"), &streaming("usage, not asked"))
        .await;
    assert!(plain.headers().get("idempotent-replayed").is_none());
    let job_id = plain.headers()["onejob-job-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let plain = events(plain).await;
    assert_eq!(plain.last().map(String::as_str), Some("[DONE]"));
    for event in &plain[..plain.len() - 1] {
        let chunk: Value = serde_json::from_str(event).unwrap();
        assert_ne!(
            chunk["choices"],
            json!([]),
            "a chunk without choices: {event}"
        );
    }
    assert!(streamed_text(&plain).contains("usage, not asked"));
    let job = app
        .wait_job(&job_id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    assert!(
        job["result"]["usage"].is_object(),
        "the job keeps the usage"
    );
    // Asked for, it is the last chunk before [DONE].
    let mut asked = streaming("usage, asked");
    asked["stream_options"] = json!({"include_usage": true});
    let asked = events(app.chat(Some("asked"), &asked).await).await;
    assert_eq!(asked.last().map(String::as_str), Some("[DONE]"));
    let usage: Value = serde_json::from_str(&asked[asked.len() - 2]).unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["total_tokens"].as_u64() > Some(0), "{usage}");
    assert_eq!(chat_side_effects(&fakes), 2);
}

async fn a_client_that_disconnects_does_not_cancel_the_job(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "slowly",
        Behaviour {
            run_ms: 1_000,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, gateway).await;
    let response = app.chat(Some("gone"), &streaming("slowly then gone")).await;
    let job_id = response.headers()["onejob-job-id"]
        .to_str()
        .unwrap()
        .to_owned();
    drop(response);
    let job = app
        .wait_job(&job_id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    assert!(job["result"]["choices"][0]["message"]["content"].is_string());
    assert_eq!(chat_side_effects(&fakes), 1);
}

async fn a_stream_whose_attempt_breaks_off_ends_with_an_error_naming_the_job(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(Rule {
        matches: Some("breaks".into()),
        times: None,
        behaviour: serde_json::from_value(json!({"break_stream_after": 2, "run_ms": 300})).unwrap(),
    });
    let app = TestApp::running(&db, &fakes, gateway).await;
    let response = app
        .chat(Some("breaks"), &streaming("this one breaks off midway"))
        .await;
    assert_eq!(response.status(), 200);
    let job_id = response.headers()["onejob-job-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let events = events(response).await;
    assert_ne!(events.last().map(String::as_str), Some("[DONE]"));
    let error: Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(error["error"]["code"], "attempt_failed");
    assert_eq!(error["error"]["job_id"], job_id.as_str());
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&job_id)
    );
    // The upstream may have finished the work: the attempt's outcome is unknown, not failed.
    let attempts = app
        .wait_attempts(&job_id, WITHIN, |a| a[0]["state"] == "unknown")
        .await;
    assert_eq!(attempts.len(), 1);
}

impl TestApp {
    /// `POST /v1/chat/completions` under `key` with `body` as it is, byte for byte.
    pub async fn chat_text(&self, key: &str, body: &str) -> Response {
        self.client
            .post(self.url("/v1/chat/completions"))
            .bearer_auth(&self.token)
            .header("Idempotency-Key", key)
            .header("Content-Type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .unwrap()
    }
}

async fn the_upstream_receives_the_callers_bytes_with_only_the_model_changed(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, gateway).await;
    // Keys out of alphabetical order, numbers spelled as the caller chose.
    let sent = r#"{"model": "fast", "messages": [{"role": "user", "content": "order, please"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema":
        {"type": "object", "properties": {"reasoning": {"type": "string"},
        "final_answer": {"type": "string"}}}}}, "seed": 4.20e1, "temperature": 0.50,
        "stream": false}"#;
    let (status, _, _) = answered(app.chat_text("as-sent", sent).await).await;
    assert_eq!(status, 200);
    let seen = fakes.primary.submissions();
    let forwarded = seen.requests[0].body_text.clone().unwrap();
    let reasoning = forwarded.find(r#""reasoning""#).unwrap();
    assert!(
        reasoning < forwarded.find(r#""final_answer""#).unwrap(),
        "{forwarded}"
    );
    assert!(
        forwarded.contains(r#""seed":4.20e1,"temperature":0.50"#),
        "{forwarded}"
    );
    assert!(
        forwarded.starts_with(r#"{"model":"fake","messages":"#),
        "{forwarded}"
    );
    assert!(
        !forwarded.contains(r#""stream""#),
        "delivery is the gateway's: {forwarded}"
    );
    // The same call in another key order is the same job (a replay), not a conflict.
    let reordered = r#"{"stream": false, "temperature": 0.5, "seed": 42,
        "response_format": {"json_schema": {"schema": {"properties": {"final_answer":
        {"type": "string"}, "reasoning": {"type": "string"}}, "type": "object"}, "name": "a"},
        "type": "json_schema"}, "messages": [{"content": "order, please", "role": "user"}],
        "model": "fast"}"#;
    let (status, headers, _) = answered(app.chat_text("as-sent", reordered).await).await;
    assert_eq!(status, 200);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(chat_side_effects(&fakes), 1);
}

async fn a_v1_path_onejob_does_not_serve_answers_in_openais_shape(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, gateway).await;
    let (status, model) = json(app.get("/v1/models/fast").send().await.unwrap()).await;
    assert_eq!(status, 200);
    conforms("Model", &model);
    assert_eq!(model["id"], "fast");
    let (status, body) = json(app.get("/v1/models/gpt-9").send().await.unwrap()).await;
    assert_eq!(status, 404);
    conforms("ErrorResponse", &body);
    assert_eq!(body["error"]["type"], "not_found_error");
    for path in ["/v1/audio/speech", "/v1/files", "/v1/no/such/thing"] {
        let response = app
            .client
            .post(app.url(path))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json"),
            "{path}"
        );
        let (status, body) = json(response).await;
        assert_eq!(status, 404, "{path}: {body}");
        conforms("ErrorResponse", &body);
        assert!(body["error"]["message"].as_str().unwrap().contains(path));
    }
    let (status, body) = json(app.get("/v1/chat/completions").send().await.unwrap()).await;
    assert_eq!(status, 405, "{body}");
    conforms("ErrorResponse", &body);
    // onejob's own API keeps its problem documents.
    let response = app.get("/v1/jobs/not-a-uuid/nothing").send().await.unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
}

async fn a_number_beyond_the_exact_range_is_refused(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, gateway).await;
    for seed in [
        "1000000000000000000000000000000",
        "1000000000000000000000000000001",
    ] {
        let body = format!(
            r#"{{"model": "fast", "messages": [{{"role": "user", "content": "big"}}], "seed": {seed}}}"#
        );
        let (status, _, answer) = answered(app.chat_text("big-seed", &body).await).await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["error"]["code"], "params-invalid");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("/seed")
        );
    }
    assert_eq!(chat_side_effects(&fakes), 0);
}

async fn a_stream_outlives_attempt_timeout_and_a_silent_one_ends_unknown(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "steadily",
        Behaviour {
            run_ms: 2_500,
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
    let app = TestApp::running(&db, &fakes, |config| {
        gateway(config);
        let kind = fast(config);
        kind.attempt_timeout = Duration::from_millis(500);
        kind.stream_idle_timeout = Duration::from_millis(1_000);
    })
    .await;
    let response = app
        .chat(
            Some("long"),
            &streaming("a story told steadily, word by word"),
        )
        .await;
    let job_id = response.headers()["onejob-job-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let long = events(response).await;
    assert_eq!(long.last().map(String::as_str), Some("[DONE]"), "{long:?}");
    assert!(streamed_text(&long).contains("a story told steadily"));
    let job = app
        .wait_job(&job_id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    assert_eq!(job["attempts"], 1);
    // Its deadline in the store moved with the stream: no rescue took it for overdue.
    let attempts = app.attempts(&job_id).await;
    assert_eq!(attempts[0]["state"], "succeeded");
    let response = app
        .chat(Some("quiet"), &streaming("silent after the role"))
        .await;
    let job_id = response.headers()["onejob-job-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let quiet = events(response).await;
    let error: Value = serde_json::from_str(quiet.last().unwrap()).unwrap();
    assert_eq!(error["error"]["code"], "attempt_failed", "{quiet:?}");
    app.wait_attempts(&job_id, WITHIN, |a| a[0]["state"] == "unknown")
        .await;
}

async fn an_upstream_rate_limit_fails_over_where_certified(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "limited",
        Behaviour {
            http_status: Some(429),
            retry_after: Some(7),
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |config| {
        gateway(config);
        let kind = fast(config);
        kind.providers = vec!["fake".into(), "fake-backup".into()];
        kind.max_attempts = 2;
        kind.retry_backoff = Duration::from_millis(50);
    })
    .await;
    assert!(
        app.certify("fake-backup", "chat.fast").await,
        "the backup passes"
    );
    let (status, headers, body) =
        answered(app.chat(Some("limited"), &request("limited")).await).await;
    assert_eq!(status, 200, "{body}");
    let job_id = headers["onejob-job-id"].to_str().unwrap();
    let attempts = app.attempts(job_id).await;
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[1]["provider"], "fake-backup");
    // Without a provider to fail over to, the 429 reaches the caller with its Retry-After.
    let db = TestDatabase::create(backend).await;
    let app = TestApp::running(&db, &fakes, gateway).await;
    let (status, headers, body) = answered(
        app.chat(Some("limited-alone"), &request("limited alone"))
            .await,
    )
    .await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(headers["retry-after"], "7");
    assert_eq!(body["error"]["type"], "rate_limit_error");
    assert!(
        headers["x-request-id"]
            .to_str()
            .unwrap()
            .starts_with("req_")
    );
}

async fn upstream_account_errors_are_a_502_naming_the_provider(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    for status in [401, 403] {
        fakes.primary.add_rule(rule(
            &format!("refused {status}"),
            Behaviour {
                http_status: Some(status),
                ..Default::default()
            },
        ));
    }
    let app = TestApp::running(&db, &fakes, gateway).await;
    for upstream in [401, 403] {
        let text = format!("refused {upstream}");
        let key = format!("refused-{upstream}");
        let (status, headers, body) = answered(app.chat(Some(&key), &request(&text)).await).await;
        assert_eq!(status, 502, "{body}");
        assert_eq!(body["error"]["type"], "api_error");
        assert_eq!(body["error"]["code"], "upstream_auth_error");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("\"fake\"") && message.contains(&upstream.to_string()),
            "{message}"
        );
        assert_eq!(headers["x-should-retry"], "false");
    }
}

/// A new call on a node whose worker runs in the same process hands its job straight to
/// that worker: the job is created with its first attempt already started, in one
/// transaction (on PostgreSQL both carry that transaction's time), instead of waiting for
/// the worker's dispatch to find it due and start it in a transaction of its own. The job
/// is otherwise worked as any other: one attempt, one upstream call, its events in order.
async fn a_new_call_on_a_node_with_its_own_worker_starts_its_attempt_with_its_job(
    backend: Backend,
) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, gateway).await;
    let (status, headers, body) =
        answered(app.chat(Some("handed:1"), &request("Name a fox.")).await).await;
    assert_eq!(status, 200, "{body}");
    let job_id: uuid::Uuid = headers["onejob-job-id"].to_str().unwrap().parse().unwrap();
    let attempts = app.store.job_attempts(job_id).await.unwrap();
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    let job = app.store.job_for_dispatch(job_id).await.unwrap().unwrap();
    if backend == Backend::Postgres {
        assert_eq!(
            attempts[0].started_at, job.created_at,
            "the first attempt was started in a transaction after the job's"
        );
    }
    let kinds: Vec<String> = app
        .events(&job_id.to_string())
        .await
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kinds, ["created", "attempt_started", "won"]);
    assert_eq!(chat_side_effects(&fakes), 1);
}

/// An upstream answer that echoes a 64-bit seed or id (`choices[0].seed =
/// 14249853862446563000`, past 2^53) is a real answer: stored, answered and replayed with
/// that integer exactly, after one upstream call. The ±2^53 limit is for what callers send
/// (their params are fingerprinted), never for what upstreams answer; before, the answer
/// failed the output check as "no real artifact" and was paid for again on every attempt.
async fn an_answer_with_an_integer_past_2_53_is_kept_exactly(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counted = calls.clone();
    let seeded = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async {
                (
                    [("content-type", "application/json")],
                    r#"{"id": "chatcmpl-seed", "object": "chat.completion", "created": 7,
                    "model": "m", "choices": [{"index": 0, "seed": 14249853862446563000,
                    "message": {"role": "assistant", "content": "a red fox"},
                    "finish_reason": "stop"}], "usage": {"prompt_tokens": 3,
                    "completion_tokens": 3, "total_tokens": 6}}"#,
                )
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, seeded).await });
    let app = TestApp::running(&db, &fakes, |config| {
        gateway(config);
        let mut provider = ProviderConfig::new("seeded", Adapter::OpenaiChat);
        provider.base_url = Some(format!("http://{addr}/v1"));
        provider.model = Some("m".into());
        config.providers.push(provider);
        let kind = fast(config);
        kind.providers = vec!["seeded".into()];
        kind.max_attempts = 3;
    })
    .await;
    for replayed in [false, true] {
        let response = app.chat(Some("seeded"), &request("a seeded fox")).await;
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers().contains_key("idempotent-replayed"),
            replayed
        );
        let text = response.text().await.unwrap();
        assert!(
            text.contains("14249853862446563000"),
            "the seed as the upstream sent it: {text}"
        );
        let answer: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            answer["choices"][0]["seed"].as_u64(),
            Some(14249853862446563000)
        );
    }
    let streamed = events(app.chat(Some("seeded"), &streaming("a seeded fox")).await).await;
    assert!(
        streamed.iter().any(|e| e.contains("14249853862446563000")),
        "{streamed:?}"
    );
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// A job of a gateway kind submitted by `POST /v1/jobs` with `stream: true` in its params
/// (the caller's delivery field, in the job's params by this door) is sent upstream without
/// it: the non-streaming send reads a JSON answer, never an event stream it cannot parse
/// (before, every attempt failed on the unreadable stream and was re-sent up to
/// `max_attempts`).
async fn a_gateway_job_submitted_as_a_job_never_asks_its_upstream_for_a_stream(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |config| {
        gateway(config);
        fast(config).max_attempts = 3;
    })
    .await;
    let mut params = request("a fox by the other door");
    params["stream"] = json!(true);
    params["stream_options"] = json!({"include_usage": true});
    let job = app
        .create(
            "other-door",
            &json!({"kind": "chat.fast", "params": params}),
        )
        .await;
    let done = app
        .wait_job(job["id"].as_str().unwrap(), WITHIN, |j| {
            j["state"] != "pending" && j["state"] != "running"
        })
        .await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["attempts"], 1, "{done}");
    assert_eq!(done["result"]["object"], "chat.completion", "{done}");
    let sent = &fakes.primary.submissions().requests[0].request;
    assert!(sent.get("stream").is_none(), "{sent}");
    assert!(sent.get("stream_options").is_none(), "{sent}");
}

/// A stream whose upstream refused the request (after a while, so the caller reads it live)
/// ends with an error of the refusal's type, not a server error's.
async fn a_stream_the_upstream_refused_ends_with_the_refusals_error_type(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let upstream = Upstream::spawn(|_, _| Answer::Refuse {
        status: 400,
        body: json!({"error": {"message": "bad seed", "type": "invalid_request_error",
            "param": "seed", "code": null}}),
        after: Duration::from_millis(500),
    })
    .await;
    let app = TestApp::running(&db, &fakes, |config| {
        upstream.serve(config, "openai", Adapter::OpenaiChat, "chat.fast");
    })
    .await;
    let response = app.chat(Some("refused"), &streaming("refuse this")).await;
    assert_eq!(response.status(), 200);
    let job_id = response.headers()["onejob-job-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let events = events(response).await;
    let error: Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
    assert_eq!(error["error"]["code"], "attempt_failed");
    assert_eq!(error["error"]["job_id"], job_id.as_str());
}

/// A reasoning answer with log probabilities and a tool call as OpenAI streams it to onejob
/// (which always asks for the usage): `"usage": null` in every chunk, the content and the
/// arguments in pieces, the usage chunk last, then `[DONE]`.
fn openai_stream() -> Vec<(Option<String>, String)> {
    let head = json!({"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 7,
        "model": "upstream-model", "system_fingerprint": "fp_up", "usage": null});
    let with = |delta: Value, logprobs: Value, finish_reason: Value| {
        let mut chunk = head.clone();
        chunk["choices"] = json!([{"index": 0, "delta": delta, "logprobs": logprobs,
            "finish_reason": finish_reason}]);
        chunk
    };
    let token = |text: &str| {
        json!({"content": [{"token": text, "logprob": -0.5, "bytes": text.as_bytes(),
            "top_logprobs": []}], "refusal": null})
    };
    let mut usage = head.clone();
    usage["choices"] = json!([]);
    usage["usage"] = json!({"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16,
        "completion_tokens_details": {"reasoning_tokens": 3}});
    let chunks = [
        with(
            json!({"role": "assistant", "content": "", "refusal": null}),
            Value::Null,
            Value::Null,
        ),
        with(
            json!({"reasoning_content": "Foxes"}),
            Value::Null,
            Value::Null,
        ),
        with(
            json!({"reasoning_content": " are red."}),
            Value::Null,
            Value::Null,
        ),
        with(json!({"content": "A red"}), token("A red"), Value::Null),
        with(json!({"content": " fox."}), token(" fox."), Value::Null),
        with(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "weather", "arguments": ""}}]}),
            Value::Null,
            Value::Null,
        ),
        with(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\": \"Os"}}]}),
            Value::Null,
            Value::Null,
        ),
        with(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "lo\"}"}}]}),
            Value::Null,
            Value::Null,
        ),
        with(json!({}), Value::Null, json!("tool_calls")),
        usage,
    ];
    chunks
        .iter()
        .map(|chunk| (None, chunk.to_string()))
        .chain(std::iter::once((None, "[DONE]".to_owned())))
        .collect()
}

/// The completion a stream's `data:` payloads add up to.
fn assembled(events: &[String]) -> Value {
    let mut assembly = Assembly::new(Endpoint::Chat);
    for event in events.iter().filter(|e| *e != "[DONE]") {
        let chunk: Value = serde_json::from_str(event).unwrap();
        assert_eq!(assembly.push(&chunk).unwrap(), None);
    }
    assembly.done().unwrap()
}

/// Streamed live and then replayed under the same key, with and without the usage, the
/// stream adds up to the same completion, the job's, and carries the usage as OpenAI does:
/// `null` in every chunk but the usage chunk where asked, nowhere where not.
async fn a_replayed_stream_assembles_as_the_live_one(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let upstream = Upstream::spawn(|_, _| Answer::Stream {
        events: openai_stream(),
        gap: Duration::from_millis(20),
    })
    .await;
    let app = TestApp::running(&db, &fakes, |config| {
        upstream.serve(config, "openai", Adapter::OpenaiChat, "chat.fast");
    })
    .await;
    for include_usage in [true, false] {
        let key = format!("replayed-{include_usage}");
        let mut body = streaming("Weather for a red fox?");
        body["stream_options"] = json!({"include_usage": include_usage});
        let response = app.chat(Some(&key), &body).await;
        assert!(response.headers().get("idempotent-replayed").is_none());
        let job_id = response.headers()["onejob-job-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let live = events(response).await;
        let response = app.chat(Some(&key), &body).await;
        assert_eq!(response.headers()["idempotent-replayed"], "true");
        let replayed = events(response).await;
        let mut told = app.job(&job_id).await["result"].clone();
        assert_eq!(
            told["choices"][0]["message"]["reasoning_content"],
            "Foxes are red."
        );
        if !include_usage {
            told.as_object_mut().unwrap().remove("usage");
        }
        assert_eq!(
            assembled(&live),
            told,
            "live, include_usage {include_usage}"
        );
        assert_eq!(
            assembled(&replayed),
            told,
            "replayed, include_usage {include_usage}"
        );
        for stream in [&live, &replayed] {
            let (done, chunks) = stream.split_last().unwrap();
            assert_eq!(done, "[DONE]");
            let chunks: Vec<Value> = chunks
                .iter()
                .map(|c| serde_json::from_str(c).unwrap())
                .collect();
            let (last, before) = chunks.split_last().unwrap();
            if include_usage {
                assert!(last["usage"]["total_tokens"].is_u64(), "{last}");
                for chunk in before {
                    assert_eq!(chunk.get("usage"), Some(&Value::Null), "{chunk}");
                }
            } else {
                for chunk in &chunks {
                    assert!(chunk.get("usage").is_none(), "usage not asked: {chunk}");
                }
            }
        }
    }
}
