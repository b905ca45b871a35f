//! The owner-driven lifecycle rules: cancellation and controlled recovery. Both lock the job,
//! so they serialize with attempt starts and completions.

use onejob_domain::{EventKind, JobState, Principal};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::store::{
    CancelOutcome, NewEvent, RecoverOutcome, StoreError, release, statements::Statements,
};

fn job_event(job_id: Uuid, kind: EventKind, actor: &str, detail: Value) -> NewEvent {
    NewEvent {
        job_id,
        attempt_id: None,
        kind,
        actor: Some(actor.to_owned()),
        detail,
    }
}

pub(super) async fn cancel<S: Statements>(
    store: &S,
    owner: &Principal,
    job_id: Uuid,
    actor: &str,
) -> Result<Option<CancelOutcome>, StoreError> {
    let mut tx = store.begin().await?;
    let Some(job) = S::lock_owned_job(&mut tx, owner, job_id).await? else {
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
    S::cancel_job_row(&mut tx, job_id).await?;
    for attempt_id in S::cancel_unknown_attempts(&mut tx, job_id).await? {
        let detail = json!({ "outcome": "cancelled", "note": "the job was cancelled" });
        let mut event = job_event(job_id, EventKind::AttemptResolved, actor, detail);
        event.attempt_id = Some(attempt_id);
        S::insert_event(&mut tx, &event).await?;
    }
    let live = S::live_attempts(&mut tx, job_id).await?;
    let detail = json!({ "from": job.state, "live_attempts": live.len() });
    S::insert_event(
        &mut tx,
        &job_event(job_id, EventKind::Cancelled, actor, detail),
    )
    .await?;
    let job = S::reload_job(&mut tx, job_id).await?;
    tx.commit().await?;
    Ok(Some(CancelOutcome::Cancelled { job, live }))
}

pub(super) async fn recover<S: Statements>(
    store: &S,
    owner: &Principal,
    job_id: Uuid,
    actor: &str,
) -> Result<Option<RecoverOutcome>, StoreError> {
    let mut tx = store.begin().await?;
    let Some(job) = S::lock_owned_job(&mut tx, owner, job_id).await? else {
        return release(tx, None).await;
    };
    if job.state != JobState::Failed {
        return release(tx, Some(RecoverOutcome::NotFailed(job))).await;
    }
    S::recover_job_row(&mut tx, job_id).await?;
    let detail = json!({ "generation": job.recoveries + 1, "previous_error": job.error });
    S::insert_event(
        &mut tx,
        &job_event(job_id, EventKind::Recovered, actor, detail),
    )
    .await?;
    let job = S::reload_job(&mut tx, job_id).await?;
    tx.commit().await?;
    store.dispatch_changed();
    Ok(Some(RecoverOutcome::Recovered(job)))
}
