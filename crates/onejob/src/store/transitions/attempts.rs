//! The attempt rules: the guarded start, acknowledgement, and the three ways an attempt ends
//! (won or discarded by compare-and-swap, failed, unknown).
//!
//! Every rule takes the job's lock before it reads the attempt it acts on: an operator or
//! the reconciler resolving that attempt holds the same lock, so the state read is the one
//! the update acts on. A start takes the lock without waiting (PostgreSQL's `SKIP LOCKED`):
//! two starters never interleave, and the second, once the first committed, sees its
//! `starting` attempt and is refused. The partial unique index `attempts_one_starting` and
//! `UNIQUE (job_id, number)` back the lock structurally; the result's compare-and-swap is
//! the one conditional update that lets exactly one attempt win.

use onejob_domain::{AttemptState, EventKind, JobState};
use serde_json::{Value, json};
use std::time::Duration;
use uuid::Uuid;

use crate::store::{
    Acknowledged, AttemptStart, Completion, FailOutcome, NewEvent, Resolution, RetryPolicy,
    StartOutcome, StartRefusal, StoreError, UnknownBy, Unsuccessful, payload_digest,
    records::{Exhausted, sibling_discarded, storable, with_member, within_budget},
    release,
    statements::{JobHead, Statements, Tx},
};

/// How many times a completion re-reads the job when its version moved for another reason.
const CAS_ROUNDS: usize = 16;

fn event(job_id: Uuid, attempt_id: Uuid, kind: EventKind, detail: Value) -> NewEvent {
    NewEvent {
        job_id,
        attempt_id: Some(attempt_id),
        kind,
        actor: None,
        detail,
    }
}

/// The job of an attempt; a missing attempt is a corrupt reference.
async fn job_of<S: Statements>(tx: &mut Tx<S>, attempt_id: Uuid) -> Result<Uuid, StoreError> {
    S::job_of(tx, attempt_id)
        .await?
        .ok_or_else(|| StoreError::Corrupt(format!("no attempt {attempt_id}")))
}

/// The job's lock and head; the job of an existing attempt always exists.
async fn locked<S: Statements>(tx: &mut Tx<S>, job_id: Uuid) -> Result<JobHead, StoreError> {
    S::lock_job(tx, job_id)
        .await?
        .ok_or_else(|| StoreError::Corrupt(format!("no job {job_id}")))
}

