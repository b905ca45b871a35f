//! `/healthz` (the process answers) and `/readyz` (and its database does too, and takes
//! its commits).

use std::sync::Arc;

use axum::{Json, extract::State};
use serde_json::{Value, json};

use super::{AppState, problem::Problem, responses};

/// `GET /healthz`: 200 while the process serves requests.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    operation_id = "getLiveness",
    security(()),
    responses((status = 200, description = "The process serves requests", body = serde_json::Value)),
)]
pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// `GET /readyz`: 200 when the database answers and takes this node's commits, 503 problem
/// otherwise.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    operation_id = "getReadiness",
    security(()),
    responses(
        (status = 200, description = "The database answers, and takes this node's commits", body = serde_json::Value),
        (status = 503, response = responses::Unavailable),
    )
)]
pub async fn readyz(State(state): State<Arc<AppState>>) -> Result<Json<Value>, Problem> {
    let backend = state.jobs.ping().await.map_err(|error| {
        let detail = if error.is_unclear() {
            format!("this node cannot commit to its database right now: {error}")
        } else {
            format!("the database does not answer: {error}")
        };
        Problem::unavailable(detail)
    })?;
    Ok(Json(json!({ "status": "ready", "database": backend })))
}
