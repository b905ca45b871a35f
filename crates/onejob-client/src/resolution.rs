//! Operator resolution of an `unknown` attempt: the [`Resolution`] sent to
//! `POST /v1/attempts/{id}/resolve` and the [`Resolved`] answer.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Attempt, Job};

/// What the operator found happened upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The upstream did the work; the resolution carries its result.
    Succeeded,
    /// The upstream did not do it.
    Failed,
    /// It was cancelled upstream.
    Cancelled,
}

/// An operator's resolution of an unknown attempt.
///
/// ```
/// use onejob_client::Resolution;
///
/// let resolution = Resolution::failed().reason("the vendor says it never ran");
/// # let _ = resolution;
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resolution {
    outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

impl Resolution {
    /// The upstream did the work and produced `result` (validated by the server against the
    /// kind's output schema, then offered like any result: it may win or be discarded).
    pub fn succeeded(result: Value) -> Self {
        Resolution {
            outcome: Outcome::Succeeded,
            result: Some(result),
            reason: None,
        }
    }

    /// The upstream did not do the work; the job may go on to its next attempt.
    pub fn failed() -> Self {
        Resolution {
            outcome: Outcome::Failed,
            result: None,
            reason: None,
        }
    }

    /// The work was cancelled upstream.
    pub fn cancelled() -> Self {
        Resolution {
            outcome: Outcome::Cancelled,
            result: None,
            reason: None,
        }
    }

    /// Why, for the event log.
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// The outcome it records.
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }
}

/// What a resolution did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ResolveVerdict {
    /// The claimed result won: it is the job's result.
    Won,
    /// The claimed result came after another attempt won; it was discarded.
    Discarded,
    /// The claimed result did not hold up; the attempt was recorded as failed.
    Failed,
    /// The failure or cancellation was recorded.
    Recorded,
    /// A verdict this client does not know (sent by a newer server).
    #[serde(other)]
    Other,
}

impl ResolveVerdict {
    /// The verdict's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ResolveVerdict::Won => "won",
            ResolveVerdict::Discarded => "discarded",
            ResolveVerdict::Failed => "failed",
            ResolveVerdict::Recorded => "recorded",
            ResolveVerdict::Other => "other",
        }
    }
}

impl fmt::Display for ResolveVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The answer to a resolution: the verdict, and the attempt and job after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Resolved {
    /// What the resolution did.
    pub outcome: ResolveVerdict,
    /// The attempt after it.
    pub attempt: Option<Attempt>,
    /// The job after it.
    pub job: Option<Job>,
}
