//! [`Job`]: one user intent as the server shows it, and its [`JobState`].

use std::{fmt, str::FromStr, time::Duration};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum JobState {
    /// Accepted; waiting for its (next) attempt.
    Pending,
    /// An attempt is in flight.
    Running,
    /// An attempt's outcome is not known (it timed out or its worker died); nothing else
    /// starts until it is resolved by proof or by an operator.
    Unknown,
    /// Finished with a result (terminal).
    Succeeded,
    /// Finished without one, its attempts used up (terminal; `retry` can recover it).
    Failed,
    /// Cancelled by its owner (terminal).
    Cancelled,
    /// A state this client does not know (sent by a newer server).
    #[serde(other)]
    Other,
}

impl JobState {
    /// The states a job ends in.
    pub const TERMINAL: [JobState; 3] =
        [JobState::Succeeded, JobState::Failed, JobState::Cancelled];

    /// The state's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Running => "running",
            JobState::Unknown => "unknown",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Other => "other",
        }
    }

    /// Whether a job in this state is finished (succeeded, failed or cancelled).
    pub fn is_terminal(self) -> bool {
        Self::TERMINAL.contains(&self)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job state name that is not one of the known states.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown job state {0:?}; states are pending, running, unknown, succeeded, failed, cancelled"
)]
pub struct UnknownJobState(pub String);

impl FromStr for JobState {
    type Err = UnknownJobState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            JobState::Pending,
            JobState::Running,
            JobState::Unknown,
            JobState::Succeeded,
            JobState::Failed,
            JobState::Cancelled,
        ]
        .into_iter()
        .find(|state| state.as_str() == s)
        .ok_or_else(|| UnknownJobState(s.to_owned()))
    }
}

/// A job: the server's job view (`GET /v1/jobs/{id}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Job {
    /// The job id.
    pub id: Uuid,
    /// Its kind (`chat.completion`, …).
    pub kind: String,
    /// Its state.
    pub state: JobState,
    /// When it was accepted.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// When it last changed.
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    /// How many attempts it has had.
    pub attempts: u32,
    /// While not finished: how long to wait before polling again, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_after_ms: Option<u64>,
    /// The winning result; only when succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why it failed; only when failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// The winning attempt; only when succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_by: Option<Uuid>,
}

impl Job {
    /// Whether the job is finished: a terminal state, or a state this client does not know
    /// that the server no longer asks to poll.
    pub fn is_finished(&self) -> bool {
        self.state.is_terminal() || (self.state == JobState::Other && self.poll_after_ms.is_none())
    }

    /// The server's advice on when to poll again, while the job is not finished.
    pub fn poll_after(&self) -> Option<Duration> {
        self.poll_after_ms.map(Duration::from_millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_from_a_newer_server_decodes_as_other_and_is_not_finished_while_polled() {
        let job: Job = serde_json::from_value(serde_json::json!({
            "id": "01a22a98-4599-75a0-b1cb-7cdbcd0f53a7", "kind": "k", "state": "paused",
            "created_at": "2026-11-30T03:55:52.09Z", "updated_at": "2026-11-30T03:55:52.09Z",
            "attempts": 0, "poll_after_ms": 500, "future_field": true
        }))
        .unwrap();
        assert_eq!(job.state, JobState::Other);
        assert!(!job.is_finished());
        assert_eq!(job.poll_after(), Some(Duration::from_millis(500)));
    }

    #[test]
    fn states_parse_from_their_names_only() {
        for state in [
            "pending",
            "running",
            "unknown",
            "succeeded",
            "failed",
            "cancelled",
        ] {
            assert_eq!(state.parse::<JobState>().unwrap().as_str(), state);
        }
        assert!("other".parse::<JobState>().is_err());
        assert!(JobState::Cancelled.is_terminal() && !JobState::Unknown.is_terminal());
    }
}
