//! The control endpoints under `/_fake`, for scripting a fake server that runs in another
//! process (the `onejob-fake` binary):
//!
//! * `POST /_fake/rules` (body: a [`crate::Rule`]) appends a rule → 201 with the rule;
//! * `DELETE /_fake/rules` removes every rule → 204;
//! * `GET /_fake/submissions` → the [`crate::Submissions`] JSON;
//! * `POST /_fake/reset` clears rules, tasks, idempotency caches and counters → 204.

use std::sync::Arc;

use axum::{
    Json,
    body::Bytes,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};

use crate::behaviour::Rule;
use crate::error::{FakeError, parse_json};
use crate::state::Shared;
use crate::submissions::Submissions;

/// `POST /_fake/rules`.
pub(crate) async fn add_rule(
    State(shared): State<Arc<Shared>>,
    body: Bytes,
) -> Result<Response, FakeError> {
    let rule = Rule::from_json(parse_json(&body)?)?;
    shared.add_rule(rule.clone());
    Ok((StatusCode::CREATED, Json(rule)).into_response())
}

/// `DELETE /_fake/rules`.
pub(crate) async fn clear_rules(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.clear_rules();
    StatusCode::NO_CONTENT
}

/// `GET /_fake/submissions`.
pub(crate) async fn submissions(State(shared): State<Arc<Shared>>) -> Json<Submissions> {
    Json(shared.submissions())
}

/// `POST /_fake/reset`.
pub(crate) async fn reset(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.reset();
    StatusCode::NO_CONTENT
}
