//! [`Attempt`]: one try at running a job on a provider, and its [`AttemptState`].

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

/// Where an attempt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AttemptState {
    /// Being sent to the provider.
    Starting,
    /// Acknowledged by the provider, not finished.
    Running,
    /// Its outcome is not known (timed out, or its worker died).
    Unknown,
    /// Finished with a result (which may or may not have won).
    Succeeded,
    /// Finished without a result.
    Failed,
    /// Cancelled.
    Cancelled,
    /// Finished after another attempt won; its result was discarded.
    Discarded,
    /// A state this client does not know (sent by a newer server).
    #[serde(other)]
    Other,
}

impl AttemptState {
    /// The state's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptState::Starting => "starting",
            AttemptState::Running => "running",
            AttemptState::Unknown => "unknown",
            AttemptState::Succeeded => "succeeded",
            AttemptState::Failed => "failed",
            AttemptState::Cancelled => "cancelled",
            AttemptState::Discarded => "discarded",
            AttemptState::Other => "other",
        }
    }
}

impl fmt::Display for AttemptState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One attempt, as `GET /v1/jobs/{id}/attempts` and `GET /v1/attempts` show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Attempt {
    /// The attempt id.
    pub id: Uuid,
    /// Its job.
    pub job_id: Uuid,
    /// 1, 2, … within the job.
    pub number: u32,
    /// The provider it went to.
    pub provider: String,
    /// Its state.
    pub state: AttemptState,
    /// Whether it was a hedge beside a running attempt.
    #[serde(default)]
    pub hedge: bool,
    /// The provider's task id, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The worker that ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// When it started.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// When the provider acknowledged it.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub acknowledged_at: Option<OffsetDateTime>,
    /// When its outcome becomes unknown without an answer.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub deadline_at: Option<OffsetDateTime>,
    /// When it reached a final state.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub finished_at: Option<OffsetDateTime>,
    /// Why it failed or is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}
