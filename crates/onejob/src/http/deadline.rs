//! The request deadline: a request whose answer is not ready within the configured
//! `request_timeout` (a body trickled byte by byte, say) is answered `408 request-timeout`
//! and its connection closed, so a slow client cannot hold a handler for ever.
//!
//! Dropping the handler's future drops only the caller's wait: a transaction it held rolls
//! back, a submission that committed before the deadline is found again by its idempotency
//! key on retry, and what must outlive the caller (a gateway call's intake and the attempt
//! it starts, a cancellation and the upstream cancels it asks for) runs as tasks of its own
//! (`crate::jobs::gateway`, `crate::jobs::lifecycle`).

use std::sync::Arc;

use axum::{
    extract::{Request, State},
    http::{HeaderValue, header},
    middleware::Next,
    response::{IntoResponse, Response},
};

use super::{
    AppState,
    problem::{Problem, ProblemType},
};

/// Runs the rest of the stack under the request deadline.
pub async fn limit(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    let gateway = super::gateway::owns(&path);
    match tokio::time::timeout(state.request_timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            tracing::info!(timeout = ?state.request_timeout, "request cut off at its deadline");
            let problem = Problem::new(
                ProblemType::RequestTimeout,
                format!(
                    "the request took longer than {} s (request_timeout); send it again, with the \
                     same Idempotency-Key",
                    state.request_timeout.as_secs_f64()
                ),
            );
            // On the gateway's paths, in its API's error shape, as every answer there.
            let mut response = if gateway {
                super::gateway::error_on(&path, problem)
            } else {
                problem.into_response()
            };
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            response
        }
    }
}
