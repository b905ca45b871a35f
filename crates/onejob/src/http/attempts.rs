//! `POST /v1/attempts/{id}/resolve`: an operator's out-of-band resolution of an `unknown`
//! attempt (operator keys only, within their tenant). A claimed success carries the result,
//! validated like any output and offered through the same compare-and-swap; every
//! resolution is an event naming the operator.

use std::sync::Arc;

use axum::{
    Json,
    body::Body,
    extract::{Path, State},
    http::HeaderMap,
};
use onejob_domain::AttemptState;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    AppState,
    auth::Caller,
    body::read_json,
    jobs::parse_id,
    problem::{Problem, ProblemType},
    view::{AttemptView, JobView},
};
use crate::{
    outcome::{self, Offered},
    store::{FailOutcome, Resolution, Unsuccessful},
};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Outcome {
    Succeeded,
    Failed,
    Cancelled,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResolveBody {
    outcome: Outcome,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    reason: Option<String>,
}

fn not_unknown(state: AttemptState) -> Problem {
    Problem::new(
        ProblemType::InvalidState,
        format!("only an unknown attempt is resolved out of band; this one is {state}"),
    )
    .with("state", state.as_str())
}

/// `POST /v1/attempts/{id}/resolve`.
pub async fn resolve(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, Problem> {
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
            match outcome::offer(&**store, &kind, attempt.id, attempt.number, &result, &by).await? {
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
            match outcome::fail(&**store, &kind, attempt.id, attempt.number, end, error, &by)
                .await?
            {
                FailOutcome::Recorded(_) => "recorded",
                FailOutcome::NotOpen(state) => return Err(not_unknown(state)),
            }
        }
    };
    let attempts = store.job_attempts(job.id).await?;
    let attempt = attempts
        .into_iter()
        .find(|a| a.id == attempt_id)
        .map(AttemptView::from);
    let job = store.job(&job.owner, job.id).await?.map(JobView::from);
    Ok(Json(
        json!({ "outcome": verdict, "attempt": attempt, "job": job }),
    ))
}
