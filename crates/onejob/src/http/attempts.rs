//! `POST /v1/attempts/{id}/resolve`: an operator's out-of-band resolution of an `unknown`
//! attempt (operator keys only, within their tenant), an adapter over
//! [`crate::jobs::resolution`] (which owns what resolving does). [`resolve_unknown`] is
//! shared with the dashboard's resolve form: it checks the caller is an operator, calls the
//! use case and turns its refusals into problems.

use std::sync::Arc;

use axum::{
    Json,
    body::Body,
    extract::{Path, State},
    http::HeaderMap,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::{
    AppState,
    auth::Caller,
    body::read_json,
    jobs::parse_id,
    problem::{Problem, ProblemType},
    responses,
    view::{AttemptView, Audience, JobView},
};
use crate::jobs::resolution::{self, OutOfBand, ResolveError};

/// What an operator establishes about an unknown attempt.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The upstream did the work; `result` carries its output.
    Succeeded,
    /// The upstream did not do it.
    Failed,
    /// It was cancelled upstream.
    Cancelled,
}

/// The body of `POST /v1/attempts/{id}/resolve`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveBody {
    /// What happened upstream.
    pub outcome: Outcome,
    /// The attempt's output, for `succeeded` only (validated like any output).
    #[serde(default)]
    pub result: Option<Value>,
    /// Why, for the event log.
    #[serde(default)]
    pub reason: Option<String>,
}

/// What a resolution did.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Resolved {
    /// `won` or `discarded` for a success (another attempt may have won meanwhile);
    /// `recorded` for a failure or cancellation.
    pub outcome: &'static str,
    /// The attempt now.
    pub attempt: Option<AttemptView>,
    /// Its job now.
    pub job: Option<JobView>,
}

impl From<Outcome> for resolution::Outcome {
    fn from(outcome: Outcome) -> Self {
        match outcome {
            Outcome::Succeeded => resolution::Outcome::Succeeded,
            Outcome::Failed => resolution::Outcome::Failed,
            Outcome::Cancelled => resolution::Outcome::Cancelled,
        }
    }
}

impl From<ResolveError> for Problem {
    fn from(error: ResolveError) -> Self {
        let detail = error.to_string();
        match error {
            ResolveError::NotFound => Problem::not_found("attempt"),
            ResolveError::NotUnknown { state } => {
                Problem::new(ProblemType::InvalidState, detail).with("state", state.as_str())
            }
            ResolveError::KindGone { .. } => Problem::new(ProblemType::InvalidState, detail),
            ResolveError::ResultMissing | ResolveError::ResultUnexpected => {
                Problem::new(ProblemType::InvalidRequest, detail)
            }
            ResolveError::ResultInvalid(errors) => Problem::new(ProblemType::ResultInvalid, detail)
                .with("errors", serde_json::to_value(errors).unwrap_or_default()),
            ResolveError::Store(error) => error.into(),
        }
    }
}

/// `POST /v1/attempts/{id}/resolve`: settle an unknown attempt out of band (operator keys).
///
/// Only an attempt in the operator's tenant that is `unknown` can be resolved: any other is
/// refused with `409` (invalid-state). A `succeeded` resolution's result must pass the
/// kind's output schema (`400` result-invalid otherwise).
#[utoipa::path(
    post,
    path = "/v1/attempts/{id}/resolve",
    tag = "operators",
    operation_id = "resolveAttempt",
    params(("id" = uuid::Uuid, Path, description = "The attempt id")),
    request_body(content = ResolveBody, content_type = "application/json"),
    responses(
        (status = 200, description = "Resolved; the event names the operator", body = Resolved),
        (status = 400, response = responses::BadRequest),
        (status = 403, response = responses::Forbidden),
        (status = 404, response = responses::NotFound),
        (status = 409, response = responses::Conflict),
        (status = 413, response = responses::ContentTooLarge),
        (status = 415, response = responses::UnsupportedMediaType),
        (status = 401, response = responses::Unauthorized),
        (status = 503, response = responses::Unavailable),
    )
)]
pub async fn resolve(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Resolved>, Problem> {
    caller.require_operator()?;
    let attempt_id = parse_id(&id)?;
    let document = read_json(&headers, body, state.max_body_bytes).await?;
    let request: ResolveBody = serde_json::from_value(document).map_err(|e| {
        Problem::new(
            ProblemType::InvalidRequest,
            format!(
                "the body must be {{\"outcome\": \"succeeded\"|\"failed\"|\"cancelled\", \
                 \"result\"?: …, \"reason\"?: string}}: {e}"
            ),
        )
    })?;
    resolve_unknown(&state, &caller, attempt_id, request)
        .await
        .map(Json)
}

/// Resolves an `unknown` attempt for an operator ([`crate::jobs::Jobs::resolve`]): the one
/// code path behind both `POST /v1/attempts/{id}/resolve` and the dashboard's resolve form.
/// Operator keys only, within their tenant.
pub async fn resolve_unknown(
    state: &AppState,
    caller: &Caller,
    attempt_id: Uuid,
    request: ResolveBody,
) -> Result<Resolved, Problem> {
    caller.require_operator()?;
    let asked = OutOfBand {
        outcome: request.outcome.into(),
        result: request.result,
        reason: request.reason,
    };
    let resolved = state
        .jobs
        .resolve(&caller.principal.tenant, &caller.actor(), attempt_id, asked)
        .await?;
    Ok(Resolved {
        outcome: resolved.verdict.as_str(),
        attempt: resolved
            .attempt
            .map(|a| AttemptView::seen_by(a, Audience::Operator)),
        job: resolved.job.map(JobView::from),
    })
}
