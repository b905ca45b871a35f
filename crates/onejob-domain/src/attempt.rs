//! The attempt state machine.
//!
//! ```text
//! starting ──▶ running ──▶ succeeded | failed | cancelled
//!     │           │
//!     └─────┬─────┘
//!           ▼
//!        unknown ──▶ succeeded | failed | cancelled   (reconciliation or an operator)
//!
//! any live or unknown attempt whose result arrives after another attempt won ──▶ discarded
//! ```
//!
//! `starting` means the request is being sent; `running` that the provider acknowledged it
//! (with a task id where the API gives one). A deadline or a lost lease makes an attempt
//! `unknown`, never `failed`: the upstream may still be working.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

/// The state of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptState {
    /// The request to the provider is being sent.
    Starting,
    /// The provider acknowledged the request and it is inside its deadline.
    Running,
    /// Deadline passed or its worker died: the provider may or may not have done the work.
    Unknown,
    /// Its output passed validation and won the job's result.
    Succeeded,
    /// It definitely failed (the provider said so, or its output was not a real artifact).
    Failed,
    /// Cancelled (by the job's cancellation, or resolved so by an operator).
    Cancelled,
    /// It finished after another attempt won; its result was thrown away.
    Discarded,
}

impl AttemptState {
    /// Every state, in lifecycle order.
    pub const ALL: [AttemptState; 7] = [
        AttemptState::Starting,
        AttemptState::Running,
        AttemptState::Unknown,
        AttemptState::Succeeded,
        AttemptState::Failed,
        AttemptState::Cancelled,
        AttemptState::Discarded,
    ];

    /// The state's name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptState::Starting => "starting",
            AttemptState::Running => "running",
            AttemptState::Unknown => "unknown",
            AttemptState::Succeeded => "succeeded",
            AttemptState::Failed => "failed",
            AttemptState::Cancelled => "cancelled",
            AttemptState::Discarded => "discarded",
        }
    }

    /// `starting` or `running`: a worker holds it and heartbeats its lease.
    pub fn is_live(self) -> bool {
        matches!(self, AttemptState::Starting | AttemptState::Running)
    }

    /// `starting` or `unknown`: while one exists, no other attempt of the job may start.
    pub fn blocks_new_attempts(self) -> bool {
        matches!(self, AttemptState::Starting | AttemptState::Unknown)
    }

    /// True for the states nothing leaves.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            AttemptState::Succeeded
                | AttemptState::Failed
                | AttemptState::Cancelled
                | AttemptState::Discarded
        )
    }

    /// Whether the attempt may move from `self` to `next`.
    pub fn can_become(self, next: AttemptState) -> bool {
        use AttemptState::*;
        match self {
            Starting => next != Starting,
            Running => !matches!(next, Starting | Running),
            Unknown => matches!(next, Succeeded | Failed | Cancelled | Discarded),
            Succeeded | Failed | Cancelled | Discarded => false,
        }
    }
}

impl fmt::Display for AttemptState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A state name that is not one of [`AttemptState::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown attempt state {0:?}")]
pub struct UnknownAttemptState(pub String);

impl FromStr for AttemptState {
    type Err = UnknownAttemptState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AttemptState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownAttemptState(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_is_left_only_by_proof() {
        use AttemptState::*;
        assert!(!Unknown.can_become(Running));
        assert!(!Unknown.can_become(Starting));
        for next in [Succeeded, Failed, Cancelled, Discarded] {
            assert!(Unknown.can_become(next));
        }
    }

    #[test]
    fn a_timeout_is_never_a_failure_by_itself() {
        assert!(AttemptState::Running.can_become(AttemptState::Unknown));
        assert!(AttemptState::Starting.can_become(AttemptState::Unknown));
        assert!(AttemptState::Unknown.blocks_new_attempts());
        assert!(AttemptState::Starting.blocks_new_attempts());
        assert!(!AttemptState::Running.blocks_new_attempts());
    }

    #[test]
    fn terminal_states_are_final() {
        for from in AttemptState::ALL.into_iter().filter(|s| s.is_terminal()) {
            for next in AttemptState::ALL {
                assert!(!from.can_become(next), "{from} -> {next}");
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for state in AttemptState::ALL {
            assert_eq!(state.as_str().parse::<AttemptState>(), Ok(state));
        }
    }
}
