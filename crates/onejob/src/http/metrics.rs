//! `GET /metrics`: Prometheus text exposition of [`crate::telemetry`]. Unauthenticated, as
//! scrapers expect: expose it only where your scraper runs.

use std::sync::Arc;

use axum::{
    extract::State,
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};

use super::AppState;
use crate::{store::Chain, telemetry};

/// `GET /metrics`: the process's metrics in Prometheus text format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "health",
    operation_id = "getMetrics",
    security(()),
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain", body = String)),
)]
pub async fn render(State(state): State<Arc<AppState>>) -> Response {
    match state.jobs.count_unknown().await {
        Ok(count) => telemetry::unknown_attempts(count),
        Err(error) => tracing::warn!(error = %Chain(&error), "counting unknown attempts failed"),
    }
    let mut response = telemetry::install().render().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}
