//! The state changes of jobs and attempts, written once for every backend.
//!
//! [`Transitions`] is implemented for every [`Backend`]: start, acknowledge, complete, fail,
//! mark unknown, settle, cancel and recover each run in one write transaction of the
//! backend (its statements in `statements.rs`), and end with the conditional updates the
//! database enforces. The backends only say how each statement is spelled. Intake is not here: each backend
//! group-commits submissions its own way (`postgres/intake.rs`, `sqlite/intake.rs`), around
//! the rule written once in [`NewJob::matches`](super::NewJob::matches).
//!
//! Every rule takes the job's lock before it reads the attempt it acts on: an operator or
//! the reconciler resolving that attempt holds the same lock, so the state read is the one
//! the update acts on. A start takes the lock without waiting (PostgreSQL's `SKIP LOCKED`):
//! two starters never interleave, and the second, once the first committed, sees its
//! `starting` attempt and is refused. The partial unique index `attempts_one_starting` and
//! `UNIQUE (job_id, number)` back the lock structurally; the result's compare-and-swap is
//! the one conditional update that lets exactly one attempt win. Cancellation and recovery
//! lock the job too, so they serialize with starts and completions.

use std::{collections::HashSet, time::Duration};

use async_trait::async_trait;
use onejob_domain::{AttemptState, EventKind, JobState, Principal};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{
    Acknowledged, AttemptRecord, AttemptStart, CancelOutcome, Completion, FailOutcome,
    FirstAttempts, JobRecord, NewEvent, RecoverOutcome, Resolution, RetryPolicy, StartOutcome,
    StartRefusal, StoreError, UnknownBy, Unsuccessful,
    backend::{Arg, Backend, Tx, release},
    grouped::{Change, Writer},
    payload_digest,
    records::{Exhausted, sibling_discarded, storable, with_member, within_budget},
    statements::{JobHead, Swap},
};

/// The state changes every store makes the same way (see the module doc).
mod acknowledgement;
mod offer;

pub(crate) use acknowledgement::Ack;
pub(crate) use offer::{Offer, OnlyAttempt};

#[async_trait]
pub trait Transitions: Send + Sync {
    /// Starts an attempt if the attempt guard allows it, in one atomic step: the job is due,
    /// its attempt count is the expected one and under `max_attempts`, no attempt of it is
    /// `starting` or `unknown`, and one is `running` exactly when this start is a hedge.
    /// The job becomes `running`; `attempt_started` (and `failover` when the provider changes)
    /// is logged.
    async fn start_attempt(&self, start: &AttemptStart) -> Result<StartOutcome, StoreError>;

    /// Starts the first attempt of up to `batch.limit` due jobs that never had one, each on
    /// its kind's primary provider, under the same guard as [`Transitions::start_attempt`]:
    /// each job's lock (skipped when another transaction holds it), the job `pending`, due
    /// and without attempts, the attempt numbered 1 (`UNIQUE (job_id, number)`,
    /// `attempts_one_starting`). The jobs become `running` with their `attempt_started`
    /// events, all committed together. Returns each job, as it is after the start, with its
    /// attempt.
    async fn start_first_attempts(
        &self,
        batch: &FirstAttempts,
    ) -> Result<Vec<(JobRecord, AttemptRecord)>, StoreError>;

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

