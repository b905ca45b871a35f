//! The names of the entries in a job's append-only event log (docs/design.md §3).

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

/// What happened to a job. Every state transition appends one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// The job was accepted under its key.
    Created,
    /// The same key and fingerprint came again; the existing job was answered.
    Replayed,
    /// The key came again with another fingerprint or kind and was refused.
    KeyConflict,
    /// An attempt started (also for failover, hedging and recovery attempts).
    AttemptStarted,
    /// An attempt's outcome became unknown (deadline or lost lease).
    AttemptUnknown,
    /// An attempt reached a definite outcome (provider answer, reconciliation, operator).
    AttemptResolved,
    /// An attempt's result won the compare-and-swap and became the job's result.
    Won,
    /// An attempt finished after another won; its result was discarded.
    RaceLost,
    /// The next attempt moves to another provider.
    Failover,
    /// Failover was wanted but refused (no certified provider); the reason is in the detail.
    FailoverRefused,
    /// A failed job was recovered into a new attempt.
    Recovered,
    /// The job was cancelled.
    Cancelled,
    /// The reconciler re-sent an unknown attempt under its same upstream key, to a provider
    /// whose certificate proves it deduplicates by key.
    Resent,
    /// The job had no attempt budget left (its kind's `max_attempts` was lowered) and was
    /// settled as failed.
    Exhausted,
}

impl EventKind {
    /// Every kind of event.
    pub const ALL: [EventKind; 14] = [
        EventKind::Created,
        EventKind::Replayed,
        EventKind::KeyConflict,
        EventKind::AttemptStarted,
        EventKind::AttemptUnknown,
        EventKind::AttemptResolved,
        EventKind::Won,
        EventKind::RaceLost,
        EventKind::Failover,
        EventKind::FailoverRefused,
        EventKind::Recovered,
        EventKind::Cancelled,
        EventKind::Resent,
        EventKind::Exhausted,
    ];

    /// The event's name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Created => "created",
            EventKind::Replayed => "replayed",
            EventKind::KeyConflict => "key_conflict",
            EventKind::AttemptStarted => "attempt_started",
            EventKind::AttemptUnknown => "attempt_unknown",
            EventKind::AttemptResolved => "attempt_resolved",
            EventKind::Won => "won",
            EventKind::RaceLost => "race_lost",
            EventKind::Failover => "failover",
            EventKind::FailoverRefused => "failover_refused",
            EventKind::Recovered => "recovered",
            EventKind::Cancelled => "cancelled",
            EventKind::Resent => "resent",
            EventKind::Exhausted => "exhausted",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An event name that is not one of [`EventKind::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown event kind {0:?}")]
pub struct UnknownEventKind(pub String);

impl FromStr for EventKind {
    type Err = UnknownEventKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == s)
            .ok_or_else(|| UnknownEventKind(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_serde_and_round_trip() {
        for kind in EventKind::ALL {
            assert_eq!(kind.as_str().parse::<EventKind>(), Ok(kind));
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                serde_json::Value::String(kind.as_str().into())
            );
        }
    }
}
