//! `POST /v1/jobs/{id}/cancel` and `POST /v1/jobs/{id}/retry`: the owner's controls over a
//! job's life. Cancelling asks live attempts' providers to cancel upstream where they can;
//! results that still arrive are discarded and recorded. Retrying recovers a `failed` job
//! on the same job (never a new one).

use std::sync::Arc;

use axum::{
    extract::{Path, State},
    http::StatusCode,
    response::Response,
};

use super::{
    AppState,
    auth::Caller,
    jobs::{job_response, parse_id},
    openapi,
    problem::{Problem, ProblemType},
    view,
};
use crate::store::{AttemptRecord, CancelOutcome, RecoverOutcome};

/// `POST /v1/jobs/{id}/cancel`: cancel a job that has not finished.
///
/// A job already cancelled answers as it is; one that already succeeded or failed is
/// refused with `409` (invalid-state).
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/cancel",
    tag = "jobs",
    operation_id = "cancelJob",
    params(("id" = uuid::Uuid, Path, description = "The job id")),
    responses(
        (status = 200, description = "Cancelled (now, or already before); live attempts are asked to cancel upstream", body = view::JobView),
        (status = 400, response = openapi::BadRequest),
        (status = 404, response = openapi::NotFound),
        (status = 409, response = openapi::Conflict),
        (status = 401, response = openapi::Unauthorized),
        (status = 503, response = openapi::Unavailable),
    )
)]
pub async fn cancel(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
    let id = parse_id(&id)?;
    let outcome = state
        .jobs
        .store()
        .cancel_job(&caller.principal, id, &caller.actor())
        .await?
        .ok_or_else(|| Problem::not_found("job"))?;
    match outcome {
        CancelOutcome::Final(job) => Err(Problem::new(
            ProblemType::InvalidState,
            format!("the job already {}; there is nothing to cancel", job.state),
        )
        .with("state", job.state.as_str())),
        CancelOutcome::Cancelled { job, live } => {
            state.hub.watch.changed(job.id);
            for attempt in live {
                tokio::spawn(cancel_upstream(state.clone(), attempt));
            }
            Ok(job_response(StatusCode::OK, job))
        }
    }
}

/// Asks an attempt's provider to cancel its task, where it has one and the API can.
async fn cancel_upstream(state: Arc<AppState>, attempt: AttemptRecord) {
    let (Some(task_id), Some(provider)) =
        (&attempt.task_id, state.providers.get(&attempt.provider))
    else {
        return;
    };
    match provider.cancel(task_id).await {
        Ok(()) => tracing::info!(attempt = %attempt.id, %task_id, "asked the provider to cancel"),
        Err(error) => {
            tracing::warn!(attempt = %attempt.id, %task_id, %error, "upstream cancel failed");
        }
    }
}

/// `POST /v1/jobs/{id}/retry`: run a failed job again.
///
/// The same job, pending again with a fresh attempt budget; a job that is not failed is
/// refused with `409` (invalid-state).
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/retry",
    tag = "jobs",
    operation_id = "retryJob",
    params(("id" = uuid::Uuid, Path, description = "The job id")),
    responses(
        (status = 200, description = "The failed job is pending again (same job, fresh attempt budget)", body = view::JobView),
        (status = 400, response = openapi::BadRequest),
        (status = 404, response = openapi::NotFound),
        (status = 409, response = openapi::Conflict),
        (status = 401, response = openapi::Unauthorized),
        (status = 503, response = openapi::Unavailable),
    )
)]
pub async fn retry(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
    let id = parse_id(&id)?;
    let outcome = state
        .jobs
        .store()
        .recover_job(&caller.principal, id, &caller.actor())
        .await?
        .ok_or_else(|| Problem::not_found("job"))?;
    match outcome {
        RecoverOutcome::Recovered(job) => Ok(job_response(StatusCode::OK, job)),
        RecoverOutcome::NotFailed(job) => Err(Problem::new(
            ProblemType::InvalidState,
            format!(
                "only a failed job can be retried; this one is {}",
                job.state
            ),
        )
        .with("state", job.state.as_str())),
    }
}
