//! `/healthz` (the process answers) and `/readyz` (and its database does too).

use std::sync::Arc;

use axum::{Json, extract::State};
use serde_json::{Value, json};

use super::{
    AppState,
    problem::{Problem, ProblemType},
};

/// `GET /healthz`: 200 while the process serves requests.
pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// `GET /readyz`: 200 when the database answers, 503 problem otherwise.
pub async fn readyz(State(state): State<Arc<AppState>>) -> Result<Json<Value>, Problem> {
    let store = state.jobs.store();
    store.ping().await.map_err(|error| {
        let mut problem = Problem::new(
            ProblemType::Unavailable,
            format!("the database does not answer: {error}"),
        );
        problem.retry_after = Some(1);
        problem
    })?;
    Ok(Json(
        json!({ "status": "ready", "database": store.backend() }),
    ))
}
