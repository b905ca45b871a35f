//! The provider error, classified by what it says about the upstream's side effects.
//!
//! Each error has two texts: [`ProviderError::public`], safe to show a job's owner (no URL,
//! no upstream body, no internal address), and its `Display`, with everything an operator
//! needs. [`ProviderError::to_json`] keeps both, the second under `internal`, which only
//! operators see (see `http::view::Audience`).

use reqwest::StatusCode;
use serde_json::{Value, json};

/// Why a provider call did not give an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The request could not be built (template, URL); nothing was sent.
    #[error("the request could not be built: {0}")]
    Invalid(String),
    /// The upstream was not reached (connection refused, DNS, connect timeout); nothing was
    /// sent.
    #[error("the provider could not be reached: {0}")]
    Unreachable(String),
    /// The upstream refused the request: a 4xx, or 429/503 which by convention mean the
    /// request was not processed.
    #[error("the provider refused the request with {status}: {message}")]
    Rejected {
        /// The HTTP status.
        status: u16,
        /// The upstream's message, shortened.
        message: String,
        /// The upstream's `Retry-After` in seconds, where it sent one (a `429`'s wait).
        retry_after: Option<u64>,
        /// The upstream's `x-request-id`, where it sent one.
        request_id: Option<String>,
    },
    /// The upstream answered, but not with a usable result (it may have done the work; the
    /// attempt still definitely failed).
    #[error("the provider's answer is not usable: {0}")]
    BadAnswer(String),
    /// The upstream's answer is larger than the provider's `max_response_bytes`; it was not
    /// read. The attempt definitely failed (there is no usable result).
    #[error("the provider's answer is larger than {limit} bytes (max_response_bytes)")]
    TooLarge {
        /// The limit in bytes.
        limit: u64,
    },
    /// The request may or may not have been processed: timeout, reset, 500/502/504.
    #[error("the outcome is unknown: {0}")]
    Ambiguous(String),
    /// This adapter cannot do that.
    #[error("the provider does not support {0}")]
    Unsupported(&'static str),
}

impl ProviderError {
    /// True when the upstream definitely produced no result for this request, so another
    /// attempt may follow without risking a second result.
    pub fn is_definite(&self) -> bool {
        !matches!(self, ProviderError::Ambiguous(_))
    }

    /// True when the upstream answered this failure itself under the request's idempotency
    /// key (so an upstream caching answers by key would replay it): the next attempt needs a
    /// new key. A request that was never sent (not built, not reached) leaves the key unused.
    pub fn spends_key(&self) -> bool {
        !matches!(
            self,
            ProviderError::Invalid(_)
                | ProviderError::Unreachable(_)
                | ProviderError::Unsupported(_)
        )
    }

    /// What a job's owner may read: the kind of failure, never a URL or the upstream's body.
    pub fn public(&self) -> String {
        match self {
            ProviderError::Invalid(_) => "the request to the provider could not be built".into(),
            ProviderError::Unreachable(_) => "the provider could not be reached".into(),
            ProviderError::Rejected { status, .. } => {
                format!("the provider refused the request (HTTP {status})")
            }
            ProviderError::BadAnswer(_) => "the provider's answer is not usable".into(),
            ProviderError::TooLarge { limit } => {
                format!("the provider's answer is larger than {limit} bytes")
            }
            ProviderError::Ambiguous(_) => {
                "the provider's answer was lost (timeout, reset or server error): the outcome \
                 is unknown"
                    .into()
            }
            ProviderError::Unsupported(what) => format!("the provider does not support {what}"),
        }
    }

    /// `{"message": public, "internal": full}`: the error as an attempt records it. A refusal
    /// also keeps its HTTP `status`, the upstream's `retry_after` and `request_id` where it
    /// sent them, and, for a refusal of the request itself (400, 404, 413, 422), the
    /// upstream's own `error.message` where it sent one in OpenAI's shape: that is the
    /// upstream speaking to the caller about the caller's request (the gateway passes it
    /// on), unlike a 401 or 429, which are about onejob's account there.
    pub fn to_json(&self) -> Value {
        let mut error = json!({ "message": self.public(), "internal": self.to_string() });
        if let ProviderError::Rejected {
            status,
            message,
            retry_after,
            request_id,
        } = self
        {
            error["status"] = json!(status);
            if let Some(seconds) = retry_after {
                error["retry_after"] = json!(seconds);
            }
            if let Some(id) = request_id {
                error["request_id"] = json!(id);
            }
            if matches!(status, 400 | 404 | 413 | 422)
                && let Some(said) = serde_json::from_str::<Value>(message)
                    .ok()
                    .and_then(|body| body.pointer("/error/message").cloned())
                    .filter(Value::is_string)
            {
                error["upstream_message"] = said;
            }
        }
        error
    }

