//! Every error answer of the fake provider, in the OpenAI shape
//! `{"error": {"message": …, "type": …}}`, and the JSON body parsing that produces the
//! 400s. Nothing a client sends makes the fake provider panic.

use axum::{
    Json,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use crate::behaviour::RuleError;

/// An error the fake provider answers with.
#[derive(Debug, thiserror::Error)]
pub enum FakeError {
    /// The body is not JSON.
    #[error("the request body is not valid JSON: {0}")]
    BadJson(#[from] serde_json::Error),
    /// The body is JSON but not the shape the endpoint needs.
    #[error("{0}")]
    BadRequest(String),
    /// A rule document was refused.
    #[error(transparent)]
    BadRule(#[from] RuleError),
    /// No task has this id (or no task was submitted under this idempotency key).
    #[error("no such task: {0}")]
    UnknownTask(String),
    /// No route has this path.
    #[error("no such route: {0}")]
    UnknownRoute(String),
    /// The route exists but not with this method.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// A rule scripted the work to fail.
    #[error("scripted failure")]
    ScriptedFailure,
    /// A rule scripted this HTTP status (and `Retry-After`, in seconds).
    #[error("scripted status")]
    ScriptedStatus(u16, Option<u64>),
    /// The server is stopping; a hanging request is released with this.
    #[error("the fake provider is shutting down")]
    ShuttingDown,
}

impl FakeError {
    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            FakeError::BadJson(_)
            | FakeError::BadRequest(_)
            | FakeError::BadRule(_)
            | FakeError::ScriptedFailure => StatusCode::BAD_REQUEST,
            FakeError::UnknownTask(_) | FakeError::UnknownRoute(_) => StatusCode::NOT_FOUND,
            FakeError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            FakeError::ScriptedStatus(code, _) => {
                StatusCode::from_u16(*code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            }
            FakeError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The OpenAI error `type` of this error.
    fn kind(&self) -> &'static str {
        match self {
            FakeError::BadJson(_)
            | FakeError::BadRequest(_)
            | FakeError::BadRule(_)
            | FakeError::ScriptedFailure => "invalid_request_error",
            FakeError::UnknownTask(_) | FakeError::UnknownRoute(_) => "not_found_error",
            FakeError::MethodNotAllowed => "invalid_request_error",
            FakeError::ScriptedStatus(..) | FakeError::ShuttingDown => "server_error",
        }
    }

    /// The JSON body of this error.
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.to_string(), "type": self.kind()}})
    }
}

impl IntoResponse for FakeError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), Json(self.body())).into_response();
        if let FakeError::ScriptedStatus(_, Some(seconds)) = self {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(seconds),
            );
        }
        response
    }
}

/// Parses a request body as JSON; anything else is a 400, never a panic.
pub fn parse_json(bytes: &[u8]) -> Result<Value, FakeError> {
    Ok(serde_json::from_slice(bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripted_status_keeps_its_code_and_shape() {
        let error = FakeError::ScriptedStatus(503, None);
        assert_eq!(error.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            error.body(),
            json!({"error": {"message": "scripted status", "type": "server_error"}})
        );
    }

    #[test]
    fn bad_json_is_a_400_not_a_panic() {
        let error = parse_json(b"{not json").unwrap_err();
        assert_eq!(error.status(), StatusCode::BAD_REQUEST);
    }
}
