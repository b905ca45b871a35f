//! `POST /v1/chat/completions` and `GET /v1/models`: the OpenAI-compatible gateway (DESIGN
//! §9), a thin adapter over the job use cases and [`crate::gateway`].
//!
//! A call is a job of the kind serving its `model`, under the caller's `Idempotency-Key`;
//! the answer is the job's outcome: `200` with the winning upstream's `chat.completion` (or
//! its stream), `409` with `Retry-After` while it still runs after `[gateway] wait` (OpenAI
//! SDKs retry a 409 with the same headers, so the retry attaches to the same job), `409`
//! for an outcome awaiting proof, the upstream's definite status for a failure (with
//! `x-should-retry: false`, as for a cancelled job: retrying changes nothing). Every error
//! is in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, so SDKs raise
//! it with onejob's message.

use std::{convert::Infallible, sync::Arc, time::Duration};

use axum::{
    Json,
    body::Body,
    extract::{Path, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
};
use futures::{Stream, StreamExt, stream};
use onejob_domain::{IdempotencyKey, JobState};
use serde_json::{Map, Value, json};
use tokio::time::Instant;
use uuid::Uuid;

use super::{
    AppState,
    auth::Caller,
    body::read_json_as_sent,
    jobs::{IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED, idempotency_key, submit_problem},
    problem::{Problem, ProblemType},
};
use crate::{
    gateway::{
        Delivery,
        completion::chunks_of,
        split_request,
        streams::{Next, StreamEnd, Wanted},
    },
    jobs::{Submission, Submitted},
    store::JobRecord,
};

/// The header naming the job a gateway answer belongs to.
pub const JOB_ID_HEADER: &str = "onejob-job-id";

/// The header by which OpenAI's SDKs are told whether to retry an error answer (they retry
/// 408, 409, 429 and 5xx unless it says `false`).
const SHOULD_RETRY: &str = "x-should-retry";

/// How often a waiting call looks at its job when no notice came (a job worked by another
/// process sends none).
const POLL: Duration = Duration::from_millis(250);

/// An error in OpenAI's shape, with onejob's problem type as its `code` and its extension
/// members (`job_id`, `changed`, …) beside.
pub(crate) fn openai_error(problem: Problem) -> Response {
    let status = problem.kind.status();
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
    error.insert("message".into(), json!(problem.detail));
    error.insert("type".into(), json!(kind));
    error.insert("param".into(), Value::Null);
    error.insert("code".into(), json!(problem.kind.slug()));
    for (key, value) in problem.extensions {
        error.entry(key).or_insert(value);
    }
    let mut response = (status, Json(json!({ "error": error }))).into_response();
    if let Some(seconds) = problem.retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// The same, for an error that is not one of onejob's problem types: an upstream's status.
fn upstream_error(status: StatusCode, message: String, job_id: Uuid, code: &str) -> Response {
    let kind = match status.as_u16() {
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    };
    let body = json!({ "error": {
        "message": message,
        "type": kind,
        "param": null,
        "code": code,
        "job_id": job_id,
    }});
    with_job((status, Json(body)).into_response(), job_id, false)
}

/// The header an upstream names its request by, passed on to the caller.
const REQUEST_ID: &str = "x-request-id";

fn with_request_id(mut response: Response, request_id: Option<&str>) -> Response {
    if let Some(value) = request_id.and_then(|id| HeaderValue::from_str(id).ok()) {
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
        (status = 400, description = "No or a malformed Idempotency-Key, bad JSON, or not a chat request", body = OpenAiError),
        (status = 401, description = "Missing or invalid API key", body = OpenAiError),
        (status = 404, description = "No kind serves this model", body = OpenAiError),
        (status = 409, description = "Still running after the wait (retry with the same key after Retry-After), awaiting proof (unknown), or cancelled", body = OpenAiError),
        (status = 413, description = "Body over max_body_bytes", body = OpenAiError),
        (status = 415, description = "Not JSON", body = OpenAiError),
        (status = 422, description = "The key names a call with another body", body = OpenAiError),
        (status = 502, description = "Every attempt failed without a definite upstream status", body = OpenAiError),
        (status = 503, description = "The database is unavailable; retry after Retry-After", body = OpenAiError),
    )
)]
pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match call(&state, &headers, body).await {
        Ok(response) => response,
        Err(problem) => openai_error(problem),
    }
}

