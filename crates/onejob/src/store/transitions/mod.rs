//! The state changes of jobs and attempts, written once for every backend.
//!
//! [`Transitions`] is implemented for every [`Statements`] backend: start, acknowledge,
//! complete, fail, mark unknown, settle, cancel and recover each run in one write
//! transaction of the backend, read what they decide on after taking the job's lock, and
//! end with the conditional updates the database enforces (the unique indexes behind the
//! attempt guard, the compare-and-swap behind the one winner). The backends only say how
//! each statement is spelled. Intake is not here: each backend group-commits submissions
//! its own way (`postgres/intake.rs`, `sqlite/intake.rs`), around the rule written once in
//! [`NewJob::matches`](super::NewJob::matches).

mod attempts;
mod lifecycle;

use std::time::Duration;

use async_trait::async_trait;
use onejob_domain::Principal;
use serde_json::Value;
use uuid::Uuid;

use super::{
    Acknowledged, AttemptStart, CancelOutcome, Completion, FailOutcome, RecoverOutcome, Resolution,
    RetryPolicy, StartOutcome, StoreError, UnknownBy, Unsuccessful, statements::Statements,
};

/// The state changes every store makes the same way (see the module doc).
#[async_trait]
pub trait Transitions: Send + Sync {
    /// Starts an attempt if the attempt guard allows it, in one atomic step: the job is due,
    /// its attempt count is the expected one and under `max_attempts`, no attempt of it is
    /// `starting` or `unknown`, and one is `running` exactly when this start is a hedge.
    /// The job becomes `running`; `attempt_started` (and `failover` when the provider changes)
    /// is logged.
    async fn start_attempt(&self, start: &AttemptStart) -> Result<StartOutcome, StoreError>;

    /// The provider acknowledged a `starting` attempt. Its task id (if any) is stored
    /// whatever the attempt's state. A `starting` attempt becomes `running` (with
    /// `hedge_after`, the job becomes due again for a hedge at that time), or `cancelled`
    /// if its job was cancelled meanwhile ([`Acknowledged::JobCancelled`]: the caller asks
    /// the provider to cancel). Any other state is [`Acknowledged::NotStarting`]: the
    /// attempt is no longer the caller's.
    async fn acknowledge_attempt(
        &self,
        attempt_id: Uuid,
        task_id: Option<&str>,
        hedge_after: Option<Duration>,
    ) -> Result<Acknowledged, StoreError>;

    /// Offers an attempt's validated output as the job's result. Exactly one attempt per job
    /// wins, by `UPDATE … WHERE id = $1 AND version = $2 AND completed_by IS NULL`; any
    /// other is `discarded` with a `race_lost` event recording only the payload's size and
    /// hash.
    async fn complete_attempt(
        &self,
        attempt_id: Uuid,
        output: &Value,
        by: &Resolution,
    ) -> Result<Completion, StoreError>;

    /// Records a definite failure (or cancellation). The job goes back to `pending` (due
    /// after the backoff) while its attempt budget lasts, else `failed`; it stays
    /// `running`/`unknown` while another attempt is open. An attempt of a cancelled job ends
    /// `cancelled`.
    async fn fail_attempt(
        &self,
        attempt_id: Uuid,
        end: Unsuccessful,
        error: &Value,
        retry: RetryPolicy,
        by: &Resolution,
    ) -> Result<FailOutcome, StoreError>;

    /// A live attempt's outcome became unknown (deadline, lost lease, shutdown): it blocks new
    /// attempts until resolved. `why` (`{"reason": …}`, with operator-only details under
    /// `internal`) becomes the attempt's error and its event's detail. If the job already
    /// has a winner (or was cancelled), the attempt is `discarded` instead. A rescuer
    /// ([`UnknownBy::Rescuer`]) acts only if the lease is still expired (or the deadline long
    /// past) when the update runs. Returns whether it became `unknown`.
    async fn mark_unknown(
        &self,
        attempt_id: Uuid,
        why: &Value,
        by: UnknownBy,
    ) -> Result<bool, StoreError>;

    /// Settles a `pending` job with no open attempt and no attempt budget left under
    /// `max_attempts` (lowered since it last ran) as `failed`, with an `exhausted` event
    /// saying why. False if the job is not in that situation.
    async fn settle_exhausted(&self, job_id: Uuid, max_attempts: u32) -> Result<bool, StoreError>;

    /// Cancels the owner's job unless it already succeeded or failed: its `unknown` attempts
    /// become `cancelled`, and its live attempts are returned so their provider can be asked
    /// to cancel. Cancelling a cancelled job again answers it unchanged. `None` if the job is
    /// not the owner's.
    async fn cancel_job(
        &self,
        owner: &Principal,
        job_id: Uuid,
        actor: &str,
    ) -> Result<Option<CancelOutcome>, StoreError>;

    /// Controlled recovery of the owner's `failed` job: back to `pending`, due now, version
    /// bumped, with a fresh attempt budget; a `recovered` event names the actor.
    async fn recover_job(
        &self,
        owner: &Principal,
        job_id: Uuid,
        actor: &str,
    ) -> Result<Option<RecoverOutcome>, StoreError>;
}

#[async_trait]
impl<S: Statements> Transitions for S {
    async fn start_attempt(&self, start: &AttemptStart) -> Result<StartOutcome, StoreError> {
        attempts::start(self, start).await
    }

    async fn acknowledge_attempt(
        &self,
        attempt_id: Uuid,
        task_id: Option<&str>,
        hedge_after: Option<Duration>,
    ) -> Result<Acknowledged, StoreError> {
        attempts::acknowledge(self, attempt_id, task_id, hedge_after).await
    }

    async fn complete_attempt(
        &self,
        attempt_id: Uuid,
        output: &Value,
        by: &Resolution,
    ) -> Result<Completion, StoreError> {
        attempts::complete(self, attempt_id, output, by).await
    }

    async fn fail_attempt(
        &self,
        attempt_id: Uuid,
        end: Unsuccessful,
        error: &Value,
        retry: RetryPolicy,
        by: &Resolution,
    ) -> Result<FailOutcome, StoreError> {
        attempts::fail(self, attempt_id, end, error, retry, by).await
    }

    async fn mark_unknown(
        &self,
        attempt_id: Uuid,
        why: &Value,
        by: UnknownBy,
    ) -> Result<bool, StoreError> {
        attempts::mark_unknown(self, attempt_id, why, by).await
    }

    async fn settle_exhausted(&self, job_id: Uuid, max_attempts: u32) -> Result<bool, StoreError> {
        attempts::settle_exhausted(self, job_id, max_attempts).await
    }

    async fn cancel_job(
        &self,
        owner: &Principal,
        job_id: Uuid,
        actor: &str,
    ) -> Result<Option<CancelOutcome>, StoreError> {
        lifecycle::cancel(self, owner, job_id, actor).await
    }

    async fn recover_job(
        &self,
        owner: &Principal,
        job_id: Uuid,
        actor: &str,
    ) -> Result<Option<RecoverOutcome>, StoreError> {
        lifecycle::recover(self, owner, job_id, actor).await
    }
}
