//! `POST /v1/chat/completions`, `GET /v1/models` and `GET /v1/models/{model}`: the
//! OpenAI-compatible gateway (docs/design.md §9), a thin adapter over [`crate::jobs::gateway`].
//!
//! It parses a call (the caller, the Idempotency-Key, the body and its text as sent), asks
//! the use case, and shapes its answer as OpenAI's: `200` with the winning upstream's
//! `chat.completion` (or its stream), `409` with `Retry-After` while it still runs after
//! `[gateway] wait` (OpenAI SDKs retry a 409 with the same headers, so the retry attaches
//! to the same job), `409` for an outcome awaiting proof, the upstream's definite status for
//! a failure (`502` for the upstream's refusal of onejob's own credentials, the upstream's
//! `Retry-After` on its 429), with `x-should-retry: false`, as for a cancelled job: retrying
//! changes nothing. Every error is in OpenAI's shape, `{"error": {"message", "type",
//! "param", "code"}}`, so SDKs raise it with onejob's message; so is the answer to a `/v1`
//! path onejob does not serve ([`owns`], [`unserved`]).
//!
//! The endpoints beyond chat take the same path through the same use case: `POST
//! /v1/embeddings`, `POST /v1/responses` (its stream as named events, `event: response.…`),
//! `POST /v1/images/generations`, and Anthropic's `POST /v1/messages`, whose callers may send
//! their key as `x-api-key` (as Anthropic's SDK does) and whose errors, stream events included,
//! come in Anthropic's shape, `{"type": "error", "error": {"type", "message"}}`.

use std::{convert::Infallible, sync::Arc};

use axum::{
    Json,
    body::Body,
    extract::State,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
};
use futures::{Stream, StreamExt, stream};
use onejob_domain::JobState;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::{
    AppState,
    auth::Caller,
    body::read_json_as_sent,
    jobs::{IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED, idempotency_key, submit_problem},
    problem::{Problem, ProblemType},
};
use crate::{
    gateway::Endpoint,
    jobs::gateway::{GatewayAnswer, GatewayError, GatewayOutcome, LiveEvent, UpstreamFailure},
};

/// The header naming the job a gateway answer belongs to.
pub const JOB_ID_HEADER: &str = "onejob-job-id";

/// The header by which OpenAI's SDKs are told whether to retry an error answer (they retry
/// 408, 409, 429 and 5xx unless it says `false`).
const SHOULD_RETRY: &str = "x-should-retry";

/// The header an upstream names its request by, passed on to the caller.
const REQUEST_ID: &str = "x-request-id";

/// An error in OpenAI's shape, with onejob's problem type as its `code` and its extension
/// members (`job_id`, `changed`, …) beside.
pub(crate) fn openai_error(problem: Problem) -> Response {
    error_at(Endpoint::Chat, problem)
}

/// An error answered on the gateway path `path`: in Anthropic's shape at its Messages API,
/// in OpenAI's everywhere else.
pub(crate) fn error_on(path: &str, problem: Problem) -> Response {
    let endpoint = if path == Endpoint::Messages.path() {
        Endpoint::Messages
    } else {
        Endpoint::Chat
    };
    error_at(endpoint, problem)
}

/// An error in the shape of `endpoint`'s API (Anthropic's for messages, else OpenAI's).
fn error_at(endpoint: Endpoint, problem: Problem) -> Response {
    let status = problem.kind.status();
    let mut response = error_body(
        endpoint,
        status,
        &problem.detail,
        problem.kind.slug(),
        problem.extensions,
    );
    if let Some(seconds) = problem.retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// `{"error": {"message", "type", "param": null, "code", …extensions}}` with `status`, or for
/// Anthropic's API `{"type": "error", "error": {"type", "message", "code", …extensions}}`.
fn error_body(
    endpoint: Endpoint,
    status: StatusCode,
    message: &str,
    code: &str,
    extensions: Map<String, Value>,
) -> Response {
    let error = error_object(endpoint, status, message, code, extensions);
    let body = if endpoint == Endpoint::Messages {
        json!({ "type": "error", "error": error })
    } else {
        json!({ "error": error })
    };
    (status, Json(body)).into_response()
}

/// The `error` member of an error answer (see [`error_body`]).
fn error_object(
    endpoint: Endpoint,
    status: StatusCode,
    message: &str,
    code: &str,
    extensions: Map<String, Value>,
) -> Value {
    if endpoint == Endpoint::Messages {
        let kind = match status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            400..=499 => "invalid_request_error",
            529 => "overloaded_error",
            _ => "api_error",
        };
        let mut error = Map::new();
        error.insert("type".into(), json!(kind));
        error.insert("message".into(), json!(message));
        error.insert("code".into(), json!(code));
        for (key, value) in extensions {
            error.entry(key).or_insert(value);
        }
        return Value::Object(error);
    }
    let kind = match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        409 => "conflict_error",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    };
    let mut error = Map::new();
    error.insert("message".into(), json!(message));
    error.insert("type".into(), json!(kind));
    error.insert("param".into(), Value::Null);
    error.insert("code".into(), json!(code));
    for (key, value) in extensions {
        error.entry(key).or_insert(value);
    }
    Value::Object(error)
}

