//! `/v1/jobs` and `/v1/attempts` handlers: a thin adapter from HTTP to [`crate::jobs::Jobs`]
//! (intake and reads) and [`crate::jobs::listing`] (the listings and their pages).

use std::{collections::HashMap, sync::Arc};

use axum::{
    Json,
    body::Body,
    extract::{Path, Query, State, rejection::QueryRejection},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use onejob_domain::{AttemptState, IdempotencyKey, JobState, KeyError, ParamsError};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use super::{
    AppState,
    auth::Caller,
    body::read_json,
    problem::{Problem, ProblemType},
    responses, view,
    view::{
        AttemptList, AttemptView, AttemptsView, Audience, EventView, EventsView, JobList, JobView,
        StepView,
    },
};
use crate::{
    jobs::{Submission, SubmitError, Submitted, listing::ListingError, runs},
    store::{JobFilter, JobRecord, Scope},
};

/// The header carrying the client's idempotency key.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The header set on a replayed answer.
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

/// The body of `POST /v1/jobs`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitBody {
    /// A configured kind (`chat.completion`).
    pub kind: String,
    /// The kind's params (checked against its params schema).
    pub params: Value,
}

/// `POST /v1/jobs`: create a job, or replay the one its key already names.
#[utoipa::path(
    post,
    path = "/v1/jobs",
    tag = "jobs",
    operation_id = "submitJob",
    params(("Idempotency-Key" = String, Header, pattern = r#"^(?:[!-~]|[!#-~][!-~]{0,253}[!-~]|"[!-~]{0,253}[!#-~]|"(?:[!#-\[\]-~]|\\[\\"]){1,255}")$"#, description = "Your name for this business action, the same on every retry of it: 1-255 visible ASCII characters, bare or as a structured-field string (\"abc\", escapes \\\" and \\\\)")),
    request_body(content = SubmitBody, content_type = "application/json"),
    responses(
        (status = 201, description = "A new job", body = view::JobView, headers(
            ("Location" = String, description = "The job's URL"),
            ("Retry-After" = u64, description = "Seconds before polling (while not terminal)"))),
        (status = 200, description = "A replay: the key and fingerprint match an existing job; nothing new runs", body = view::JobView, headers(
            ("Idempotent-Replayed" = String, description = "Always `true`"),
            ("Retry-After" = u64, description = "Seconds before polling (while not terminal)"))),
        (status = 400, response = responses::BadRequest),
        (status = 413, response = responses::ContentTooLarge),
        (status = 415, response = responses::UnsupportedMediaType),
        (status = 422, response = responses::KeyReused),
        (status = 401, response = responses::Unauthorized),
        (status = 503, response = responses::Unavailable),
    )
)]
pub async fn submit(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    let key = idempotency_key(&headers)?;
    let document = read_json(&headers, body, state.max_body_bytes).await?;
    let SubmitBody { kind, params } = serde_json::from_value(document).map_err(|e| {
        Problem::new(
            ProblemType::InvalidRequest,
            format!("the body must be {{\"kind\": string, \"params\": object}}: {e}"),
        )
    })?;
    let submitted = state
        .jobs
        .submit(
            &caller.principal,
            &caller.actor(),
            &key,
            Submission {
                kind,
                params,
                request_body: None,
                steps: false,
            },
        )
        .await
        .map_err(submit_problem)?;
    Ok(match submitted {
        Submitted::Created(job) => {
            let location = format!("/v1/jobs/{}", job.id);
            let mut response = job_response(StatusCode::CREATED, job);
            response.headers_mut().insert(
                header::LOCATION,
                HeaderValue::try_from(location).expect("a uuid path is a valid header"),
            );
            response
        }
        Submitted::Replayed(job) => {
            let mut response = job_response(StatusCode::OK, job);
            response
                .headers_mut()
                .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
            response
        }
    })
}

/// What `GET /v1/jobs` answers (the schema only): with `idempotency_key`, the one
/// [`JobView`] under it; without, a [`JobList`] page. The two are told apart by their
/// required members (`id` and `jobs`), so a generated client decodes either.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
#[serde(untagged)]
pub enum JobOrList {
    /// With `idempotency_key`: the job under it.
    Job(view::JobView),
    /// Without: a page of the caller's jobs.
    List(view::JobList),
}