async fn call(state: &Arc<AppState>, headers: &HeaderMap, body: Body) -> Result<Response, Problem> {
    let caller = Caller::from_headers(headers, state).await?;
    let key = match (
        headers.contains_key(IDEMPOTENCY_KEY),
        state.gateway.allow_keyless,
    ) {
        // Each keyless call its own job, under a key nobody can send again.
        (false, true) => IdempotencyKey::parse(&format!("keyless:{}", Uuid::now_v7()))
            .expect("a generated key is valid"),
        _ => idempotency_key(headers)?,
    };
    let (document, sent) = read_json_as_sent(headers, body, state.max_body_bytes).await?;
    let Value::Object(request) = document else {
        return Err(Problem::new(
            ProblemType::InvalidRequest,
            "the body must be an OpenAI chat completion request (a JSON object)",
        ));
    };
    let model = match request.get("model") {
        Some(Value::String(model)) => model.clone(),
        _ => {
            return Err(Problem::new(
                ProblemType::InvalidRequest,
                "the request needs a `model` (one of GET /v1/models)",
            ));
        }
    };
    let kind = state
        .jobs
        .kinds()
        .by_model(&model)
        .cloned()
        .ok_or_else(|| unknown_model(&model, state))?;
    check_delivery(&request)?;
    let (params, delivery) = split_request(request);
    // Registered before the job exists, so whichever attempt starts finds the reader.
    let wanted = delivery
        .stream
        .then(|| state.hub.streams.want(&caller.principal, &key.hash()));
    let submitted = state
        .jobs
        .submit(
            &caller.principal,
            &caller.actor(),
            &key,
            Submission {
                kind: kind.name.clone(),
                params,
                request_body: Some(sent),
            },
        )
        .await
        .map_err(submit_problem)?;
    let (job, replayed) = match submitted {
        Submitted::Created(job) => (job, false),
        Submitted::Replayed(job) => (job, true),
    };
    let deadline = Instant::now() + wait_for(state);
    match wanted {
        Some(wanted) => {
            stream_answer(state, &caller, job, replayed, delivery, wanted, deadline).await
        }
        None => {
            let (job, request_id) = settled(state, &caller, job, deadline, None).await?;
            Ok(with_request_id(
                answer(job, replayed),
                request_id.as_deref(),
            ))
        }
    }
}

/// `stream` must be a boolean and `stream_options` an object, where given.
fn check_delivery(request: &Map<String, Value>) -> Result<(), Problem> {
    let wrong = |field: &str, what: &str| {
        Problem::new(
            ProblemType::InvalidRequest,
            format!("`{field}` must be {what}"),
        )
    };
    if request
        .get("stream")
        .is_some_and(|s| !s.is_boolean() && !s.is_null())
    {
        return Err(wrong("stream", "true or false"));
    }
    if let Some(options) = request.get("stream_options").filter(|o| !o.is_null()) {
        let Some(options) = options.as_object() else {
            return Err(wrong("stream_options", "an object"));
        };
        if options
            .get("include_usage")
            .is_some_and(|u| !u.is_boolean() && !u.is_null())
        {
            return Err(wrong("stream_options.include_usage", "true or false"));
        }
    }
    Ok(())
}

/// How long a call waits for its job: `[gateway] wait`, kept a second inside the request
/// deadline so the answer is ours, not a 408.
fn wait_for(state: &AppState) -> Duration {
    state
        .gateway
        .wait
        .min(state.request_timeout.saturating_sub(Duration::from_secs(1)))
}

