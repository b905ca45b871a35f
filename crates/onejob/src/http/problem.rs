//! RFC 9457 problem details: every error onejob's HTTP API returns.
//!
//! Each [`ProblemType`] has a stable `type` URI (`https://onejob.dev/problems/<slug>`), a
//! fixed title and status. `detail` says what was wrong and how to fix it; extension members
//! carry machine-readable specifics (failing fields, changed param paths). Nothing a client
//! sends produces a 500: those are reserved for onejob's own bugs and are logged.

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Map, Value};

use crate::store::{Chain, StoreError};

/// The base of every problem `type` URI.
pub const PROBLEM_BASE: &str = "https://onejob.dev/problems/";

/// The media type of problem documents.
pub const PROBLEM_JSON: &str = "application/problem+json";

macro_rules! problem_types {
    ($($variant:ident => ($slug:literal, $status:ident, $title:literal),)+) => {
        /// Every kind of problem the API answers with.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum ProblemType {
            $(
                #[doc = $title]
                $variant,
            )+
        }

        impl ProblemType {
            /// Every problem type.
            pub const ALL: &'static [ProblemType] = &[$(ProblemType::$variant,)+];

            /// The last segment of the type URI.
            pub fn slug(self) -> &'static str {
                match self { $(ProblemType::$variant => $slug,)+ }
            }

            /// The HTTP status.
            pub fn status(self) -> StatusCode {
                match self { $(ProblemType::$variant => StatusCode::$status,)+ }
            }

            /// The short, fixed title.
            pub fn title(self) -> &'static str {
                match self { $(ProblemType::$variant => $title,)+ }
            }
        }
    };
}

problem_types! {
    Unauthorized => ("unauthorized", UNAUTHORIZED, "Missing or invalid API key"),
    Forbidden => ("forbidden", FORBIDDEN, "This API key may not do that"),
    NotFound => ("not-found", NOT_FOUND, "Not found"),
    MethodNotAllowed => ("method-not-allowed", METHOD_NOT_ALLOWED, "Method not allowed"),
    IdempotencyKeyMissing => ("idempotency-key-missing", BAD_REQUEST, "Idempotency-Key header missing"),
    IdempotencyKeyInvalid => ("idempotency-key-invalid", BAD_REQUEST, "Idempotency-Key is malformed"),
    UnsupportedMediaType => ("unsupported-media-type", UNSUPPORTED_MEDIA_TYPE, "Request body must be JSON"),
    BodyTooLarge => ("body-too-large", PAYLOAD_TOO_LARGE, "Request body too large"),
    InvalidJson => ("invalid-json", BAD_REQUEST, "Request body is not valid JSON"),
    InvalidRequest => ("invalid-request", BAD_REQUEST, "Request is malformed"),
    UnknownKind => ("unknown-kind", BAD_REQUEST, "Unknown job kind"),
    ParamsInvalid => ("params-invalid", BAD_REQUEST, "Params are not valid for this kind"),
    InvalidJobId => ("invalid-id", BAD_REQUEST, "Malformed id"),
    ResultInvalid => ("result-invalid", BAD_REQUEST, "The result is not a valid output for this kind"),
    KeyReused => ("key-reused", UNPROCESSABLE_ENTITY, "Idempotency key reused for a different request"),
    InvalidState => ("invalid-state", CONFLICT, "The job is not in a state that allows this"),
    RequestTimeout => ("request-timeout", REQUEST_TIMEOUT, "The request took too long"),
    Unavailable => ("unavailable", SERVICE_UNAVAILABLE, "Service temporarily unavailable"),
    Internal => ("internal", INTERNAL_SERVER_ERROR, "Internal error"),
}

impl ProblemType {
    /// The full `type` URI.
    pub fn uri(self) -> String {
        format!("{PROBLEM_BASE}{}", self.slug())
    }
}

/// A problem response: a type, a detail, and optional extension members.
#[derive(Debug, Clone)]
pub struct Problem {
    /// What kind of problem.
    pub kind: ProblemType,
    /// What was wrong and how to fix it.
    pub detail: String,
    /// Extension members (RFC 9457 §3.2).
    pub extensions: Map<String, Value>,
    /// Seconds a client should wait before retrying (sent as `Retry-After`).
    pub retry_after: Option<u64>,
}

impl Problem {
    /// A problem of `kind` with a detail message.
    pub fn new(kind: ProblemType, detail: impl Into<String>) -> Self {
        Self {
            kind,
            detail: detail.into(),
            extensions: Map::new(),
            retry_after: None,
        }
    }

    /// Adds an extension member.
    pub fn with(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.extensions.insert(name.to_owned(), value.into());
        self
    }

    /// A `503` (unavailable) saying `detail`, to be retried after a second.
    pub fn unavailable(detail: impl Into<String>) -> Self {
        let mut problem = Self::new(ProblemType::Unavailable, detail);
        problem.retry_after = Some(1);
        problem
    }

    /// The 404 every missing or foreign resource gets.
    pub fn not_found(what: &str) -> Self {
        Self::new(ProblemType::NotFound, format!("no {what} with that id"))
    }

    /// The body as JSON.
    pub fn to_json(&self) -> Value {
        let mut body = Map::new();
        body.insert("type".into(), self.kind.uri().into());
        body.insert("title".into(), self.kind.title().into());
        body.insert("status".into(), self.kind.status().as_u16().into());
        body.insert("detail".into(), self.detail.clone().into());
        for (name, value) in &self.extensions {
            body.insert(name.clone(), value.clone());
        }
        Value::Object(body)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = self.kind.status();
        let mut response = (status, Json(self.to_json())).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.kind == ProblemType::Unauthorized {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"onejob\""),
            );
        }
        response
    }
}

impl From<StoreError> for Problem {
    fn from(error: StoreError) -> Self {
        if error.is_retryable() || matches!(error, StoreError::Vanished(_)) {
            tracing::warn!(error = %Chain(&error), "database unavailable");
            Problem::unavailable(
                "the database is unavailable right now; retry after the time in Retry-After \
                 with the same Idempotency-Key",
            )
        } else {
            tracing::error!(error = %Chain(&error), "store error");
            Problem::new(
                ProblemType::Internal,
                "onejob hit an internal error; it has been logged",
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_unique_and_uris_stable() {
        let mut slugs: Vec<_> = ProblemType::ALL.iter().map(|t| t.slug()).collect();
        slugs.sort_unstable();
        let before = slugs.len();
        slugs.dedup();
        assert_eq!(before, slugs.len());
        assert_eq!(
            ProblemType::KeyReused.uri(),
            "https://onejob.dev/problems/key-reused"
        );
    }

    #[test]
    fn body_has_the_rfc9457_members_and_extensions() {
        let body = Problem::new(ProblemType::UnknownKind, "no kind x")
            .with("known_kinds", vec!["a"])
            .to_json();
        assert_eq!(body["status"], 400);
        assert_eq!(body["title"], "Unknown job kind");
        assert_eq!(body["known_kinds"][0], "a");
    }

    #[test]
    fn a_contended_store_is_a_503_with_retry_after_on_both_stores() {
        let problem = Problem::from(StoreError::Contended("completion"));
        assert_eq!(problem.kind, ProblemType::Unavailable);
        assert_eq!(problem.retry_after, Some(1));
        let internal = Problem::from(StoreError::Corrupt("x".into()));
        assert_eq!(internal.kind, ProblemType::Internal);
    }
}
