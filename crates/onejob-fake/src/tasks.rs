//! The asynchronous task shape: submit a task, read its status by id or by the
//! `Idempotency-Key` it was submitted under, cancel it.
//!
//! * `POST /v1/tasks` (any JSON object; the whole body is the input) answers
//!   `{"task_id": "task_…", "status": "queued"}` after `ack_delay_ms` (never, if
//!   `hang_before_ack`), or the scripted `http_status`.
//! * `GET /v1/tasks/{task_id}` answers the status document (see [`crate::task`]).
//! * `POST /v1/tasks/{task_id}/cancel` cancels an unfinished task and answers its status.
//! * `GET /v1/tasks?idempotency_key=K` answers the status of the task submitted under `K`,
//!   so a caller whose submit timed out can ask whether the upstream got it.

use std::sync::Arc;
use std::time::Duration;

use axum::{
    Json,
    body::Bytes,
    extract::{Path, Query, State, rejection::QueryRejection},
    http::HeaderMap,
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::{FakeError, parse_json};
use crate::idempotency::{idempotency_key, mark_replayed};
use crate::state::{Shared, TaskAdmission};
use crate::task::TaskStatus;

/// The query of `GET /v1/tasks`.
#[derive(Debug, Deserialize)]
pub(crate) struct Lookup {
    idempotency_key: Option<String>,
}

/// `POST /v1/tasks`.
pub(crate) async fn submit(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, FakeError> {
    let body = parse_json(&body)?;
    if !body.is_object() {
        return Err(FakeError::BadRequest(
            "a task submit must be a JSON object".into(),
        ));
    }
    let key = idempotency_key(&headers)?;
    match shared.admit_task(&body, key) {
        TaskAdmission::Replay(view) => Ok(mark_replayed(Json(view).into_response())),
        TaskAdmission::Scripted(status) => Err(FakeError::ScriptedStatus(status, None)),
        TaskAdmission::Accepted { task_id, behaviour } => {
            let delay = Duration::from_millis(behaviour.ack_delay_ms);
            tokio::select! {
                () = tokio::time::sleep(delay), if !behaviour.hang_before_ack => {}
                () = shared.until_shutdown() => return Err(FakeError::ShuttingDown),
            }
            let ack = json!({"task_id": task_id, "status": TaskStatus::Queued});
            Ok(Json(ack).into_response())
        }
    }
}

/// `GET /v1/tasks/{task_id}`.
pub(crate) async fn status(
    State(shared): State<Arc<Shared>>,
    Path(task_id): Path<String>,
) -> Result<Json<Value>, FakeError> {
    shared
        .task_view(&task_id)
        .map(Json)
        .ok_or(FakeError::UnknownTask(task_id))
}

/// `POST /v1/tasks/{task_id}/cancel`.
pub(crate) async fn cancel(
    State(shared): State<Arc<Shared>>,
    Path(task_id): Path<String>,
) -> Result<Json<Value>, FakeError> {
    shared
        .cancel_task(&task_id)
        .map(Json)
        .ok_or(FakeError::UnknownTask(task_id))
}

/// `GET /v1/tasks?idempotency_key=K`.
pub(crate) async fn by_key(
    State(shared): State<Arc<Shared>>,
    query: Result<Query<Lookup>, QueryRejection>,
) -> Result<Json<Value>, FakeError> {
    let Query(lookup) = query.map_err(|error| FakeError::BadRequest(error.body_text()))?;
    let key = lookup.idempotency_key.ok_or_else(|| {
        FakeError::BadRequest("GET /v1/tasks needs an `idempotency_key` query parameter".into())
    })?;
    shared
        .task_by_key(&key)
        .map(Json)
        .ok_or_else(|| FakeError::UnknownTask(format!("idempotency key {key}")))
}