pub(super) async fn start<S: Statements>(
    store: &S,
    start: &AttemptStart,
) -> Result<StartOutcome, StoreError> {
    let mut tx = store.begin().await?;
    let Some((job, due)) = S::lock_due_job(&mut tx, start.job_id).await? else {
        let exists = S::job_exists(&mut tx, start.job_id).await?;
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
    let open = S::open_attempts(&mut tx, start.job_id).await?;
    if let Some(&(attempt_id, state)) = open.iter().find(|(_, s)| s.blocks_new_attempts()) {
        let refusal = StartRefusal::Blocked { attempt_id, state };
        return release(tx, StartOutcome::Refused(refusal)).await;
    }
    if open.is_empty() == start.hedge {
        return release(tx, StartOutcome::Refused(StartRefusal::NotHedgeable)).await;
    }
    let previous = S::last_provider(&mut tx, start.job_id).await?;
    let attempt = S::insert_attempt(&mut tx, start, job.attempts + 1).await?;
    S::mark_job_started(&mut tx, start.job_id).await?;
    if let Some(from) = previous.filter(|p| !start.hedge && *p != start.provider) {
        let detail = json!({ "from": from, "to": start.provider });
        let failover = event(start.job_id, attempt.id, EventKind::Failover, detail);
        S::insert_event(&mut tx, &failover).await?;
    }
    let detail =
        json!({ "number": attempt.number, "provider": attempt.provider, "hedge": attempt.hedge });
    let started = event(start.job_id, attempt.id, EventKind::AttemptStarted, detail);
    S::insert_event(&mut tx, &started).await?;
    tx.commit().await?;
    Ok(StartOutcome::Started(Box::new(attempt)))
}

pub(super) async fn acknowledge<S: Statements>(
    store: &S,
    attempt_id: Uuid,
    task_id: Option<&str>,
    hedge_after: Option<Duration>,
) -> Result<Acknowledged, StoreError> {
    let mut tx = store.begin().await?;
    // The job's lock first: a cancellation either committed before (and is seen here) or
    // waits until the attempt is running, when it returns it as live for an upstream cancel.
    let job_id = job_of::<S>(&mut tx, attempt_id).await?;
    let job = locked::<S>(&mut tx, job_id).await?;
    // The task id is stored whatever the attempt's state: it is what proves what happened.
    let state = S::keep_task_id(&mut tx, attempt_id, task_id).await?;
    if state != AttemptState::Starting {
        tx.commit().await?;
        return Ok(Acknowledged::NotStarting(state));
    }
    if job.state == JobState::Cancelled {
        S::cancel_acknowledged(&mut tx, attempt_id).await?;
        let detail = json!({
            "outcome": "cancelled",
            "note": "the job was cancelled while the attempt was being sent",
        });
        let resolved = event(job_id, attempt_id, EventKind::AttemptResolved, detail);
        S::insert_event(&mut tx, &resolved).await?;
        tx.commit().await?;
        return Ok(Acknowledged::JobCancelled);
    }
    S::mark_running(&mut tx, attempt_id).await?;
    if let Some(after) = hedge_after {
        S::schedule_hedge(&mut tx, job_id, after).await?;
    }
    tx.commit().await?;
    if hedge_after.is_some() {
        store.dispatch_changed();
    }
    Ok(Acknowledged::Running)
}

pub(super) async fn complete<S: Statements>(
    store: &S,
    attempt_id: Uuid,
    output: &Value,
    by: &Resolution,
) -> Result<Completion, StoreError> {
    for _ in 0..CAS_ROUNDS {
        let mut tx = store.begin().await?;
        let job_id = job_of::<S>(&mut tx, attempt_id).await?;
        let job = locked::<S>(&mut tx, job_id).await?;
        let attempt_state = S::attempt_state(&mut tx, attempt_id).await?;
        if by.only_unknown && attempt_state != AttemptState::Unknown {
            return release(tx, Completion::NotUnknown(attempt_state)).await;
        }
        let winner = job.completed_by;
        if winner == Some(attempt_id) {
            // The winner's own answer again (a recording resent after a lost reply, or the
            // upstream answering twice): it already is the result; no race was lost.
            return release(tx, Completion::Won).await;
        }
        let job_state = job.state;
        let open = matches!(
            job_state,
            JobState::Pending | JobState::Running | JobState::Unknown
        );
        if winner.is_some() || !open || attempt_state.is_terminal() {
            S::discard_attempt(&mut tx, attempt_id).await?;
            let mut detail = payload_digest(output);
            detail["winner"] = json!(winner);
            detail["job_state"] = json!(job_state);
            detail["note"] = json!(by.note);
            let lost = by.event(job_id, attempt_id, EventKind::RaceLost, detail);
            S::insert_event(&mut tx, &lost).await?;
            tx.commit().await?;
            return Ok(Completion::Discarded { winner, job_state });
        }
        // The compare-and-swap: exactly one attempt ever gets past this.
        let swapped = S::swap_result(&mut tx, job_id, job.version, output, attempt_id).await?;
        if !swapped || !S::mark_succeeded(&mut tx, attempt_id).await? {
            // The version or the attempt moved under us: read again and decide again.
            tx.rollback().await?;
            continue;
        }
        // The unknown siblings' outcome no longer matters; left unknown they would wait for
        // proof (and count as unknown) forever.
        for sibling in S::discard_unknown_siblings(&mut tx, job_id, attempt_id).await? {
            let detail = sibling_discarded(attempt_id);
            let resolved = event(job_id, sibling, EventKind::AttemptResolved, detail);
            S::insert_event(&mut tx, &resolved).await?;
        }
        let mut detail = payload_digest(output);
        detail["note"] = json!(by.note);
        let won = by.event(job_id, attempt_id, EventKind::Won, detail);
        S::insert_event(&mut tx, &won).await?;
        tx.commit().await?;
        return Ok(Completion::Won);
    }
    Err(StoreError::Contended("completion"))
}

/// Recomputes a job's state from its attempts after one of them changed. Leaves succeeded
/// and cancelled jobs alone. `retry` decides whether a job with nothing open goes back to
/// `pending` (and when) or `failed` (with `error`).
async fn settle_job<S: Statements>(
    tx: &mut Tx<S>,
    job: &JobHead,
    job_id: Uuid,
    retry: Option<RetryPolicy>,
    error: Option<&Value>,
) -> Result<JobState, StoreError> {
    if matches!(job.state, JobState::Succeeded | JobState::Cancelled) {
        return Ok(job.state);
    }
    let states = S::attempt_states(tx, job_id).await?;
    let may_retry =
        retry.is_some_and(|r| within_budget(job.attempts, job.recoveries, r.max_attempts));
    let next = JobState::settle(states, may_retry);
    let backoff = retry.map(|r| r.backoff).unwrap_or_default();
    let job_error = (next == JobState::Failed).then(|| {
        json!({ "message": "no attempt succeeded", "attempts": job.attempts, "last_error": error })
    });
    S::set_job_state(tx, job_id, next, backoff, job_error.as_ref()).await?;
    Ok(next)
}

pub(super) async fn fail<S: Statements>(
    store: &S,
    attempt_id: Uuid,
    end: Unsuccessful,
    error: &Value,
    retry: RetryPolicy,
    by: &Resolution,
) -> Result<FailOutcome, StoreError> {
    let error = storable(error);
    let mut tx = store.begin().await?;
    let job_id = job_of::<S>(&mut tx, attempt_id).await?;
    let job = locked::<S>(&mut tx, job_id).await?;
    let attempt_state = S::attempt_state(&mut tx, attempt_id).await?;
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
    S::end_attempt(&mut tx, attempt_id, end_state, &error, end.spends_key()).await?;
    let detail = json!({ "outcome": end_state, "error": &*error, "note": by.note });
    let resolved = by.event(job_id, attempt_id, EventKind::AttemptResolved, detail);
    S::insert_event(&mut tx, &resolved).await?;
    let state = settle_job::<S>(&mut tx, &job, job_id, Some(retry), Some(&error)).await?;
    tx.commit().await?;
    if state == JobState::Pending {
        store.dispatch_changed();
    }
    Ok(FailOutcome::Recorded(state))
}

pub(super) async fn settle_exhausted<S: Statements>(
    store: &S,
    job_id: Uuid,
    max_attempts: u32,
) -> Result<bool, StoreError> {
    let mut tx = store.begin().await?;
    let Some(job) = S::lock_job(&mut tx, job_id).await? else {
        return release(tx, false).await;
    };
    let open = S::has_open_attempt(&mut tx, job_id).await?;
    if job.state != JobState::Pending
        || open
        || within_budget(job.attempts, job.recoveries, max_attempts)
    {
        return release(tx, false).await;
    }
    let exhausted = Exhausted::new(job_id, job.attempts, max_attempts);
    S::fail_job(&mut tx, job_id, &exhausted.job_error()).await?;
    S::insert_event(&mut tx, &exhausted.event()).await?;
    tx.commit().await?;
    Ok(true)
}

pub(super) async fn mark_unknown<S: Statements>(
    store: &S,
    attempt_id: Uuid,
    why: &Value,
    by: UnknownBy,
) -> Result<bool, StoreError> {
    let why = storable(why);
    let mut tx = store.begin().await?;
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
        if S::discard_live(&mut tx, attempt_id, &error, grace).await? {
            let detail = with_member(&why, "outcome", json!("discarded"));
            let detail = with_member(&detail, "job_state", json!(job.state));
            let resolved = event(job_id, attempt_id, EventKind::AttemptResolved, detail);
            S::insert_event(&mut tx, &resolved).await?;
        }
        tx.commit().await?;
        return Ok(false);
    }
    if !S::make_unknown(&mut tx, attempt_id, &why, grace).await? {
        return release(tx, false).await;
    }
    let unknown = event(
        job_id,
        attempt_id,
        EventKind::AttemptUnknown,
        why.into_owned(),
    );
    S::insert_event(&mut tx, &unknown).await?;
    settle_job::<S>(&mut tx, &job, job_id, None, None).await?;
    tx.commit().await?;
    Ok(true)
}
