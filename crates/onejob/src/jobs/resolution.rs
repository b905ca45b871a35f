//! An operator's out-of-band resolution of an `unknown` attempt: the one code path behind
//! `POST /v1/attempts/{id}/resolve` and the dashboard's resolve form.
//!
//! Only an `unknown` attempt of a job in the operator's tenant is resolved. A claimed success
//! carries the attempt's result, validated like any output ([`crate::outcome::offer`]) and
//! offered through the same compare-and-swap as a live result, so it may still lose to an
//! attempt that won meanwhile; a failure or cancellation is recorded like a live one, and the
//! job moves on to its next attempt while its budget lasts. Every resolution is an event
//! naming the operator. Whether the caller is an operator is the adapter's to check: this
//! module acts for the operator it is given.

use onejob_domain::AttemptState;
use serde_json::{Value, json};
use uuid::Uuid;

use super::Jobs;
use crate::{
    kind::FieldError,
    outcome::{self, Offered},
    store::{AttemptRecord, FailOutcome, JobRecord, Resolution, StoreError, Unsuccessful},
};

/// What an operator established about an unknown attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The upstream did the work; the resolution carries its output.
    Succeeded,
    /// The upstream did not do it.
    Failed,
    /// It was cancelled upstream.
    Cancelled,
}

/// An operator's resolution of one attempt, as asked.
#[derive(Debug, Clone)]
pub struct OutOfBand {
    /// What happened upstream.
    pub outcome: Outcome,
    /// The attempt's output: required for [`Outcome::Succeeded`], refused otherwise.
    pub result: Option<Value>,
    /// Why, for the event log (a default note when `None`).
    pub reason: Option<String>,
}

/// What a resolution did to the attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The claimed result is the job's result.
    Won,
    /// Another attempt won (or the job was cancelled) meanwhile; the result was discarded.
    Discarded,
    /// The claimed result is no real artifact; the attempt was recorded as failed.
    Failed,
    /// The failure or cancellation was recorded.
    Recorded,
}

impl Verdict {
    /// `won`, `discarded`, `failed` or `recorded`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Won => "won",
            Verdict::Discarded => "discarded",
            Verdict::Failed => "failed",
            Verdict::Recorded => "recorded",
        }
    }
}

/// A resolution that was done.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// What it did.
    pub verdict: Verdict,
    /// The attempt now.
    pub attempt: Option<AttemptRecord>,
    /// Its job now.
    pub job: Option<JobRecord>,
}

/// Why an attempt was not resolved. Nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// No attempt with this id belongs to a job of the operator's tenant.
    #[error("no such attempt")]
    NotFound,
    /// The attempt is not `unknown` (any more): only an unknown attempt is resolved.
    #[error("only an unknown attempt is resolved out of band; this one is {state}")]
    NotUnknown {
        /// The state it is in.
        state: AttemptState,
    },
    /// The attempt's job is of a kind that is no longer configured.
    #[error("the job's kind {kind:?} is no longer configured")]
    KindGone {
        /// The job's kind.
        kind: String,
    },
    /// A succeeded resolution came without the attempt's result.
    #[error("a succeeded resolution carries the attempt's `result`")]
    ResultMissing,
    /// A failed or cancelled resolution came with a result.
    #[error("only a succeeded resolution carries a `result`")]
    ResultUnexpected,
    /// The claimed result fails the kind's output schema.
    #[error("the result does not pass the kind's output schema; nothing was changed")]
    ResultInvalid(Vec<FieldError>),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Jobs {
    /// Resolves the `unknown` attempt `attempt_id` of a job in `tenant`, for the operator
    /// `actor` (named by the resolution's event).
    pub async fn resolve(
        &self,
        tenant: &str,
        actor: &str,
        attempt_id: Uuid,
        asked: OutOfBand,
    ) -> Result<Resolved, ResolveError> {
        let (attempt, job) = self
            .store
            .attempt_in_tenant(tenant, attempt_id)
            .await?
            .ok_or(ResolveError::NotFound)?;
        if attempt.state != AttemptState::Unknown {
            return Err(ResolveError::NotUnknown {
                state: attempt.state,
            });
        }
        let kind = self
            .kinds
            .get(&job.kind)
            .cloned()
            .ok_or_else(|| ResolveError::KindGone {
                kind: job.kind.clone(),
            })?;
        let note = asked
            .reason
            .unwrap_or_else(|| "resolved by an operator".to_owned());
        let by = Resolution::of_unknown(actor, note.clone());
        let verdict = match asked.outcome {
            Outcome::Succeeded => {
                let result = asked.result.ok_or(ResolveError::ResultMissing)?;
                kind.check_output(&result)
                    .map_err(ResolveError::ResultInvalid)?;
                match outcome::offer(&*self.store, &kind, &attempt, &result, &by).await? {
                    Offered::Won => Verdict::Won,
                    Offered::Discarded => Verdict::Discarded,
                    Offered::NotUnknown(state) => return Err(ResolveError::NotUnknown { state }),
                    Offered::Invalid(_) => Verdict::Failed,
                }
            }
            Outcome::Failed | Outcome::Cancelled => {
                if asked.result.is_some() {
                    return Err(ResolveError::ResultUnexpected);
                }
                let end = match asked.outcome {
                    Outcome::Cancelled => Unsuccessful::Cancelled,
                    _ => Unsuccessful::Failed,
                };
                let error = json!({ "message": note, "resolved_by": actor });
                match outcome::fail(&*self.store, &kind, &attempt, end, error, &by).await? {
                    FailOutcome::Recorded(_) => Verdict::Recorded,
                    FailOutcome::NotOpen(state) => return Err(ResolveError::NotUnknown { state }),
                }
            }
        };
        self.watch.changed(job.id);
        let attempt = self
            .store
            .job_attempts(job.id)
            .await?
            .into_iter()
            .find(|a| a.id == attempt_id);
        let job = self.store.job(&job.owner, job.id).await?;
        Ok(Resolved {
            verdict,
            attempt,
            job,
        })
    }
}
