//! The provider error, classified by what it says about the upstream's side effects.

use reqwest::StatusCode;

/// Why a provider call did not give an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The request could not be built (template, URL); nothing was sent.
    #[error("the request could not be built: {0}")]
    Invalid(String),
    /// The upstream was not reached (connection refused, DNS); nothing was sent.
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
    },
    /// The upstream answered, but not with a usable result (it may have done the work; the
    /// attempt still definitely failed).
    #[error("the provider's answer is not usable: {0}")]
    BadAnswer(String),
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

    /// Classifies a transport error from reqwest.
    pub fn from_transport(error: &reqwest::Error) -> Self {
        let message = error.to_string();
        if error.is_builder() {
            ProviderError::Invalid(message)
        } else if error.is_connect() {
            ProviderError::Unreachable(message)
        } else {
            ProviderError::Ambiguous(message)
        }
    }

    /// Classifies a non-success HTTP status; `None` for 2xx.
    pub fn from_status(status: StatusCode, body: &str) -> Option<Self> {
        if status.is_success() {
            return None;
        }
        let message: String = body.chars().take(300).collect();
        let definite = status.is_client_error()
            || status == StatusCode::SERVICE_UNAVAILABLE
            || status == StatusCode::TOO_MANY_REQUESTS;
        Some(if definite {
            ProviderError::Rejected {
                status: status.as_u16(),
                message,
            }
        } else {
            ProviderError::Ambiguous(format!("HTTP {status}: {message}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_split_into_definite_and_ambiguous() {
        for code in [400, 401, 404, 422, 429, 503] {
            let e = ProviderError::from_status(StatusCode::from_u16(code).unwrap(), "x").unwrap();
            assert!(e.is_definite(), "{code}");
        }
        for code in [500, 502, 504] {
            let e = ProviderError::from_status(StatusCode::from_u16(code).unwrap(), "x").unwrap();
            assert!(!e.is_definite(), "{code}");
        }
        assert!(ProviderError::from_status(StatusCode::OK, "").is_none());
    }
}
