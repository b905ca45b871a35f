//! `[http]`: the bounds the HTTP server puts on each client (see `crate::http::server` and
//! `crate::http::deadline`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// HTTP server settings (`[http]`; `ONEJOB_HTTP__REQUEST_TIMEOUT` and friends override them).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// How long a client may take to send a request's line and headers; a slower one
    /// (slowloris) has its connection closed.
    #[serde(default = "default_header_read_timeout", with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// How long one request may take from its head to its answer, body upload included; a
    /// slower one is answered `408 request-timeout` and its connection closed.
    #[serde(default = "default_request_timeout", with = "humantime_serde")]
    pub request_timeout: Duration,
    /// How long an API node trusts an API key lookup (found or not found) before asking the
    /// database again: a revoked key is refused at most this long after `onejob keys revoke`.
    #[serde(default = "default_key_cache_ttl", with = "humantime_serde")]
    pub key_cache_ttl: Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            header_read_timeout: default_header_read_timeout(),
            request_timeout: default_request_timeout(),
            key_cache_ttl: default_key_cache_ttl(),
        }
    }
}

fn default_header_read_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_request_timeout() -> Duration {
    Duration::from_secs(30)
}

/// How long a key lookup is trusted by default (`[http] key_cache_ttl`).
pub const DEFAULT_KEY_CACHE_TTL: Duration = Duration::from_secs(30);

fn default_key_cache_ttl() -> Duration {
    DEFAULT_KEY_CACHE_TTL
}
