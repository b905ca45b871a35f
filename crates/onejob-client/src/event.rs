//! [`Event`]: one entry of a job's append-only event log, and its [`EventKind`].

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

/// What happened to a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// The job was accepted under its key.
    Created,
    /// The same key and fingerprint came again; the existing job was answered.
    Replayed,
    /// The key came again with other params or another kind and was refused.
    KeyConflict,
    /// An attempt started (also failover, hedging and recovery attempts).
    AttemptStarted,
    /// An attempt's outcome became unknown.
    AttemptUnknown,
    /// An attempt reached a definite outcome.
    AttemptResolved,
    /// An attempt's result became the job's result.
    Won,
    /// An attempt finished after another won; its result was discarded.
    RaceLost,
    /// The next attempt moves to another provider.
    Failover,
    /// Failover was wanted but refused (no certified provider).
    FailoverRefused,
    /// A failed job was recovered into a new attempt.
    Recovered,
    /// The job was cancelled.
    Cancelled,
    /// An unknown attempt was re-sent under its same upstream key (the provider is
    /// certified to deduplicate by key).
    Resent,
    /// The job had no attempt budget left and was settled as failed.
    Exhausted,
    /// An event this client does not know (sent by a newer server).
    #[serde(other)]
    Other,
}

impl EventKind {
    /// The event's name on the wire.
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
            EventKind::Other => "other",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of a job's event log (`GET /v1/jobs/{id}/events`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Event {
    /// Position in the log.
    pub id: i64,
    /// What happened.
    pub kind: EventKind,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// The attempt it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_id: Option<Uuid>,
    /// Who did it (a worker, an API key's user, an operator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// Details (changed param paths, result size and hash, reasons, …).
    #[serde(default)]
    pub detail: Value,
}

/// One page of a job's event log (`GET /v1/jobs/{id}/events?after=&limit=`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EventPage {
    /// The job.
    pub job_id: Uuid,
    /// Oldest first.
    pub events: Vec<Event>,
    /// Where the next page starts (pass it as `after` to [`crate::Client::events_page`]);
    /// `None` on the last page.
    #[serde(default)]
    pub next_after: Option<i64>,
}