/// `GET /v1/jobs/{id}`: a job, with its result once it has one.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    operation_id = "getJob",
    params(("id" = uuid::Uuid, Path, description = "The job id")),
    responses(
        (status = 200, description = "The job; while not terminal with poll_after_ms and Retry-After and no result", body = view::JobView, headers(
            ("Retry-After" = u64, description = "Seconds before polling again (while not terminal)"))),
        (status = 400, response = responses::BadRequest),
        (status = 404, response = responses::NotFound),
        (status = 401, response = responses::Unauthorized),
        (status = 503, response = responses::Unavailable),
    )
)]
pub async fn get(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
    let id = parse_id(&id)?;
    let job = state
        .jobs
        .get(&caller.principal, id)
        .await?
        .ok_or_else(|| Problem::not_found("job"))?;
    Ok(job_response(StatusCode::OK, job))
}

/// Most entries one page of a listing returns (jobs, attempts, events, certificates).
pub const MAX_PAGE: u32 = 500;

/// The `limit` query parameter of a paged listing: `default` when absent, else a number
/// from 1 to [`MAX_PAGE`] (`400 invalid-request` otherwise).
pub fn page_limit(query: &HashMap<String, String>, default: u32) -> Result<u32, Problem> {
    match query.get("limit") {
        None => Ok(default),
        Some(l) => l
            .parse::<u32>()
            .ok()
            .filter(|l| (1..=MAX_PAGE).contains(l))
            .ok_or_else(|| {
                Problem::new(
                    ProblemType::InvalidRequest,
                    format!("`limit` is a number from 1 to {MAX_PAGE}"),
                )
            }),
    }
}

/// The query string of a listing as name/value pairs, refusing names other than `allowed`
/// (`400 invalid-request`, as for a malformed query string).
pub fn page_query(
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
    allowed: &[&str],
) -> Result<HashMap<String, String>, Problem> {
    let Query(query) = query.map_err(|e| {
        Problem::new(
            ProblemType::InvalidRequest,
            format!("bad query string: {e}"),
        )
    })?;
    if let Some(name) = query.keys().find(|name| !allowed.contains(&name.as_str())) {
        return Err(Problem::new(
            ProblemType::InvalidRequest,
            format!(
                "unknown query parameter {name:?}; use {}",
                allowed.join(" and ")
            ),
        ));
    }
    Ok(query)
}

