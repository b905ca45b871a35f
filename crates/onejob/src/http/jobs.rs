//! `/v1/jobs` handlers: a thin adapter from HTTP to [`crate::jobs::Jobs`].

use std::{collections::HashMap, sync::Arc};

use axum::{
    Json,
    body::Body,
    extract::{Path, Query, State, rejection::QueryRejection},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use onejob_domain::{IdempotencyKey, KeyError, ParamsError};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use super::{
    AppState,
    auth::Caller,
    body::read_json,
    problem::{Problem, ProblemType},
    view::{AttemptView, AttemptsView, EventView, EventsView, JobView},
};
use crate::{
    jobs::{Submission, SubmitError, Submitted},
    store::JobRecord,
};

/// The header carrying the client's idempotency key.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The header set on a replayed answer.
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

/// The body of `POST /v1/jobs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitBody {
    kind: String,
    params: Value,
}

/// `POST /v1/jobs`: create a job, or replay the one its key already names.
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
            Submission { kind, params },
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

/// `GET /v1/jobs/{id}`.
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

/// `GET /v1/jobs?idempotency_key=…`: the caller's job under that key.
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
        return Err(Problem::new(
            ProblemType::InvalidRequest,
            "look a job up with ?idempotency_key=<your key>",
        ));
    };
    let key = IdempotencyKey::parse(raw).map_err(key_problem)?;
    let job = state
        .jobs
        .by_key(&caller.principal, &key)
        .await?
        .ok_or_else(|| Problem::new(ProblemType::NotFound, "no job under that idempotency key"))?;
    Ok(job_response(StatusCode::OK, job))
}

/// `GET /v1/jobs/{id}/events`.
pub async fn events(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<EventsView>, Problem> {
    let job_id = parse_id(&id)?;
    let events = state
        .jobs
        .events(&caller.principal, job_id)
        .await?
        .ok_or_else(|| Problem::not_found("job"))?;
    Ok(Json(EventsView {
        job_id,
        events: events.into_iter().map(EventView::from).collect(),
    }))
}

/// `GET /v1/jobs/{id}/attempts`.
pub async fn attempts(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<AttemptsView>, Problem> {
    let job_id = parse_id(&id)?;
    let attempts = state
        .jobs
        .store()
        .attempts(&caller.principal, job_id)
        .await?
        .ok_or_else(|| Problem::not_found("job"))?;
    Ok(Json(AttemptsView {
        job_id,
        attempts: attempts.into_iter().map(AttemptView::from).collect(),
    }))
}

/// A job view with `Retry-After` while the job is not terminal.
pub fn job_response(status: StatusCode, job: JobRecord) -> Response {
    let view = JobView::from(job);
    let retry_after = view.poll_after_ms.map(|ms| ms.div_ceil(1000).max(1));
    let mut response = (status, Json(view)).into_response();
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
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

fn idempotency_key(headers: &HeaderMap) -> Result<IdempotencyKey, Problem> {
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

fn submit_problem(error: SubmitError) -> Problem {
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
        SubmitError::Store(error) => error.into(),
    }
}
