//! The HTTP API (docs/design.md §4): routes, shared state and the error and panic handling
//! around them. Handlers stay thin: they parse, call [`crate::jobs::Jobs`], map its domain
//! errors to problems and shape the answer. The store is not reachable from here: every
//! read and change goes through a use case.

mod attempts;
mod auth;
mod body;
mod certificates;
pub mod deadline;
pub mod gateway;
mod health;
mod jobs;
mod lifecycle;
mod metrics;
pub mod openapi;
mod openapi_links;
pub mod problem;
mod responses;
pub mod server;
mod ui;
pub(crate) mod view;

use std::{any::Any, sync::Arc, time::Duration};

use axum::{
    Router,
    http::Request,
    response::{IntoResponse, Response},
    routing::{get, post},
};
use tower_http::{catch_panic::CatchPanicLayer, trace::TraceLayer};

pub use auth::Caller;
pub use jobs::{IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED};
pub use problem::{Problem, ProblemType};
pub use view::{AttemptView, Audience, EventView, JobView, poll_after_ms};

use crate::{api_key::KeyRing, jobs::Jobs};

/// What every handler shares.
pub struct AppState {
    /// The job use cases.
    pub jobs: Jobs,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// API keys, cached.
    pub keys: KeyRing,
    /// How long one request may take, body upload included ([`deadline`]).
    pub request_timeout: Duration,
    /// The gateway's use case (its live streams and job notices shared with this process's
    /// worker).
    pub gateway: crate::jobs::gateway::GatewayCalls,
}

/// Builds the API's router.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/jobs", post(jobs::submit).get(jobs::by_key))
        .route("/v1/jobs/{id}", get(jobs::get))
        .route("/v1/jobs/{id}/events", get(jobs::events))
        .route("/v1/jobs/{id}/attempts", get(jobs::attempts))
        .route("/v1/jobs/{id}/cancel", post(lifecycle::cancel))
        .route("/v1/jobs/{id}/retry", post(lifecycle::retry))
        .route("/v1/attempts", get(jobs::list_attempts))
        .route("/v1/attempts/{id}/resolve", post(attempts::resolve))
        .route("/v1/certificates", get(certificates::list))
        .route("/v1/chat/completions", post(gateway::chat_completions))
        .route("/v1/embeddings", post(gateway::embeddings))
        .route("/v1/responses", post(gateway::responses))
        .route("/v1/images/generations", post(gateway::images))
        .route("/v1/messages", post(gateway::messages))
        .route("/v1/models", get(gateway::models::models))
        .route("/v1/models/{model}", get(gateway::models::model))
        .route("/openapi.json", get(openapi::document))
        .route("/metrics", get(metrics::render))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .nest("/ui", ui::router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            deadline::limit,
        ))
        .with_state(state)
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(
            TraceLayer::new_for_http().make_span_with(|request: &Request<_>| {
                tracing::info_span!(
                    "http",
                    method = %request.method(),
                    path = %request.uri().path(),
                    job = tracing::field::Empty,
                )
            }),
        )
}

/// The probes of a worker-only node (`onejob worker --listen`): `/metrics`, `/healthz`
/// and `/readyz`, the same handlers as the API's, nothing else.
pub fn probes_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/metrics", get(metrics::render))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
        .layer(CatchPanicLayer::custom(panic_response))
}

/// A path nothing serves: in OpenAI's error shape under `/v1` outside onejob's own API (an
/// OpenAI SDK pointed at onejob raises it as its own error), else a problem.
async fn not_found(uri: axum::http::Uri) -> Response {
    if gateway::owns(uri.path()) {
        return gateway::unserved(uri.path(), false);
    }
    Problem::new(ProblemType::NotFound, "no such endpoint; see /openapi.json").into_response()
}

async fn method_not_allowed(uri: axum::http::Uri) -> Response {
    if gateway::owns(uri.path()) {
        return gateway::unserved(uri.path(), true);
    }
    Problem::new(
        ProblemType::MethodNotAllowed,
        "this endpoint does not take that method",
    )
    .into_response()
}

fn panic_response(panic: Box<dyn Any + Send + 'static>) -> Response {
    let message = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic");
    tracing::error!(panic = message, "handler panicked");
    Problem::new(
        ProblemType::Internal,
        "onejob hit an internal error; it has been logged",
    )
    .into_response()
}