/// `GET /v1/jobs`: the caller's jobs, or with `idempotency_key` the one job under it.
///
/// With `idempotency_key=…`: the caller's job under that key (a `JobView`), or `404`.
/// Without it: the caller's jobs (a `JobList`), newest first, filtered by `state` and
/// `kind`, paged with `limit` (default 50, at most 500) and `before` (the `next_before` of
/// the previous page).
#[utoipa::path(
    get,
    path = "/v1/jobs",
    tag = "jobs",
    operation_id = "listJobs",
    params(
        ("idempotency_key" = Option<String>, Query, pattern = "^[!-~]{1,255}$", description = "Answer the caller's job under this key (a JobView, or 404); the other parameters are then checked but mean nothing"),
        ("state" = Option<String>, Query, pattern = "^(pending|running|unknown|succeeded|failed|cancelled)$", description = "List only jobs in this state"),
        ("kind" = Option<String>, Query, description = "List only jobs of this kind"),
        ("before" = Option<uuid::Uuid>, Query, description = "List only jobs older than this one (next_before of the previous page)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "Page size, 1-500 (default 50)"),
    ),
    responses(
        (status = 200, description = "With idempotency_key: the one job under it (a JobView); without: a page of the caller's jobs (a JobList)", body = JobOrList),
        (status = 400, response = responses::BadRequest),
        (status = 404, response = responses::NotFound),
        (status = 401, response = responses::Unauthorized),
        (status = 503, response = responses::Unavailable),
    )
)]
pub async fn by_key(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, Problem> {
    let Query(query) = query.map_err(|e| {
        Problem::new(
            ProblemType::InvalidRequest,
            format!("bad query string: {e}"),
        )
    })?;
    let Some(raw) = query.get("idempotency_key") else {
        return list(&state, &caller, &query).await;
    };
    // The listing's parameters mean nothing beside a key, but a malformed one is still
    // refused rather than silently ignored.
    listing_filter(&query)?;
    let key = IdempotencyKey::parse(raw).map_err(key_problem)?;
    let mut run = state.jobs.run(&caller.principal, &key).await?.into_iter();
    let job = run
        .next()
        .ok_or_else(|| Problem::new(ProblemType::NotFound, "no job under that idempotency key"))?;
    tracing::Span::current().record("job", tracing::field::display(job.id));
    // An agent run's later steps are listed with its first job, in order.
    let later: Vec<StepView> = run
        .filter_map(|step| {
            Some(StepView {
                step: step.run?.step,
                id: step.id,
                state: step.state,
            })
        })
        .collect();
    let first = StepView {
        step: runs::step_of(state.jobs.kinds().get(&job.kind).map(|k| &**k), &job).unwrap_or(0),
        id: job.id,
        state: job.state,
    };
    let mut view = JobView::from(job);
    if !later.is_empty() {
        view.steps = Some(std::iter::once(first).chain(later).collect());
    }
    Ok(view_response(StatusCode::OK, view))
}

async fn list(
    state: &AppState,
    caller: &Caller,
    query: &HashMap<String, String>,
) -> Result<Response, Problem> {
    let filter = listing_filter(query)?;
    let page = state.jobs.jobs_page(&caller.principal, &filter).await?;
    Ok(Json(JobList {
        jobs: page.jobs.into_iter().map(JobView::from).collect(),
        next_before: page.next_before,
    })
    .into_response())
}

/// The listing's filter from `GET /v1/jobs`'s query (`idempotency_key` aside).
fn listing_filter(query: &HashMap<String, String>) -> Result<JobFilter, Problem> {
    let bad = |detail: String| Problem::new(ProblemType::InvalidRequest, detail);
    for name in query.keys() {
        if !["idempotency_key", "state", "kind", "before", "limit"].contains(&name.as_str()) {
            return Err(bad(format!(
                "unknown query parameter {name:?}; use idempotency_key, or state, kind, before and limit"
            )));
        }
    }
    let filter = JobFilter {
        state: query
            .get("state")
            .map(|s| s.parse::<JobState>())
            .transpose()
            .map_err(|e| {
                bad(format!(
                    "{e}; states are pending, running, unknown, succeeded, failed, cancelled"
                ))
            })?,
        kind: query.get("kind").cloned(),
        before: query
            .get("before")
            .map(|b| Uuid::parse_str(b))
            .transpose()
            .map_err(|_| bad("`before` is a job id".into()))?,
        limit: page_limit(query, 50)?,
    };
    Ok(filter)
}

/// `GET /v1/attempts?state=unknown`: attempts newest first, filtered by state.
///
/// An operator's across its tenant, anyone else's across their own jobs (`limit` as for
/// jobs); `state=unknown` is the unknown queue.
#[utoipa::path(
    get,
    path = "/v1/attempts",
    tag = "operators",
    operation_id = "listAttempts",
    params(
        ("state" = Option<String>, Query, pattern = "^(starting|running|unknown|succeeded|failed|cancelled|discarded)$", description = "Only attempts in this state (`unknown` for the unknown queue)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "1-500 (default 50)"),
    ),
    responses(
        (status = 200, description = "Attempts newest first: an operator's across its tenant, anyone else's across their own jobs", body = view::AttemptList),
        (status = 400, response = responses::BadRequest),
        (status = 401, response = responses::Unauthorized),
        (status = 503, response = responses::Unavailable),
    )
)]
pub async fn list_attempts(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Json<AttemptList>, Problem> {
    let Query(query) = query.map_err(|e| {
        Problem::new(
            ProblemType::InvalidRequest,
            format!("bad query string: {e}"),
        )
    })?;
    let bad = |detail: String| Problem::new(ProblemType::InvalidRequest, detail);
    let wanted = query
        .get("state")
        .map(|s| s.parse::<AttemptState>())
        .transpose()
        .map_err(|e| bad(e.to_string()))?;
    let limit = page_limit(&query, 50)?;
    let scope = Scope {
        tenant: caller.principal.tenant.clone(),
        user: (!caller.operator).then(|| caller.principal.user.clone()),
    };
    let attempts = state.jobs.attempts_in(&scope, wanted, limit).await?;
    Ok(Json(AttemptList {
        attempts: attempts
            .into_iter()
            .map(|a| AttemptView::seen_by(a, Audience::of(caller.operator)))
            .collect(),
    }))
}

/// Events one page of `GET /v1/jobs/{id}/events` returns unless told otherwise.
pub const EVENTS_PAGE: u32 = 100;

/// `GET /v1/jobs/{id}/events`: one page of the job's event log, oldest first.
///
/// The log grows with every replay of the job's key, so it is paged: `after` (the previous
/// page's `next_after`) continues exactly where that page ended; `next_after` is `null` on
/// the last page.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/events",
    tag = "jobs",
    operation_id = "listJobEvents",
    params(
        ("id" = uuid::Uuid, Path, description = "The job id"),
        ("after" = Option<i64>, Query, description = "Only events with a larger id (next_after of the previous page)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "Page size, 1-500 (default 100)"),
    ),
    responses(
        (status = 200, description = "One page of the job's append-only event log, oldest first; next_after is null on the last page", body = view::EventsView),
        (status = 400, response = responses::BadRequest),
        (status = 404, response = responses::NotFound),
        (status = 401, response = responses::Unauthorized),
        (status = 503, response = responses::Unavailable),
    )
)]
pub async fn events(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(id): Path<String>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Json<EventsView>, Problem> {
    let job_id = parse_id(&id)?;
    let query = page_query(query, &["after", "limit"])?;
    let after = query
        .get("after")
        .map(|a| a.parse::<i64>())
        .transpose()
        .map_err(|_| {
            Problem::new(
                ProblemType::InvalidRequest,
                "`after` is an event id (an integer: next_after of the previous page)",
            )
        })?;
    let limit = page_limit(&query, EVENTS_PAGE)?;
    let page = state
        .jobs
        .events_page(&caller.principal, job_id, after, limit)
        .await?;
    Ok(Json(EventsView {
        job_id,
        events: page
            .events
            .into_iter()
            .map(|e| EventView::seen_by(e, Audience::of(caller.operator)))
            .collect(),
        next_after: page.next_after,
    }))
}

/// `GET /v1/jobs/{id}/attempts`: a job's attempts, oldest first.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/attempts",
    tag = "jobs",
    operation_id = "listJobAttempts",
    params(("id" = uuid::Uuid, Path, description = "The job id")),
    responses(
        (status = 200, description = "The job's attempts, oldest first", body = view::AttemptsView),
        (status = 400, response = responses::BadRequest),
        (status = 404, response = responses::NotFound),
        (status = 401, response = responses::Unauthorized),
        (status = 503, response = responses::Unavailable),
    )
)]
pub async fn attempts(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<AttemptsView>, Problem> {
    let job_id = parse_id(&id)?;
    let attempts = state.jobs.attempts_of(&caller.principal, job_id).await?;
    Ok(Json(AttemptsView {
        job_id,
        attempts: attempts
            .into_iter()
            .map(|a| AttemptView::seen_by(a, Audience::of(caller.operator)))
            .collect(),
    }))
}

impl From<ListingError> for Problem {
    fn from(error: ListingError) -> Self {
        match error {
            ListingError::NotFound => Problem::not_found("job"),
            ListingError::Store(error) => error.into(),
        }
    }
}

/// A job view with `Retry-After` while the job is not terminal. Records the job id on the
/// request's tracing span.
pub fn job_response(status: StatusCode, job: JobRecord) -> Response {
    tracing::Span::current().record("job", tracing::field::display(job.id));
    view_response(status, JobView::from(job))
}

/// [`job_response`] of a view already made.
fn view_response(status: StatusCode, view: JobView) -> Response {
    let retry_after = view.poll_after_ms.map(|ms| ms.div_ceil(1000).max(1));
    let mut response = (status, Json(view)).into_response();
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// A `422` refusing a step of an agent run (see [`SubmitError::StepReused`] and
/// [`SubmitError::NotAnExtension`]): `detail`, the job and step it names, what changed.
fn step_refused(detail: String, job_id: Uuid, step: i32, changed: Vec<String>) -> Problem {
    Problem::new(ProblemType::KeyReused, detail)
        .with("job_id", job_id.to_string())
        .with("step", step)
        .with("kind_changed", false)
        .with("changed", changed)
}

/// Parses a resource id from a path segment.
pub fn parse_id(raw: &str) -> Result<Uuid, Problem> {
    Uuid::parse_str(raw).map_err(|_| {
        Problem::new(
            ProblemType::InvalidJobId,
            "ids are UUIDs like 0192f7a4-5c1e-7d2a-9b3c-1234567890ab",
        )
    })
}

/// The request's `Idempotency-Key` (exactly one, well formed).
pub(crate) fn idempotency_key(headers: &HeaderMap) -> Result<IdempotencyKey, Problem> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Err(Problem::new(
            ProblemType::IdempotencyKeyMissing,
            "send an Idempotency-Key header naming this business action (1-255 visible \
             ASCII characters), and the same key again when you retry it",
        ));
    };
    if values.next().is_some() {
        return Err(Problem::new(
            ProblemType::IdempotencyKeyInvalid,
            "send exactly one Idempotency-Key header",
        ));
    }
    IdempotencyKey::from_header(value.as_bytes()).map_err(key_problem)
}