    /// Classifies a transport error from reqwest.
    pub fn from_transport(error: &reqwest::Error) -> Self {
        let message = chain(error);
        if error.is_builder() {
            ProviderError::Invalid(message)
        } else if error.is_connect() {
            // Also a connect timeout: a connection that never came up carried no request.
            ProviderError::Unreachable(message)
        } else {
            ProviderError::Ambiguous(message)
        }
    }

    /// Classifies a non-success HTTP status from an upstream speaking `api`; `None` for
    /// 2xx. A status that proves the request was not processed
    /// ([`UpstreamApi::proves_not_processed`]) is a refusal, any other is ambiguous.
    pub fn from_status(api: UpstreamApi, status: StatusCode, body: &str) -> Option<Self> {
        if status.is_success() {
            return None;
        }
        let message: String = body.chars().take(300).collect();
        Some(if api.proves_not_processed(status, body) {
            ProviderError::Rejected {
                status: status.as_u16(),
                message,
                retry_after: None,
                request_id: None,
            }
        } else {
            ProviderError::Ambiguous(format!("HTTP {status}: {message}"))
        })
    }
}

impl ProviderError {
    /// As [`ProviderError::from_status`], keeping what the upstream's headers say about a
    /// refusal: its `Retry-After` (in seconds) and its `x-request-id`.
    pub fn from_response(
        api: UpstreamApi,
        status: StatusCode,
        headers: &reqwest::header::HeaderMap,
        body: &str,
    ) -> Option<Self> {
        let mut error = Self::from_status(api, status, body)?;
        if let ProviderError::Rejected {
            retry_after,
            request_id,
            ..
        } = &mut error
        {
            *retry_after = headers
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.trim().parse::<u64>().ok());
            *request_id = super::answer::request_id(headers);
        }
        Some(error)
    }
}

/// The API an upstream speaks, as far as its error answers go: which of them prove that a
/// request was not processed (docs/gateway.md, "What proves not processed").
///
/// | answer | OpenAI (and OpenAI-compatible) | Anthropic | task APIs |
/// |---|---|---|---|
/// | any 4xx (400, 401, 403, 404, 408, 409, 413, 422, 429, …) | not processed | not processed | not processed |
/// | 503 | not processed | not processed | not processed |
/// | 529, or a body whose `error.type` is `overloaded_error` | ambiguous | not processed | ambiguous |
/// | 500, 502, 504 and every other 5xx | ambiguous | ambiguous | ambiguous |
///
/// A header such as `x-should-retry: true` proves nothing: it says a retry may be tried,
/// not that the first try did nothing (OpenAI's and Anthropic's SDKs retry a 500 too).
/// "Not processed" fails the attempt definitely (the job retries or fails over); an
/// ambiguous answer makes it `unknown` until proof arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamApi {
    /// OpenAI's API and the servers compatible with it (`openai-chat`).
    OpenAi,
    /// Anthropic's Messages API (`anthropic-messages`).
    Anthropic,
    /// A task API (`async-task`, the bundled fake).
    Tasks,
}

impl UpstreamApi {
    /// Whether `status`, with `body`, proves that the upstream did not process the request.
    pub fn proves_not_processed(self, status: StatusCode, body: &str) -> bool {
        if status.is_client_error() || status == StatusCode::SERVICE_UNAVAILABLE {
            return true;
        }
        match self {
            UpstreamApi::Anthropic => {
                status.as_u16() == 529
                    || serde_json::from_str::<Value>(body)
                        .ok()
                        .is_some_and(|body| {
                            body.pointer("/error/type").and_then(Value::as_str)
                                == Some("overloaded_error")
                        })
            }
            UpstreamApi::OpenAi | UpstreamApi::Tasks => false,
        }
    }
}