    /// [`Transitions::complete_attempt`] of an attempt whose job the caller knows, by its id
    /// and tenant (a worker holds the job it runs): a completion made alone does not look
    /// the job up first. (An attempt's job never changes; a wrong one is refused by the
    /// database, the winner being one of the job's own attempts.)
    async fn complete_attempt_of(
        &self,
        job: (Uuid, &str),
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
impl<S: Backend> Transitions for S {
    async fn start_attempt(&self, start: &AttemptStart) -> Result<StartOutcome, StoreError> {
        let mut tx = self.begin().await?;
        tx.remember(start.job_id, self.tenant_of(start.job_id));
        let Some((job, due)) = tx.lock_due_job(start.job_id).await? else {
            let exists = tx.job_exists(start.job_id).await?;
            let refusal = if exists {
                StartRefusal::Busy
            } else {
                StartRefusal::NotFound
            };
            return release(tx, StartOutcome::Refused(refusal)).await;
        };
        if job.state.is_terminal() || !due {
            return release(tx, StartOutcome::Refused(StartRefusal::NotDue(job.state))).await;
        }
        if job.attempts != start.expected_attempts {
            return release(tx, StartOutcome::Refused(StartRefusal::Stale)).await;
        }
        if !within_budget(job.attempts, job.recoveries, start.max_attempts) {
            return release(tx, StartOutcome::Refused(StartRefusal::Exhausted)).await;
        }
        let open = tx.open_attempts(start.job_id).await?;
        if let Some(&(attempt_id, state)) = open.iter().find(|(_, s)| s.blocks_new_attempts()) {
            let refusal = StartRefusal::Blocked { attempt_id, state };
            return release(tx, StartOutcome::Refused(refusal)).await;
        }
        if open.is_empty() == start.hedge {
            return release(tx, StartOutcome::Refused(StartRefusal::NotHedgeable)).await;
        }
        let previous = tx.last_provider(start.job_id).await?;
        let attempt = tx.insert_attempt(start, job.attempts + 1).await?;
        tx.mark_job_started(start.job_id).await?;
        if let Some(from) = previous.filter(|p| !start.hedge && *p != start.provider) {
            let detail = json!({ "from": from, "to": start.provider });
            let failover = event(start.job_id, attempt.id, EventKind::Failover, detail);
            tx.insert_event(&failover).await?;
        }
        tx.insert_event(&started_event(&attempt)).await?;
        let tenant = tx.job_tenant(start.job_id).await?;
        tx.commit().await?;
        self.note_tenant(start.job_id, &tenant);
        self.note_tenant(attempt.id, &tenant);
        Ok(StartOutcome::Started(Box::new(attempt)))
    }

    async fn start_first_attempts(
        &self,
        batch: &FirstAttempts,
    ) -> Result<Vec<(JobRecord, AttemptRecord)>, StoreError> {
        if batch.limit == 0 || batch.kinds.is_empty() {
            return Ok(Vec::new());
        }
        self.start_first(batch).await
    }

    async fn acknowledge_attempt(
        &self,
        attempt_id: Uuid,
        task_id: Option<&str>,
        hedge_after: Option<Duration>,
    ) -> Result<Acknowledged, StoreError> {
        let ack = Ack {
            tenant: self.tenant_of(attempt_id),
            attempt_id,
            task_id: task_id.map(str::to_owned),
            hedge_after,
        };
        self.acks().submit(ack).await
    }

    async fn complete_attempt(
        &self,
        attempt_id: Uuid,
        output: &Value,
        by: &Resolution,
    ) -> Result<Completion, StoreError> {
        let offer = Offer {
            tenant: self.tenant_of(attempt_id),
            job_id: None,
            attempt_id,
            output: output.clone(),
            by: by.clone(),
        };
        self.offers().submit(offer).await
    }

    async fn complete_attempt_of(
        &self,
        (job_id, tenant): (Uuid, &str),
        attempt_id: Uuid,
        output: &Value,
        by: &Resolution,
    ) -> Result<Completion, StoreError> {
        let offer = Offer {
            tenant: Some(tenant.to_owned()),
            job_id: Some(job_id),
            attempt_id,
            output: output.clone(),
            by: by.clone(),
        };
        self.offers().submit(offer).await
    }

    async fn fail_attempt(
        &self,
        attempt_id: Uuid,
        end: Unsuccessful,
        error: &Value,
        retry: RetryPolicy,
        by: &Resolution,
    ) -> Result<FailOutcome, StoreError> {
        let error = storable(error);
        let mut tx = self.begin().await?;
        tx.remember(attempt_id, self.tenant_of(attempt_id));
        let job_id = job_of::<S>(&mut tx, attempt_id).await?;
        let job = locked::<S>(&mut tx, job_id).await?;
        let attempt_state = tx.attempt_state(attempt_id).await?;
        if !by.may_end(attempt_state) {
            return release(tx, FailOutcome::NotOpen(attempt_state)).await;
        }
        // An attempt of a cancelled job ends cancelled, whatever its provider said.
        let end = if job.state == JobState::Cancelled {
            Unsuccessful::Cancelled
        } else {
            end
        };
        let end_state = end.state();
        tx.end_attempt(attempt_id, end_state, &error, end.spends_key())
            .await?;
        let detail = json!({ "outcome": end_state, "error": &*error, "note": by.note });
        let resolved = by.event(job_id, attempt_id, EventKind::AttemptResolved, detail);
        tx.insert_event(&resolved).await?;
        let state = settle_job::<S>(&mut tx, &job, job_id, Some(retry), Some(&error)).await?;
        tx.commit().await?;
        if state == JobState::Pending {
            self.dispatch_changed();
        }
        Ok(FailOutcome::Recorded(state))
    }

    async fn mark_unknown(
        &self,
        attempt_id: Uuid,
        why: &Value,
        by: UnknownBy,
    ) -> Result<bool, StoreError> {
        let why = storable(why);
        let mut tx = self.begin().await?;
        tx.remember(attempt_id, self.tenant_of(attempt_id));
        let job_id = job_of::<S>(&mut tx, attempt_id).await?;
        let job = locked::<S>(&mut tx, job_id).await?;
        // A rescuer acts only on a lease that is still expired now: a renewal that got the row
        // first (or the attempt's own worker) keeps it.
        let grace = match by {
            UnknownBy::Worker => None,
            UnknownBy::Rescuer { grace } => Some(grace),
        };
        if job.completed_by.is_some() || job.state == JobState::Cancelled {
            // The job is settled: this attempt's outcome no longer matters to it.
            let error = with_member(&why, "job_state", json!(job.state));
            if tx.discard_live(attempt_id, &error, grace).await? {
                let detail = with_member(&why, "outcome", json!("discarded"));
                let detail = with_member(&detail, "job_state", json!(job.state));
                let resolved = event(job_id, attempt_id, EventKind::AttemptResolved, detail);
                tx.insert_event(&resolved).await?;
            }
            tx.commit().await?;
            return Ok(false);
        }
        if !tx.make_unknown(attempt_id, &why, grace).await? {
            return release(tx, false).await;
        }
        let unknown = event(
            job_id,
            attempt_id,
            EventKind::AttemptUnknown,
            why.into_owned(),
        );
        tx.insert_event(&unknown).await?;
        settle_job::<S>(&mut tx, &job, job_id, None, None).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn settle_exhausted(&self, job_id: Uuid, max_attempts: u32) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        tx.remember(job_id, self.tenant_of(job_id));
        let Some(job) = tx.lock_job(job_id).await? else {
            return release(tx, false).await;
        };
        let open = tx.open_attempts(job_id).await?;
        if job.state != JobState::Pending
            || !open.is_empty()
            || within_budget(job.attempts, job.recoveries, max_attempts)
        {
            return release(tx, false).await;
        }
        let exhausted = Exhausted::new(job_id, job.attempts, max_attempts);
        tx.fail_job(job_id, &exhausted.job_error()).await?;
        tx.insert_event(&exhausted.event()).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn cancel_job(
        &self,
        owner: &Principal,
        job_id: Uuid,
        actor: &str,
    ) -> Result<Option<CancelOutcome>, StoreError> {
        let mut tx = self.begin().await?;
        let Some(job) = tx.lock_owned_job(owner, job_id).await? else {
            return release(tx, None).await;
        };
        match job.state {
            JobState::Succeeded | JobState::Failed => {
                return release(tx, Some(CancelOutcome::Final(job))).await;
            }
            JobState::Cancelled => {
                let unchanged = CancelOutcome::Cancelled {
                    job,
                    live: Vec::new(),
                };
                return release(tx, Some(unchanged)).await;
            }
            JobState::Pending | JobState::Running | JobState::Unknown => {}
        }
        for attempt_id in tx.cancel_job_row(job_id).await? {
            let detail = json!({ "outcome": "cancelled", "note": "the job was cancelled" });
            let mut event = job_event(job_id, EventKind::AttemptResolved, actor, detail);
            event.attempt_id = Some(attempt_id);
            tx.insert_event(&event).await?;
        }
        let live = tx.live_attempts(job_id).await?;
        let detail = json!({ "from": job.state, "live_attempts": live.len() });
        tx.insert_event(&job_event(job_id, EventKind::Cancelled, actor, detail))
            .await?;
        let job = tx.reload_job(job_id).await?;
        tx.commit().await?;
        Ok(Some(CancelOutcome::Cancelled { job, live }))
    }

    async fn recover_job(
        &self,
        owner: &Principal,
        job_id: Uuid,
        actor: &str,
    ) -> Result<Option<RecoverOutcome>, StoreError> {
        let mut tx = self.begin().await?;
        let Some(job) = tx.lock_owned_job(owner, job_id).await? else {
            return release(tx, None).await;
        };
        if job.state != JobState::Failed {
            return release(tx, Some(RecoverOutcome::NotFailed(job))).await;
        }
        tx.recover_job_row(job_id).await?;
        let detail = json!({ "generation": job.recoveries + 1, "previous_error": job.error });
        tx.insert_event(&job_event(job_id, EventKind::Recovered, actor, detail))
            .await?;
        let job = tx.reload_job(job_id).await?;
        tx.commit().await?;
        self.dispatch_changed();
        Ok(Some(RecoverOutcome::Recovered(job)))
    }
}

/// Starts first attempts one job after another in one write transaction (see
/// [`Transitions::start_first_attempts`]): how a backend without a statement of its own for
/// the batch ([`Backend::start_first`]) does it. `due_first` is its statement that locks the
/// due jobs (`$1` limit, `$2` the kinds) and returns their `id`, `kind` and `tenant`.
pub(crate) async fn start_first_in_one_transaction<B: Backend>(
    store: &B,
    batch: &FirstAttempts,
    due_first: &'static str,
    kinds: Arg<'_>,
) -> Result<Vec<(JobRecord, AttemptRecord)>, StoreError> {
    let mut tx = store.begin().await?;
    let due = tx.all(due_first, &[Arg::from(batch.limit), kinds]).await?;
    let mut started = Vec::with_capacity(due.len());
    for row in &due {
        let job_id = B::uuid(row, "id")?;
        let kind = B::text(row, "kind")?;
        tx.remember(job_id, Some(B::text(row, "tenant")?));
        let Some(first) = batch.kinds.iter().find(|k| k.kind == kind) else {
            continue;
        };
        let start = AttemptStart {
            job_id,
            expected_attempts: 0,
            provider: first.provider.clone(),
            hedge: false,
            worker: batch.worker.clone(),
            lease: batch.lease,
            timeout: first.timeout,
            max_attempts: 1,
            upstream_key: format!("onejob:{job_id}"),
        };
        let attempt = tx.insert_attempt(&start, 1).await?;
        tx.mark_job_started(job_id).await?;
        tx.insert_event(&started_event(&attempt)).await?;
        started.push((tx.reload_job(job_id).await?, attempt));
    }
    tx.commit().await?;
    Ok(started)
}

/// The `attempt_started` event of a new attempt.
fn started_event(attempt: &AttemptRecord) -> NewEvent {
    let detail =
        json!({ "number": attempt.number, "provider": attempt.provider, "hedge": attempt.hedge });
    event(
        attempt.job_id,
        attempt.id,
        EventKind::AttemptStarted,
        detail,
    )
}

/// The outputs of a group of `len` changes after a backend's one-statement write
/// ([`Change::at_once`]) of those at `offered_at`: `out` where it made the change (`made`,
/// one per offered change), `None` (left to the general way) everywhere else, and
/// everywhere when the backend made none at once (`made` is `None`).
fn made_at<T: Clone>(
    len: usize,
    offered_at: &[usize],
    made: Option<Vec<bool>>,
    out: T,
) -> Vec<Option<T>> {
    let mut outs = vec![None; len];
    for (&at, made) in offered_at.iter().zip(made.unwrap_or_default()) {
        if made {
            outs[at] = Some(out.clone());
        }
    }
    outs
}

/// The distinct jobs of a group's changes, in order (they come sorted by job).
fn distinct_jobs<C>(changes: &[(Uuid, &C)]) -> Vec<Uuid> {
    let mut jobs: Vec<Uuid> = changes.iter().map(|(job, _)| *job).collect();
    jobs.dedup();
    jobs
}

fn has_duplicates(ids: &[Uuid]) -> bool {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    sorted.windows(2).any(|pair| pair[0] == pair[1])
}

/// A reference the database lost: corrupt.
fn no(what: &str, id: Uuid) -> StoreError {
    StoreError::Corrupt(format!("no {what} {id}"))
}

/// How many times a completion re-reads the job when its version moved for another reason.
const CAS_ROUNDS: usize = 16;

fn event(job_id: Uuid, attempt_id: Uuid, kind: EventKind, detail: Value) -> NewEvent {
    NewEvent {
        tenant: None,
        job_id,
        attempt_id: Some(attempt_id),
        kind,
        actor: None,
        detail,
    }
}

/// The job of an attempt; a missing attempt is a corrupt reference.
async fn job_of<S: Backend>(tx: &mut Tx<S>, attempt_id: Uuid) -> Result<Uuid, StoreError> {
    tx.job_of(attempt_id)
        .await?
        .ok_or_else(|| StoreError::Corrupt(format!("no attempt {attempt_id}")))
}

/// The job's lock and head; the job of an existing attempt always exists.
async fn locked<S: Backend>(tx: &mut Tx<S>, job_id: Uuid) -> Result<JobHead, StoreError> {
    tx.lock_job(job_id)
        .await?
        .ok_or_else(|| StoreError::Corrupt(format!("no job {job_id}")))
}

/// Recomputes a job's state from its attempts after one of them changed. Leaves succeeded
/// and cancelled jobs alone. `retry` decides whether a job with nothing open goes back to
/// `pending` (and when) or `failed` (with `error`).
async fn settle_job<S: Backend>(
    tx: &mut Tx<S>,
    job: &JobHead,
    job_id: Uuid,
    retry: Option<RetryPolicy>,
    error: Option<&Value>,
) -> Result<JobState, StoreError> {
    if matches!(job.state, JobState::Succeeded | JobState::Cancelled) {
        return Ok(job.state);
    }
    let states = tx.attempt_states(job_id).await?;
    let may_retry =
        retry.is_some_and(|r| within_budget(job.attempts, job.recoveries, r.max_attempts));
    let next = JobState::settle(states, may_retry);
    let backoff = retry.map(|r| r.backoff).unwrap_or_default();
    let job_error = (next == JobState::Failed).then(|| {
        json!({ "message": "no attempt succeeded", "attempts": job.attempts, "last_error": error })
    });
    tx.set_job_state(job_id, next, backoff, job_error.as_ref())
        .await?;
    Ok(next)
}

fn job_event(job_id: Uuid, kind: EventKind, actor: &str, detail: Value) -> NewEvent {
    NewEvent {
        tenant: None,
        job_id,
        attempt_id: None,
        kind,
        actor: Some(actor.to_owned()),
        detail,
    }
}
