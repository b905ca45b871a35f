//! `[gateway]`: the OpenAI-compatible gateway's settings (see `crate::http::gateway`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Gateway settings (`[gateway]`; `ONEJOB_GATEWAY__WAIT` and friends override them).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// How long `POST /v1/chat/completions` waits for the job's outcome before it answers
    /// `409` with `Retry-After` (an OpenAI SDK retries that with the same headers, so the
    /// retry attaches to the same job). Kept below `[http] request_timeout`.
    #[serde(default = "default_wait", with = "humantime_serde")]
    pub wait: Duration,
    /// Whether a call without `Idempotency-Key` is served (each one then its own job, under
    /// a key nobody can repeat). Off by default: such a call is refused with `400`, because
    /// an SDK's own retry of it would be a second job.
    #[serde(default)]
    pub allow_keyless: bool,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            wait: default_wait(),
            allow_keyless: false,
        }
    }
}

fn default_wait() -> Duration {
    Duration::from_secs(20)
}
