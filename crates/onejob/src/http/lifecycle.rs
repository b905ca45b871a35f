//! `POST /v1/jobs/{id}/cancel` and `POST /v1/jobs/{id}/retry`: the owner's controls over a
//! job's life, an adapter over [`crate::jobs::lifecycle`] (which owns what cancelling and
//! retrying do); here the refusals become problems.

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
    problem::{Problem, ProblemType},
    responses, view,
};
use crate::jobs::lifecycle::{CancelError, RetryError};

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
        (status = 400, response = responses::BadRequest),
        (status = 404, response = responses::NotFound),
        (status = 409, response = responses::Conflict),
        (status = 401, response = responses::Unauthorized),
        (status = 503, response = responses::Unavailable),
    )
)]
pub async fn cancel(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
    let id = parse_id(&id)?;
    let job = state
        .jobs
        .cancel(&caller.principal, id, &caller.actor())
        .await?;
    Ok(job_response(StatusCode::OK, job))
}

impl From<CancelError> for Problem {
    fn from(error: CancelError) -> Self {
        match error {
            CancelError::NotFound => Problem::not_found("job"),
            CancelError::Finished { state } => {
                Problem::new(ProblemType::InvalidState, error.to_string())
                    .with("state", state.as_str())
            }
            CancelError::Store(error) => error.into(),
            CancelError::Stopping => Problem::unavailable(error.to_string()),
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
        (status = 400, response = responses::BadRequest),
        (status = 404, response = responses::NotFound),
        (status = 409, response = responses::Conflict),
        (status = 401, response = responses::Unauthorized),
        (status = 503, response = responses::Unavailable),
    )
)]
pub async fn retry(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
    let id = parse_id(&id)?;
    let job = state
        .jobs
        .retry(&caller.principal, id, &caller.actor())
        .await?;
    Ok(job_response(StatusCode::OK, job))
}

impl From<RetryError> for Problem {
    fn from(error: RetryError) -> Self {
        match error {
            RetryError::NotFound => Problem::not_found("job"),
            RetryError::NotFailed { state } => {
                Problem::new(ProblemType::InvalidState, error.to_string())
                    .with("state", state.as_str())
            }
            RetryError::Store(error) => error.into(),
        }
    }
}