/// An error with its causes, `outer: inner`, for the operator's text (reqwest keeps the
/// interesting part, such as "connection refused" or "operation timed out", in a source).
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    crate::store::Chain(error).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row of the table in [`UpstreamApi`]'s documentation (and docs/gateway.md).
    #[test]
    fn each_api_proves_not_processed_by_its_own_table() {
        use UpstreamApi::{Anthropic, OpenAi, Tasks};
        let overloaded = r#"{"type": "error", "error": {"type": "overloaded_error",
            "message": "Overloaded"}}"#;
        let api_error = r#"{"type": "error", "error": {"type": "api_error", "message": "x"}}"#;
        let openai_500 = r#"{"error": {"message": "The server had an error", "type":
            "server_error"}}"#;
        let rows: &[(UpstreamApi, u16, &str, bool)] = &[
            // Every 4xx, the 429 rate limit among them, and 503: not processed, everywhere.
            (OpenAi, 400, "x", true),
            (OpenAi, 401, "x", true),
            (OpenAi, 403, "x", true),
            (OpenAi, 404, "x", true),
            (OpenAi, 408, "x", true),
            (OpenAi, 409, "x", true),
            (OpenAi, 413, "x", true),
            (OpenAi, 422, "x", true),
            (OpenAi, 429, "x", true),
            (OpenAi, 503, "x", true),
            (Anthropic, 400, "x", true),
            (Anthropic, 429, "x", true),
            (Anthropic, 503, "x", true),
            (Tasks, 400, "x", true),
            (Tasks, 429, "x", true),
            (Tasks, 503, "x", true),
            // Anthropic's overload: 529, or `overloaded_error` whatever the status.
            (Anthropic, 529, overloaded, true),
            (Anthropic, 529, "x", true),
            (Anthropic, 500, overloaded, true),
            (OpenAi, 529, overloaded, false),
            (Tasks, 529, "x", false),
            // Every other 5xx: ambiguous.
            (OpenAi, 500, openai_500, false),
            (OpenAi, 502, "x", false),
            (OpenAi, 504, "x", false),
            (Anthropic, 500, api_error, false),
            (Anthropic, 502, "x", false),
            (Anthropic, 504, "x", false),
            (Tasks, 500, "x", false),
            (Tasks, 502, "x", false),
            (Tasks, 504, "x", false),
        ];
        for &(api, code, body, not_processed) in rows {
            let status = StatusCode::from_u16(code).unwrap();
            assert_eq!(
                api.proves_not_processed(status, body),
                not_processed,
                "{api:?} {code} {body}"
            );
            let error = ProviderError::from_status(api, status, body).unwrap();
            assert_eq!(error.is_definite(), not_processed, "{api:?} {code}");
        }
        assert!(ProviderError::from_status(OpenAi, StatusCode::OK, "").is_none());
    }

    /// `x-should-retry: true` (which OpenAI's and Anthropic's servers may send) is no proof.
    #[test]
    fn a_should_retry_header_proves_nothing() {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("x-should-retry", "true".parse().unwrap());
        for api in [UpstreamApi::OpenAi, UpstreamApi::Anthropic] {
            let error =
                ProviderError::from_response(api, StatusCode::INTERNAL_SERVER_ERROR, &headers, "x")
                    .unwrap();
            assert!(!error.is_definite(), "{api:?}");
        }
    }

    #[test]
    fn the_public_text_carries_no_upstream_body_or_address() {
        let rejected = ProviderError::from_status(
            UpstreamApi::Tasks,
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded at http://10.0.0.5:9000/v1/tasks",
        )
        .unwrap();
        assert_eq!(
            rejected.public(),
            "the provider refused the request (HTTP 503)"
        );
        let json = rejected.to_json();
        assert!(json["internal"].as_str().unwrap().contains("10.0.0.5"));
        assert!(!json["message"].as_str().unwrap().contains("10.0.0.5"));
        let unreachable = ProviderError::Unreachable("http://internal:1/: refused".into());
        assert!(!unreachable.public().contains("internal"));
        assert!(!unreachable.spends_key());
        assert!(rejected.spends_key());
    }
}