/// The request of `POST /v1/chat/completions`, as far as onejob reads it: OpenAI's chat
/// completion request (every other member is passed to the upstream as it is).
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct ChatRequest {
    /// One of the models GET /v1/models lists.
    model: String,
    /// The conversation: at least one message.
    #[schema(min_items = 1)]
    messages: Vec<ChatMessage>,
    /// Answer as server-sent `chat.completion.chunk` events (delivery only: not part of the
    /// job's intent).
    stream: Option<bool>,
    /// With `include_usage`, a last chunk carries the usage (delivery only).
    stream_options: Option<StreamOptions>,
}

/// One message of a chat request.
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`, …
    role: String,
    /// Text, or content parts.
    content: Option<Value>,
}

/// `stream_options` of a chat request.
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct StreamOptions {
    /// Send a last chunk with the usage.
    include_usage: Option<bool>,
}

/// An error answer of the gateway, in OpenAI's shape (the schema only; [`openai_error`]
/// writes it).
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct OpenAiError {
    /// What went wrong.
    error: OpenAiErrorDetail,
}

/// The `error` member of an [`OpenAiError`]; onejob's problem members (`job_id`,
/// `changed`, …) come beside these.
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct OpenAiErrorDetail {
    /// What was wrong and how to fix it.
    message: String,
    /// OpenAI's error type (`invalid_request_error`, `authentication_error`, …).
    #[serde(rename = "type")]
    kind: String,
    /// Always `null`.
    param: Option<String>,
    /// onejob's problem type slug (`key-reused`, `unavailable`, …), or `upstream_error`.
    code: String,
}

/// The error answers every gateway endpoint shares, in the shape of its API (`$body`), for
/// the OpenAPI document: each operation lists its own `200` beside them.
macro_rules! gateway_errors {
    ($(#[$doc:meta])* $name:ident, $body:ty) => {
        $(#[$doc])*
        #[derive(utoipa::IntoResponses)]
        #[allow(dead_code)]
        pub enum $name {
            #[response(status = 400, description = "No or a malformed Idempotency-Key, bad JSON, or not such a request")]
            BadRequest($body),
            #[response(status = 401, description = "Missing or invalid API key")]
            Unauthorized($body),
            #[response(status = 404, description = "No kind serves this model here")]
            NotFound($body),
            #[response(status = 409, description = "Still running after the wait (retry with the same key after Retry-After), awaiting proof (unknown), or cancelled")]
            Conflict($body),
            #[response(status = 413, description = "Body over max_body_bytes")]
            TooLarge($body),
            #[response(status = 415, description = "Not JSON")]
            NotJson($body),
            #[response(status = 422, description = "The key names a call with another body (or, in an agent run, this step with other content)")]
            KeyReused($body),
            #[response(status = 502, description = "Every attempt failed without a definite upstream status")]
            UpstreamFailed($body),
            #[response(status = 503, description = "The database is unavailable; retry after Retry-After")]
            Unavailable($body),
        }
    };
}

gateway_errors!(
    /// The error answers of the gateway's endpoints in OpenAI's shape.
    OpenAiErrors,
    OpenAiError
);
gateway_errors!(
    /// The error answers of Anthropic's Messages API, in its shape.
    AnthropicErrors,
    AnthropicError
);

/// An error answer of Anthropic's Messages API, as `POST /v1/messages` answers (the schema
/// only).
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct AnthropicError {
    /// Always `error`.
    #[serde(rename = "type")]
    kind: String,
    /// What went wrong.
    error: AnthropicErrorDetail,
}

/// The `error` member of an [`AnthropicError`]; onejob's problem members (`job_id`, …) come
/// beside these.
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct AnthropicErrorDetail {
    /// Anthropic's error type (`invalid_request_error`, `authentication_error`, …).
    #[serde(rename = "type")]
    kind: String,
    /// What was wrong and how to fix it.
    message: String,
    /// onejob's problem type slug (`key-reused`, `unavailable`, …), or `upstream_error`.
    code: String,
}

/// `POST /v1/chat/completions`: an OpenAI chat completion, as one job per Idempotency-Key.
#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    tag = "gateway",
    operation_id = "createChatCompletion",
    params(("Idempotency-Key" = String, Header, pattern = r#"^(?:[!-~]|[!#-~][!-~]{0,253}[!-~]|"[!-~]{0,253}[!#-~]|"(?:[!#-\[\]-~]|\\[\\"]){1,255}")$"#, description = "Your name for this call, the same on every retry of it (an OpenAI SDK's `extra_headers`)")),
    request_body(content = ChatRequest, content_type = "application/json", description = "An OpenAI chat completion request whose `model` is one of GET /v1/models"),
    responses(
        (status = 200, description = "The winning attempt's chat.completion (or, with `stream: true`, its chat.completion.chunk events ending [DONE])", content(
            (Object = "application/json"),
            (Object = "text/event-stream"),
        ), headers(
            ("onejob-job-id" = String, description = "The job"),
            ("Idempotent-Replayed" = String, description = "`true` when the key already named the job"))),
        OpenAiErrors,
    )
)]
pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    serve(&state, Endpoint::Chat, &headers, body).await
}

/// `POST /v1/embeddings`: OpenAI embeddings, as one job per Idempotency-Key.
#[utoipa::path(
    post,
    path = "/v1/embeddings",
    tag = "gateway",
    operation_id = "createEmbedding",
    params(("Idempotency-Key" = String, Header, pattern = r#"^(?:[!-~]|[!#-~][!-~]{0,253}[!-~]|"[!-~]{0,253}[!#-~]|"(?:[!#-\[\]-~]|\\[\\"]){1,255}")$"#, description = "Your name for this call, the same on every retry of it (an SDK's `extra_headers`)")),
    request_body(content = Object, content_type = "application/json", description = "An OpenAI embeddings request (`input`: a string or an array; `encoding_format` passes through) whose `model` is served here"),
    responses(
        (status = 200, description = "The winning attempt's embeddings list (its usage kept)", body = Object, headers(
            ("onejob-job-id" = String, description = "The job"),
            ("Idempotent-Replayed" = String, description = "`true` when the key already named the job"))),
        OpenAiErrors,
    )
)]
pub async fn embeddings(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    serve(&state, Endpoint::Embeddings, &headers, body).await
}

/// `POST /v1/responses`: an OpenAI Responses API call (stateless), as one job per Idempotency-Key.
#[utoipa::path(
    post,
    path = "/v1/responses",
    tag = "gateway",
    operation_id = "createResponse",
    params(("Idempotency-Key" = String, Header, pattern = r#"^(?:[!-~]|[!#-~][!-~]{0,253}[!-~]|"[!-~]{0,253}[!#-~]|"(?:[!#-\[\]-~]|\\[\\"]){1,255}")$"#, description = "Your name for this call, the same on every retry of it (an SDK's `extra_headers`)")),
    request_body(content = Object, content_type = "application/json", description = "An OpenAI Responses API request (`input` text or items, `tools`, `text.format`); `store: true`, `previous_response_id` and `conversation` are refused: onejob keeps no conversation state"),
    responses(
        (status = 200, description = "The winning attempt's response (or, with `stream: true`, its typed events, `response.created` to `response.completed`)", content(
            (Object = "application/json"),
            (Object = "text/event-stream"),
        ), headers(
            ("onejob-job-id" = String, description = "The job"),
            ("Idempotent-Replayed" = String, description = "`true` when the key already named the job"))),
        OpenAiErrors,
    )
)]
pub async fn responses(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    serve(&state, Endpoint::Responses, &headers, body).await
}

/// `POST /v1/images/generations`: OpenAI image generation, as one job per Idempotency-Key.
#[utoipa::path(
    post,
    path = "/v1/images/generations",
    tag = "gateway",
    operation_id = "createImage",
    params(("Idempotency-Key" = String, Header, pattern = r#"^(?:[!-~]|[!#-~][!-~]{0,253}[!-~]|"[!-~]{0,253}[!#-~]|"(?:[!#-\[\]-~]|\\[\\"]){1,255}")$"#, description = "Your name for this call, the same on every retry of it (an SDK's `extra_headers`)")),
    request_body(content = Object, content_type = "application/json", description = "An OpenAI image generation request (`prompt`, `n`, `size`, `response_format` url or b64_json)"),
    responses(
        (status = 200, description = "The winning attempt's images (an answer without an image is a failed attempt, never a success)", body = Object, headers(
            ("onejob-job-id" = String, description = "The job"),
            ("Idempotent-Replayed" = String, description = "`true` when the key already named the job"))),
        OpenAiErrors,
    )
)]
pub async fn images(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    serve(&state, Endpoint::Images, &headers, body).await
}

/// `POST /v1/messages`: Anthropic's Messages API, as one job per Idempotency-Key.
#[utoipa::path(
    post,
    path = "/v1/messages",
    tag = "gateway",
    operation_id = "createMessage",
    params(("Idempotency-Key" = String, Header, pattern = r#"^(?:[!-~]|[!#-~][!-~]{0,253}[!-~]|"[!-~]{0,253}[!#-~]|"(?:[!#-\[\]-~]|\\[\\"]){1,255}")$"#, description = "Your name for this call, the same on every retry of it (an SDK's `extra_headers`)")),
    request_body(content = Object, content_type = "application/json", description = "An Anthropic Messages API request (`model`, `max_tokens`, `messages` with content blocks, `tools`); the key as `x-api-key` or `Authorization: Bearer`"),
    responses(
        (status = 200, description = "The winning attempt's message (or, with `stream: true`, its events, `message_start` to `message_stop`); errors in Anthropic's shape", content(
            (Object = "application/json"),
            (Object = "text/event-stream"),
        ), headers(
            ("onejob-job-id" = String, description = "The job"),
            ("Idempotent-Replayed" = String, description = "`true` when the key already named the job"))),
        AnthropicErrors,
    )
)]
pub async fn messages(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    serve(&state, Endpoint::Messages, &headers, body).await
}

/// A call to `endpoint`, answered in its API's shape.
async fn serve(
    state: &Arc<AppState>,
    endpoint: Endpoint,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    match call(state, endpoint, headers, body).await {
        Ok(response) => response,
        Err(problem) => error_at(endpoint, problem),
    }
}

/// The header Anthropic's SDK sends its key in (OpenAI's send `Authorization: Bearer`).
const X_API_KEY: &str = "x-api-key";

/// The caller: by `Authorization: Bearer`, or by `x-api-key` where no `Authorization` came.
async fn caller(headers: &HeaderMap, state: &AppState) -> Result<Caller, Problem> {
    match headers.get(X_API_KEY) {
        Some(key) if !headers.contains_key(header::AUTHORIZATION) => {
            let key = key.to_str().unwrap_or_default().trim();
            Caller::from_token(&state.keys, key).await
        }
        _ => Caller::from_headers(headers, state).await,
    }
}

/// Parse → call → map.
async fn call(
    state: &Arc<AppState>,
    endpoint: Endpoint,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    let caller = caller(headers, state).await?;
    let sent_key = if headers.contains_key(IDEMPOTENCY_KEY) {
        Some(idempotency_key(headers)?)
    } else {
        None
    };
    let key = state
        .gateway
        .key(sent_key)
        .map_err(|error| gateway_problem(endpoint, error))?;
    let (request, sent) = read_json_as_sent(headers, body, state.max_body_bytes).await?;
    let answer = state
        .gateway
        .call(
            endpoint,
            &caller.principal,
            &caller.actor(),
            &key,
            request,
            sent,
        )
        .await
        .map_err(|error| gateway_problem(endpoint, error))?;
    Ok(respond(endpoint, answer))
}

/// The problem a refused call answers.
fn gateway_problem(endpoint: Endpoint, error: GatewayError) -> Problem {
    let detail = error.to_string();
    match error {
        GatewayError::KeyMissing => {
            let sdk = if endpoint == Endpoint::Messages {
                "with Anthropic's SDK, `extra_headers` in Python or the request options' \
                 `headers` in TypeScript"
            } else {
                "with an OpenAI SDK, `extra_headers` in Python or the request options' \
                 `headers` in JavaScript"
            };
            Problem::new(
                ProblemType::IdempotencyKeyMissing,
                format!(
                    "{detail} ({sdk}; an agent framework may set one key for a whole run, whose \
                     model calls then become the run's steps)"
                ),
            )
        }
        GatewayError::NotAnObject
        | GatewayError::NoModel
        | GatewayError::Delivery { .. }
        | GatewayError::Stateful { .. }
        | GatewayError::Background
        | GatewayError::ItemReference { .. } => Problem::new(ProblemType::InvalidRequest, detail),
        GatewayError::OtherEndpoint { served_at, .. } => {
            Problem::new(ProblemType::NotFound, detail).with("served_at", served_at)
        }
        GatewayError::UnknownModel { models, .. } => {
            Problem::new(ProblemType::NotFound, detail).with("models", models)
        }
        GatewayError::Submit(error) => submit_problem(error),
        GatewayError::Store(error) => error.into(),
        GatewayError::Stopping => Problem::unavailable(detail),
    }
}

/// The answer for a call's outcome at `endpoint`.
fn respond(endpoint: Endpoint, answer: GatewayAnswer) -> Response {
    let GatewayAnswer {
        job_id,
        replayed,
        request_id,
        outcome,
    } = answer;
    let response = match outcome {
        GatewayOutcome::Completion(completion) => {
            (StatusCode::OK, Json(completion)).into_response()
        }
        GatewayOutcome::Chunks(chunks) => {
            let events = chunks.into_iter().map(move |chunk| event(endpoint, chunk));
            if endpoint.named_events() {
                sse(stream::iter(events))
            } else {
                sse(stream::iter(events).chain(stream::once(async { done() })))
            }
        }
        GatewayOutcome::Live(live) => {
            let mut sent = 0u64;
            sse(live.events().filter_map(move |live| {
                sent += 1;
                let next = match live {
                    LiveEvent::Chunk(chunk) => Some(event(endpoint, chunk)),
                    LiveEvent::Done if endpoint.named_events() => None,
                    LiveEvent::Done => Some(done()),
                    LiveEvent::Failed { message, status } => {
                        Some(stream_error(endpoint, job_id, &message, status, sent - 1))
                    }
                };
                async move { next }
            }))
        }
        GatewayOutcome::Failed(failure) => final_answer(failed(endpoint, job_id, failure)),
        GatewayOutcome::NotDone(JobState::Cancelled) => {
            final_answer(error_at(endpoint, waiting(job_id, JobState::Cancelled)))
        }
        GatewayOutcome::NotDone(state) => error_at(endpoint, waiting(job_id, state)),
    };
    let mut response = with_job(response, job_id, replayed);
    if let Some(value) = request_id.and_then(|id| HeaderValue::from_str(&id).ok()) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    response
}

/// Marks the error answer of a finished job (failed, cancelled) as not worth retrying: every
/// retry under its key is answered the same.
fn final_answer(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(SHOULD_RETRY, HeaderValue::from_static("false"));
    response
}

fn with_job(mut response: Response, job_id: Uuid, replayed: bool) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        JOB_ID_HEADER,
        HeaderValue::try_from(job_id.to_string()).expect("a uuid is a valid header"),
    );
    if replayed {
        headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    response
}

/// The problem of a job that has no answer yet: still running, awaiting proof, cancelled.
fn waiting(job_id: Uuid, state: JobState) -> Problem {
    let (detail, retry_after) = match state {
        JobState::Unknown => (
            format!(
                "job {job_id}: the outcome of its attempt is unknown and awaits proof from the \
                 provider (or an operator); retry later with the same Idempotency-Key"
            ),
            Some(5),
        ),
        JobState::Cancelled => (format!("job {job_id} was cancelled"), None),
        _ => (
            format!(
                "job {job_id} is still running; retry with the same Idempotency-Key to attach \
                 to it"
            ),
            Some(1),
        ),
    };
    let mut problem = Problem::new(ProblemType::InvalidState, detail)
        .with("job_id", job_id.to_string())
        .with("state", state.as_str());
    problem.retry_after = retry_after;
    problem
}

/// A failed job's answer: the upstream's failure as OpenAI's error. An upstream's
/// `401`/`403` is about onejob's own account there, not the caller's key: a `502` naming the
/// provider, never the caller's authentication error. An upstream's `429` (no certified
/// provider took the job over) keeps its `Retry-After`.
fn failed(endpoint: Endpoint, job_id: Uuid, failure: UpstreamFailure) -> Response {
    let job = Map::from_iter([("job_id".to_owned(), json!(job_id))]);
    match failure {
        UpstreamFailure::AccountRefused { provider, status } => error_body(
            endpoint,
            StatusCode::BAD_GATEWAY,
            &format!(
                "job {job_id} failed: the provider {provider:?} refused onejob's own credentials \
                 (HTTP {status}); this is about onejob's account with that provider, not your \
                 API key: its operator must fix the provider's configuration"
            ),
            "upstream_auth_error",
            job,
        ),
        UpstreamFailure::RateLimited {
            provider,
            retry_after,
        } => {
            let mut response = error_body(
                endpoint,
                StatusCode::TOO_MANY_REQUESTS,
                &format!(
                    "job {job_id} failed: the provider {provider:?} is rate limited (HTTP 429) \
                     and no certified provider took the job over; a retry under this \
                     Idempotency-Key answers the same: send it again later under a new key, or \
                     recover this job with POST /v1/jobs/{job_id}/retry"
                ),
                "upstream_rate_limited",
                job,
            );
            if let Some(seconds) = retry_after {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            }
            response
        }
        UpstreamFailure::Refused { status, message } => error_body(
            endpoint,
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
            &format!("job {job_id} failed: {message}"),
            "upstream_error",
            job,
        ),
        UpstreamFailure::NoAnswer { message } => error_body(
            endpoint,
            StatusCode::BAD_GATEWAY,
            &format!("job {job_id} failed: {message}"),
            "upstream_error",
            job,
        ),
    }
}

fn data(chunk: Value) -> Result<Event, Infallible> {
    Ok(Event::default().data(chunk.to_string()))
}

/// One event of a stream at `endpoint`: named by its `type` where the API names its events.
fn event(endpoint: Endpoint, chunk: Value) -> Result<Event, Infallible> {
    if endpoint.named_events()
        && let Some(name) = chunk.get("type").and_then(Value::as_str)
    {
        return Ok(Event::default().event(name).data(chunk.to_string()));
    }
    data(chunk)
}

/// The event that ends a live stream whose attempt failed, naming the job: the API's own
/// error event (`error`, for the Responses API with its `sequence_number`), its error type
/// that of the upstream's definite `status` where the upstream refused the request (a `400`
/// is `invalid_request_error`, a `429` `rate_limit_error`, Anthropic's `529`
/// `overloaded_error`; a `401` or `403` is about onejob's account with the upstream, never the
/// caller's: `api_error`), else `api_error`.
fn stream_error(
    endpoint: Endpoint,
    job_id: Uuid,
    message: &str,
    status: Option<u16>,
    sequence: u64,
) -> Result<Event, Infallible> {
    let job = Map::from_iter([("job_id".to_owned(), json!(job_id))]);
    let status = status
        .filter(|status| !matches!(status, 401 | 403))
        .and_then(|status| StatusCode::from_u16(status).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let error = error_object(endpoint, status, message, "attempt_failed", job);
    match endpoint {
        Endpoint::Messages => event(endpoint, json!({ "type": "error", "error": error })),
        Endpoint::Responses => event(
            endpoint,
            json!({
                "type": "error",
                "code": "attempt_failed",
                "message": message,
                "param": null,
                "sequence_number": sequence,
                "job_id": job_id,
            }),
        ),
        _ => data(json!({ "error": error })),
    }
}

fn done() -> Result<Event, Infallible> {
    Ok(Event::default().data("[DONE]"))
}

fn sse<S>(events: S) -> Response
where
    S: Stream<Item = Result<Event, Infallible>> + Send + 'static,
{
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// Whether `path` is one the gateway answers for: under `/v1/` and not onejob's own API
/// (`/v1/jobs`, `/v1/attempts`, `/v1/certificates`), whose errors stay problem+json.
pub fn owns(path: &str) -> bool {
    let Some(rest) = path.strip_prefix("/v1/") else {
        return false;
    };
    let first = rest.split('/').next().unwrap_or_default();
    !matches!(first, "jobs" | "attempts" | "certificates")
}

/// The answer to a `/v1` path onejob does not serve, or to a method a gateway path does not
/// take, in OpenAI's error shape (an SDK raises it as its own `NotFoundError`).
pub fn unserved(path: &str, method_not_allowed: bool) -> Response {
    let problem = if method_not_allowed {
        Problem::new(
            ProblemType::MethodNotAllowed,
            format!("{path} does not take that method"),
        )
    } else {
        Problem::new(
            ProblemType::NotFound,
            format!(
                "onejob's gateway does not serve {path}: it serves POST /v1/chat/completions, \
                 POST /v1/embeddings, POST /v1/responses, POST /v1/images/generations, POST \
                 /v1/messages, GET /v1/models and GET /v1/models/{{model}}"
            ),
        )
    };
    error_on(path, problem)
}

pub mod models;

#[cfg(test)]
mod tests;
