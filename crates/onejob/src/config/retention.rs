//! `[retention]`: how long finished jobs are kept (see `crate::worker::retention`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Retention settings (`[retention]`; `ONEJOB_RETENTION__FINISHED_AFTER` and friends
/// override them). Off unless `finished_after` is set.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    /// Delete jobs that finished (succeeded, failed or cancelled) longer ago than this, with
    /// their attempts and events; their keys then name nothing. Unset: keep everything.
    #[serde(default, with = "humantime_serde")]
    pub finished_after: Option<Duration>,
    /// How often a worker looks for jobs to delete (default 1 minute).
    #[serde(default, with = "humantime_serde")]
    pub every: Option<Duration>,
    /// Most jobs deleted per transaction (default 500): a batch holds its rows' locks only
    /// for its own short transaction, so intake and workers are never held up for long.
    #[serde(default)]
    pub batch: Option<u32>,
}

impl RetentionConfig {
    /// The time between retention passes.
    pub fn every(&self) -> Duration {
        self.every.unwrap_or(Duration::from_secs(60))
    }

    /// The most jobs one transaction deletes.
    pub fn batch(&self) -> u32 {
        self.batch.unwrap_or(500).max(1)
    }
}
