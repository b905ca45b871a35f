//! `POST /v1/attempts/{id}/resolve`: an operator's out-of-band resolution of an `unknown`
//! attempt (operator keys only, within their tenant). A claimed success carries the result,
//! validated like any output and offered through the same compare-and-swap; every
//! resolution is an event naming the operator. [`resolve_unknown`] is shared with the
//! dashboard's resolve form.

use std::sync::Arc;

use axum::{
    Json,
    body::Body,
    extract::{Path, State},
    http::HeaderMap,
};
use onejob_domain::AttemptState;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{
    AppState,
    auth::Caller,
    body::read_json,
    jobs::parse_id,
    openapi,
    problem::{Problem, ProblemType},
    view::{AttemptView, Audience, JobView},
};
use crate::{
    outcome::{self, Offered},
    store::{FailOutcome, Resolution, Unsuccessful},
};

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

fn not_unknown(state: AttemptState) -> Problem {
    Problem::new(
        ProblemType::InvalidState,
        format!("only an unknown attempt is resolved out of band; this one is {state}"),
    )
    .with("state", state.as_str())
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
        (status = 400, response = openapi::BadRequest),
        (status = 403, response = openapi::Forbidden),
        (status = 404, response = openapi::NotFound),
        (status = 409, response = openapi::Conflict),
        (status = 413, response = openapi::ContentTooLarge),
        (status = 415, response = openapi::UnsupportedMediaType),
        (status = 401, response = openapi::Unauthorized),
        (status = 503, response = openapi::Unavailable),
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

/// Resolves an `unknown` attempt for an operator: the one code path behind both
/// `POST /v1/attempts/{id}/resolve` and the dashboard's resolve form. Operator keys only,
/// within their tenant; a claimed success is validated like any output and offered through
/// the same compare-and-swap as a live result.
pub async fn resolve_unknown(
    state: &AppState,
    caller: &Caller,
    attempt_id: Uuid,
    request: ResolveBody,
) -> Result<Resolved, Problem> {
    caller.require_operator()?;
    let store = state.jobs.store();
    let (attempt, job) = store
        .attempt_in_tenant(&caller.principal.tenant, attempt_id)
        .await?
        .ok_or_else(|| Problem::not_found("attempt"))?;
    if attempt.state != AttemptState::Unknown {
        return Err(not_unknown(attempt.state));
    }
    let kind = state.jobs.kinds().get(&job.kind).cloned().ok_or_else(|| {
        Problem::new(
            ProblemType::InvalidState,
            format!("the job's kind {:?} is no longer configured", job.kind),
        )
    })?;
    let note = request
        .reason
        .clone()
        .unwrap_or_else(|| "resolved by an operator".to_owned());
    let by = Resolution::of_unknown(caller.actor(), note.clone());
    let verdict = match request.outcome {
        Outcome::Succeeded => {
            let Some(result) = request.result else {
                return Err(Problem::new(
                    ProblemType::InvalidRequest,
                    "a succeeded resolution carries the attempt's `result`",
                ));
            };
            if let Err(errors) = kind.check_output(&result) {
                return Err(Problem::new(
                    ProblemType::ResultInvalid,
                    "the result does not pass the kind's output schema; nothing was changed",
                )
                .with("errors", serde_json::to_value(errors).unwrap_or_default()));
            }
            match outcome::offer(&**store, &kind, &attempt, &result, &by).await? {
                Offered::Won => "won",
                Offered::Discarded => "discarded",
                Offered::NotUnknown(state) => return Err(not_unknown(state)),
                Offered::Invalid(_) => "failed",
            }
        }
        Outcome::Failed | Outcome::Cancelled => {
            if request.result.is_some() {
                return Err(Problem::new(
                    ProblemType::InvalidRequest,
                    "only a succeeded resolution carries a `result`",
                ));
            }
            let end = match request.outcome {
                Outcome::Cancelled => Unsuccessful::Cancelled,
                _ => Unsuccessful::Failed,
            };
            let error = json!({ "message": note, "resolved_by": caller.actor() });
            match outcome::fail(&**store, &kind, &attempt, end, error, &by).await? {
                FailOutcome::Recorded(_) => "recorded",
                FailOutcome::NotOpen(state) => return Err(not_unknown(state)),
            }
        }
    };
    state.hub.watch.changed(job.id);
    let attempts = store.job_attempts(job.id).await?;
    let attempt = attempts
        .into_iter()
        .find(|a| a.id == attempt_id)
        .map(|a| AttemptView::seen_by(a, Audience::Operator));
    let job = store.job(&job.owner, job.id).await?.map(JobView::from);
    Ok(Resolved {
        outcome: verdict,
        attempt,
        job,
    })
}
