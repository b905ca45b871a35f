//! `[worker]`: how the worker loop claims and runs attempts.

use std::{net::SocketAddr, time::Duration};

use serde::{Deserialize, Serialize};

/// Worker settings (`[worker]`; `ONEJOB_WORKER__CONCURRENCY` and friends override them).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerConfig {
    /// Attempts one process runs at once. An attempt mostly waits on its provider, so the
    /// default (512) keeps a small machine busy; against a provider with a rate limit, size
    /// it by Little's law: the requests per second the provider allows you, times how many
    /// seconds an answer takes.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// How long an attempt's lease lasts without a heartbeat; workers renew it at a third.
    #[serde(default = "default_lease", with = "humantime_serde")]
    pub lease: Duration,
    /// How often to look for work when no wake-up arrives (a fallback, not the main path).
    #[serde(default = "default_poll_interval", with = "humantime_serde")]
    pub poll_interval: Duration,
    /// On shutdown, how long in-flight attempts may still finish before they are recorded
    /// as `unknown`.
    #[serde(default = "default_shutdown_grace", with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// Where a worker-only node (`onejob worker`) serves `/metrics`, `/healthz` and
    /// `/readyz`; none when unset (`onejob worker --listen` overrides it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            concurrency: default_concurrency(),
            lease: default_lease(),
            poll_interval: default_poll_interval(),
            shutdown_grace: default_shutdown_grace(),
            listen: None,
        }
    }
}

fn default_concurrency() -> usize {
    512
}

fn default_lease() -> Duration {
    Duration::from_secs(30)
}

fn default_poll_interval() -> Duration {
    Duration::from_secs(2)
}

fn default_shutdown_grace() -> Duration {
    Duration::from_secs(10)
}