fn key_problem(error: KeyError) -> Problem {
    Problem::new(ProblemType::IdempotencyKeyInvalid, error.to_string())
}

/// The problem a refused submission answers.
pub(crate) fn submit_problem(error: SubmitError) -> Problem {
    match error {
        SubmitError::UnknownKind { kind, known } => Problem::new(
            ProblemType::UnknownKind,
            format!("there is no kind {kind:?}; use one of the configured kinds"),
        )
        .with("known_kinds", known),
        SubmitError::ParamsLimit(limit) => {
            let path = limit.path().to_owned();
            let detail = match &limit {
                ParamsError::TooDeep { limit, .. } => {
                    format!("params nest deeper than {limit} levels (max_params_depth)")
                }
                other => other.to_string(),
            };
            Problem::new(ProblemType::ParamsInvalid, detail.clone()).with(
                "errors",
                serde_json::json!([{ "path": path, "message": detail }]),
            )
        }
        SubmitError::ParamsSchema(errors) => Problem::new(
            ProblemType::ParamsInvalid,
            format!(
                "params fail the kind's schema at {}",
                errors
                    .iter()
                    .map(|e| e.path.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
        .with("errors", serde_json::to_value(errors).unwrap_or_default()),
        SubmitError::KeyReused {
            job_id,
            kind_changed,
            changed,
        } => Problem::new(
            ProblemType::KeyReused,
            if kind_changed {
                "this Idempotency-Key already names a job of another kind; a new intent needs a \
                 new key"
                    .to_owned()
            } else {
                format!(
                    "this Idempotency-Key already names a job with different params (changed: {}); \
                     retry with the original params, or use a new key for a new intent",
                    changed.join(", ")
                )
            },
        )
        .with("job_id", job_id.to_string())
        .with("kind_changed", kind_changed)
        .with("changed", changed),
        SubmitError::StepReused {
            job_id,
            step,
            changed,
        } => step_refused(
            format!(
                "step {step} of the agent run under this Idempotency-Key (its call with {step} \
                 conversation items) was sent before with different params (changed: {}); send \
                 that step as it was, or start another run under a new key",
                changed.join(", ")
            ),
            job_id,
            step,
            changed,
        ),
        SubmitError::NotAnExtension {
            job_id,
            step,
            changed,
        } => step_refused(
            format!(
                "this Idempotency-Key names an agent run, and this request's conversation does \
                 not continue the run's step {step} (changed: {}): a run's next call sends the \
                 run's conversation so far unchanged and adds to it; another conversation needs \
                 a new key (one per run)",
                changed.join(", ")
            ),
            job_id,
            step,
            changed,
        ),
        SubmitError::Store(error) => error.into(),
    }
}