/// The job once it is finished or unknown, or (at `deadline`, or once `stream` has an
/// attempt streaming into it) as it is then; with the upstream's id of the request whose
/// answer it won while this call waited, where the upstream gave one.
async fn settled(
    state: &AppState,
    caller: &Caller,
    mut job: JobRecord,
    deadline: Instant,
    stream: Option<&Wanted>,
) -> Result<(JobRecord, Option<Arc<str>>), Problem> {
    let mut watcher = state.hub.watch.subscribe();
    let mut request_id = None;
    loop {
        if job.state.is_terminal() || job.state == JobState::Unknown {
            return Ok((job, request_id));
        }
        if stream.is_some_and(|s| s.stream().attempt().is_some()) {
            return Ok((job, request_id));
        }
        let started = async {
            match stream {
                Some(wanted) => {
                    wanted.stream().started().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            said = watcher.changed(job.id) => request_id = said.or(request_id),
            () = tokio::time::sleep(POLL) => {}
            () = started => {}
            () = tokio::time::sleep_until(deadline) => return Ok((job, request_id)),
        }
        job = state
            .jobs
            .get(&caller.principal, job.id)
            .await?
            .ok_or_else(|| Problem::not_found("job"))?;
    }
}

/// The answer for a job as it is now.
fn answer(job: JobRecord, replayed: bool) -> Response {
    let id = job.id;
    match job.state {
        JobState::Succeeded => {
            let completion = job.result.unwrap_or(Value::Null);
            with_job(
                (StatusCode::OK, Json(completion)).into_response(),
                id,
                replayed,
            )
        }
        JobState::Failed => final_answer(failed(&job)),
        JobState::Cancelled => final_answer(with_job(
            openai_error(waiting(id, JobState::Cancelled)),
            id,
            replayed,
        )),
        state => with_job(openai_error(waiting(id, state)), id, replayed),
    }
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

/// A failed job: its last definite upstream status and message, else 502, with the
/// upstream's `x-request-id` where it gave one. An upstream's `401`/`403` is about onejob's
/// own account there, not the caller's key: it is a `502` naming the provider, never the
/// caller's authentication error. An upstream's `429` (no certified provider took the job
/// over) keeps its `Retry-After`.
fn failed(job: &JobRecord) -> Response {
    let last = job
        .error
        .as_ref()
        .and_then(|e| e.get("last_error"))
        .cloned()
        .unwrap_or(Value::Null);
    let status = last
        .get("status")
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .filter(|s| s.is_client_error() || s.is_server_error())
        .unwrap_or(StatusCode::BAD_GATEWAY);
    let said = last
        .get("upstream_message")
        .or_else(|| last.get("message"))
        .and_then(Value::as_str)
        .unwrap_or("no attempt succeeded");
    let provider = last
        .get("provider")
        .and_then(Value::as_str)
        .unwrap_or("its upstream");
    let request_id = last.get("request_id").and_then(Value::as_str);
    let mut response = match status.as_u16() {
        401 | 403 => upstream_error(
            StatusCode::BAD_GATEWAY,
            format!(
                "job {} failed: the provider {provider:?} refused onejob's own credentials \
                 (HTTP {}); this is about onejob's account with that provider, not your API \
                 key: its operator must fix the provider's configuration",
                job.id,
                status.as_u16()
            ),
            job.id,
            "upstream_auth_error",
        ),
        429 => upstream_error(
            status,
            format!(
                "job {} failed: the provider {provider:?} is rate limited (HTTP 429) and no \
                 certified provider took the job over; a retry under this Idempotency-Key \
                 answers the same: send it again later under a new key, or recover this job \
                 with POST /v1/jobs/{}/retry",
                job.id, job.id
            ),
            job.id,
            "upstream_rate_limited",
        ),
        _ => upstream_error(
            status,
            format!("job {} failed: {said}", job.id),
            job.id,
            "upstream_error",
        ),
    };
    if status == StatusCode::TOO_MANY_REQUESTS
        && let Some(seconds) = last.get("retry_after").and_then(Value::as_u64)
    {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    with_request_id(response, request_id)
}

/// A streamed answer: the live stream of the job's attempt from its first chunk, or the
/// stored completion as a stream once the job finished.
async fn stream_answer(
    state: &AppState,
    caller: &Caller,
    job: JobRecord,
    replayed: bool,
    delivery: Delivery,
    wanted: Wanted,
    deadline: Instant,
) -> Result<Response, Problem> {
    let (job, _) = settled(state, caller, job, deadline, Some(&wanted)).await?;
    let id = job.id;
    if wanted.stream().attempt().is_some() && !job.state.is_terminal() {
        return Ok(sse(live(wanted, id, delivery.include_usage), id, replayed));
    }
    match job.state {
        JobState::Succeeded => {
            let completion = job.result.unwrap_or(Value::Null);
            let chunks = chunks_of(&completion, delivery.include_usage);
            let events =
                stream::iter(chunks.into_iter().map(data)).chain(stream::once(async { done() }));
            Ok(sse(events, id, replayed))
        }
        _ => Ok(answer(job, replayed)),
    }
}

fn data(chunk: Value) -> Result<Event, Infallible> {
    Ok(Event::default().data(chunk.to_string()))
}

fn done() -> Result<Event, Infallible> {
    Ok(Event::default().data("[DONE]"))
}

/// Whether a streamed chunk is the one that closes a stream asked with `include_usage`: no
/// choices, only the usage. onejob always asks its upstream for it (the job's completion
/// keeps the usage), so it is relayed only to callers that asked for it, as OpenAI does: a
/// caller that did not reads `choices[0]` of every chunk, as OpenAI's own examples do.
fn usage_only(chunk: &Value) -> bool {
    chunk
        .get("choices")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
        && chunk.get("usage").is_some_and(|usage| !usage.is_null())
}

/// The chunks of a live stream from the first (the usage chunk only `with_usage`), then
/// `[DONE]`, or an error event naming the job if the attempt ended without an answer. The
/// reader holds `wanted` while it reads; a reader that goes away (the client disconnected)
/// stops reading, and the job goes on.
fn live(
    wanted: Wanted,
    job_id: Uuid,
    with_usage: bool,
) -> impl Stream<Item = Result<Event, Infallible>> {
    stream::unfold(
        (wanted, 0usize, false),
        move |(wanted, read, over)| async move {
            if over {
                return None;
            }
            match wanted.stream().next(read).await {
                Next::Chunks(chunks) => {
                    let read = read + chunks.len();
                    let events: Vec<_> = chunks
                        .into_iter()
                        .filter(|chunk| with_usage || !usage_only(chunk))
                        .map(data)
                        .collect();
                    Some((stream::iter(events), (wanted, read, false)))
                }
                Next::End(StreamEnd::Done) => {
                    Some((stream::iter(vec![done()]), (wanted, read, true)))
                }
                Next::End(StreamEnd::Failed(message)) => {
                    let error = json!({ "error": {
                        "message": message,
                        "type": "api_error",
                        "param": null,
                        "code": "attempt_failed",
                        "job_id": job_id,
                    }});
                    Some((stream::iter(vec![data(error)]), (wanted, read, true)))
                }
            }
        },
    )
    .flatten()
}

fn sse<S>(events: S, job_id: Uuid, replayed: bool) -> Response
where
    S: Stream<Item = Result<Event, Infallible>> + Send + 'static,
{
    let response = Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response();
    with_job(response, job_id, replayed)
}

/// A served model, as OpenAI describes one.
fn model_object(model: &str) -> Value {
    json!({ "id": model, "object": "model", "created": 0, "owned_by": "onejob" })
}

/// `GET /v1/models`: the model names the gateway serves, in OpenAI's list shape.
#[utoipa::path(
    get,
    path = "/v1/models",
    tag = "gateway",
    operation_id = "listModels",
    responses(
        (status = 200, description = "The models served at POST /v1/chat/completions", body = Object),
        (status = 401, description = "Missing or invalid API key", body = OpenAiError),
        (status = 503, description = "The database is unavailable; retry after Retry-After", body = OpenAiError),
    )
)]
pub async fn models(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(problem) = Caller::from_headers(&headers, &state).await {
        return openai_error(problem);
    }
    let data: Vec<Value> = state
        .jobs
        .kinds()
        .models()
        .into_iter()
        .map(model_object)
        .collect();
    Json(json!({ "object": "list", "data": data })).into_response()
}

/// `GET /v1/models/{model}`: one served model, as in the list (an OpenAI SDK's
/// `models.retrieve`).
#[utoipa::path(
    get,
    path = "/v1/models/{model}",
    tag = "gateway",
    operation_id = "retrieveModel",
    params(("model" = String, Path, description = "One of the names GET /v1/models lists")),
    responses(
        (status = 200, description = "The model", body = Object),
        (status = 401, description = "Missing or invalid API key", body = OpenAiError),
        (status = 404, description = "No kind serves this model", body = OpenAiError),
        (status = 503, description = "The database is unavailable; retry after Retry-After", body = OpenAiError),
    )
)]
pub async fn model(
    State(state): State<Arc<AppState>>,
    Path(model): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(problem) = Caller::from_headers(&headers, &state).await {
        return openai_error(problem);
    }
    match state.jobs.kinds().by_model(&model) {
        Some(_) => Json(model_object(&model)).into_response(),
        None => openai_error(unknown_model(&model, &state)),
    }
}

/// The 404 of a model no kind serves, with the ones served.
fn unknown_model(model: &str, state: &AppState) -> Problem {
    Problem::new(
        ProblemType::NotFound,
        format!("the model {model:?} does not exist here; GET /v1/models lists the ones served"),
    )
    .with("models", state.jobs.kinds().models())
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
                 GET /v1/models and GET /v1/models/{{model}}"
            ),
        )
    };
    openai_error(problem)
}
