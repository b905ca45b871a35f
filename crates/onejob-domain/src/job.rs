//! The job state machine.
//!
//! ```text
//! pending ──▶ running ──▶ succeeded | failed | cancelled
//!    ▲           │  ▲
//!    │           ▼  │
//!    └──────── unknown        failed ──(explicit recovery)──▶ pending
//! ```
//!
//! A job is `unknown` while its live attempt's outcome is unknown; it goes back to `pending`
//! when an attempt definitely failed and another one may follow (failover), and from `failed`
//! to `pending` only through `POST /v1/jobs/{id}/retry`. A `pending` job also fails outright
//! when its attempt budget is spent before another attempt starts, and is cancelled before
//! it starts. `succeeded` and `cancelled` are final. The database refuses any other change
//! of state (its triggers list the same pairs; the store suite compares them).

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

use crate::AttemptState;

/// The state of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Accepted; waiting for an attempt to start.
    Pending,
    /// At least one attempt is starting or running.
    Running,
    /// The live attempt's outcome is unknown (deadline passed or its worker died).
    Unknown,
    /// One attempt's result won and is the job's result.
    Succeeded,
    /// No attempt succeeded and none may follow.
    Failed,
    /// Cancelled by its owner.
    Cancelled,
}

impl JobState {
    /// Every state, in lifecycle order.
    pub const ALL: [JobState; 6] = [
        JobState::Pending,
        JobState::Running,
        JobState::Unknown,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
    ];

    /// The state's name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Running => "running",
            JobState::Unknown => "unknown",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    /// True for `succeeded`, `failed` and `cancelled`: no attempt runs for it any more
    /// (`failed` can still be recovered explicitly).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }

    /// Whether the job may move from `self` to `next`.
    pub fn can_become(self, next: JobState) -> bool {
        use JobState::*;
        matches!(
            (self, next),
            (Pending, Running | Cancelled | Failed)
                | (
                    Running,
                    Running | Pending | Unknown | Succeeded | Failed | Cancelled
                )
                | (
                    Unknown,
                    Running | Pending | Unknown | Succeeded | Failed | Cancelled
                )
                | (Failed, Pending)
        )
    }
}

impl JobState {
    /// The state of a job that no attempt has won and nobody cancelled, derived from its
    /// attempts: `running` while any attempt is live, else `unknown` while any is unknown,
    /// else `pending` if another attempt may follow, else `failed`.
    pub fn settle(attempts: impl IntoIterator<Item = AttemptState>, may_retry: bool) -> JobState {
        let (mut live, mut unknown) = (false, false);
        for state in attempts {
            live |= state.is_live();
            unknown |= state == AttemptState::Unknown;
        }
        if live {
            JobState::Running
        } else if unknown {
            JobState::Unknown
        } else if may_retry {
            JobState::Pending
        } else {
            JobState::Failed
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A state name that is not one of [`JobState::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown job state {0:?}")]
pub struct UnknownJobState(pub String);

impl FromStr for JobState {
    type Err = UnknownJobState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownJobState(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_states_go_nowhere_except_recovery() {
        for next in JobState::ALL {
            assert!(!JobState::Succeeded.can_become(next));
            assert!(!JobState::Cancelled.can_become(next));
            assert_eq!(JobState::Failed.can_become(next), next == JobState::Pending);
        }
    }

    #[test]
    fn pending_only_starts_cancels_or_runs_out_of_attempts() {
        let allowed: Vec<_> = JobState::ALL
            .into_iter()
            .filter(|n| JobState::Pending.can_become(*n))
            .collect();
        assert_eq!(
            allowed,
            vec![JobState::Running, JobState::Failed, JobState::Cancelled]
        );
    }

    #[test]
    fn settle_prefers_live_then_unknown_then_retry() {
        use AttemptState::*;
        assert_eq!(
            JobState::settle([Failed, Running], false),
            JobState::Running
        );
        assert_eq!(
            JobState::settle([Unknown, Starting], false),
            JobState::Running
        );
        assert_eq!(JobState::settle([Failed, Unknown], true), JobState::Unknown);
        assert_eq!(JobState::settle([Failed], true), JobState::Pending);
        assert_eq!(
            JobState::settle([Failed, Cancelled], false),
            JobState::Failed
        );
        assert_eq!(JobState::settle([], true), JobState::Pending);
    }

    #[test]
    fn names_round_trip() {
        for state in JobState::ALL {
            assert_eq!(state.as_str().parse::<JobState>(), Ok(state));
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::Value::String(state.as_str().into())
            );
        }
        assert!("done".parse::<JobState>().is_err());
    }
}
