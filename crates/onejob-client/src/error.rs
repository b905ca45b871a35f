//! [`Error`]: everything a call can fail with, typed so that a caller can tell a reused key
//! from a missing job from an unreachable server.

use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

use crate::{Job, KeyError};

/// The base of every onejob problem `type` URI (`https://onejob.dev/problems/<slug>`).
pub const PROBLEM_BASE: &str = "https://onejob.dev/problems/";

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The idempotency key is not 1–255 visible ASCII characters; nothing was sent.
    #[error(transparent)]
    InvalidKey(#[from] KeyError),
    /// The base URL given to the client is not an `http` or `https` URL.
    #[error("invalid base URL {url:?}: {reason}")]
    InvalidBaseUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The API key cannot be sent in an HTTP header (it holds control or non-ASCII
    /// characters).
    #[error("the API key holds characters that cannot be sent in an HTTP header")]
    InvalidApiKey,
    /// The HTTP client could not be built.
    #[error("building the HTTP client")]
    Build(#[source] reqwest::Error),
    /// The TLS settings could not be built (the platform's certificate verifier failed).
    #[error("setting up TLS")]
    Tls(#[source] rustls::Error),
    /// `422`: the idempotency key already names a job with other params or another kind.
    /// The stored job is untouched; this is never retried. Retry with the original params,
    /// or name the new intent with a new key.
    #[error(
        "the idempotency key already names job {job_id} with {}",
        if *kind_changed { "another kind".to_owned() } else { format!("other params (changed: {})", changed.join(", ")) }
    )]
    KeyReused {
        /// The job the key names.
        job_id: Uuid,
        /// The JSON Pointer paths of the params that differ (never their values).
        changed: Vec<String>,
        /// Whether the kind differs.
        kind_changed: bool,
    },
    /// Any other error answer: an RFC 9457 problem (`application/problem+json`), or, for an
    /// answer that is not one (a proxy's error page), `about:blank` with the text as detail.
    #[error("{title} ({status}): {detail}")]
    Problem {
        /// The HTTP status.
        status: u16,
        /// The problem `type` URI (`https://onejob.dev/problems/not-found`, …).
        problem_type: String,
        /// The problem's short title.
        title: String,
        /// What was wrong and how to fix it.
        detail: String,
        /// The whole problem document, extension members included.
        body: Value,
    },
    /// No answer: the connection failed, broke, or timed out (after the retries the
    /// [`RetryPolicy`](crate::RetryPolicy) allows).
    #[error("{endpoint}: no answer")]
    Transport {
        /// The call, as `METHOD /path` (without the query, which may hold a key).
        endpoint: String,
        /// The underlying error.
        source: reqwest::Error,
    },
    /// A success answer whose body is not what the API documents.
    #[error("{endpoint}: unexpected answer")]
    Decode {
        /// The call, as `METHOD /path`.
        endpoint: String,
        /// The decoding error.
        source: serde_json::Error,
    },
    /// [`Client::wait`](crate::Client::wait) gave up: the job had not finished within the
    /// timeout. The job goes on; wait again or poll later.
    #[error("job {} is still {} after waiting {waited:?}", job.id, job.state)]
    WaitTimedOut {
        /// The job as last seen.
        job: Box<Job>,
        /// How long the client waited.
        waited: Duration,
    },
}

impl Error {
    /// The HTTP status of an error answer (`422` for [`Error::KeyReused`]).
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::KeyReused { .. } => Some(422),
            Error::Problem { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The last segment of a onejob problem type (`not-found`, `invalid-state`, …).
    pub fn problem_slug(&self) -> Option<&str> {
        match self {
            Error::KeyReused { .. } => Some("key-reused"),
            Error::Problem { problem_type, .. } => problem_type.strip_prefix(PROBLEM_BASE),
            _ => None,
        }
    }

    /// Whether the server could not be reached or said to come back later (`429`, `502`,
    /// `503`, `504`), even after the client's retries: trying again later may succeed.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Transport { .. })
            || matches!(self.status(), Some(429 | 502 | 503 | 504))
    }
}
