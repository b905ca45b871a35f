//! Owner-driven job lifecycle on SQLite: cancellation and controlled recovery (see the
//! PostgreSQL twin). Both run in one `BEGIN IMMEDIATE` transaction.

use serde_json::json;
use uuid::Uuid;

use super::{SqliteAttemptRow, SqliteJobRow, SqliteStore, insert_event, parse_uuid};
use crate::store::{
    AttemptRecord, CancelOutcome, JobRecord, NewEvent, RecoverOutcome, StoreError, release,
};
use onejob_domain::{EventKind, JobState, Principal};

type Tx = sqlx::Transaction<'static, sqlx::Sqlite>;

fn job_event(job_id: Uuid, kind: EventKind, actor: &str, detail: serde_json::Value) -> NewEvent {
    NewEvent {
        job_id,
        attempt_id: None,
        kind,
        actor: Some(actor.to_owned()),
        detail,
    }
}

async fn owned(
    tx: &mut Tx,
    owner: &Principal,
    job_id: Uuid,
) -> Result<Option<JobRecord>, StoreError> {
    let row: Option<SqliteJobRow> = sqlx::query_as(concat!(
        "SELECT ",
        job_columns!(),
        " FROM jobs WHERE id = ?1 AND tenant = ?2 AND user_id = ?3"
    ))
    .bind(job_id.to_string())
    .bind(&owner.tenant)
    .bind(&owner.user)
    .fetch_optional(&mut **tx)
    .await?;
    row.map(JobRecord::try_from).transpose()
}

async fn reload(tx: &mut Tx, job_id: Uuid) -> Result<JobRecord, StoreError> {
    let row: SqliteJobRow = sqlx::query_as(concat!(
        "SELECT ",
        job_columns!(),
        " FROM jobs WHERE id = ?1"
    ))
    .bind(job_id.to_string())
    .fetch_one(&mut **tx)
    .await?;
    JobRecord::try_from(row)
}

pub(super) async fn cancel(
    store: &SqliteStore,
    owner: &Principal,
    job_id: Uuid,
    actor: &str,
) -> Result<Option<CancelOutcome>, StoreError> {
    let mut tx = store.begin_write().await?;
    let Some(job) = owned(&mut tx, owner, job_id).await? else {
        return release(tx, None).await;
    };
    match job.state {
        JobState::Succeeded | JobState::Failed => {
            return release(tx, Some(CancelOutcome::Final(job))).await;
        }
        JobState::Cancelled => {
            return release(
                tx,
                Some(CancelOutcome::Cancelled {
                    job,
                    live: Vec::new(),
                }),
            )
            .await;
        }
        JobState::Pending | JobState::Running | JobState::Unknown => {}
    }
    let id = job_id.to_string();
    sqlx::query(concat!(
        "UPDATE jobs SET state = 'cancelled', dispatch_at = NULL, version = version + 1, \
         updated_at = ",
        now!(),
        " WHERE id = ?1"
    ))
    .bind(&id)
    .execute(&mut *tx)
    .await?;
    let unknown: Vec<String> = sqlx::query_scalar(concat!(
        "UPDATE attempts SET state = 'cancelled', finished_at = ",
        now!(),
        " WHERE job_id = ?1 AND state = 'unknown' RETURNING id"
    ))
    .bind(&id)
    .fetch_all(&mut *tx)
    .await?;
    for attempt_id in unknown {
        let detail = json!({ "outcome": "cancelled", "note": "the job was cancelled" });
        let mut event = job_event(job_id, EventKind::AttemptResolved, actor, detail);
        event.attempt_id = Some(parse_uuid(&attempt_id)?);
        insert_event(&mut tx, &event).await?;
    }
    let live: Vec<SqliteAttemptRow> = sqlx::query_as(concat!(
        "SELECT ",
        attempt_columns!(),
        " FROM attempts WHERE job_id = ?1 AND state IN ('starting', 'running') ORDER BY number"
    ))
    .bind(&id)
    .fetch_all(&mut *tx)
    .await?;
    let live = live
        .into_iter()
        .map(AttemptRecord::try_from)
        .collect::<Result<Vec<_>, _>>()?;
    let detail = json!({ "from": job.state, "live_attempts": live.len() });
    insert_event(
        &mut tx,
        &job_event(job_id, EventKind::Cancelled, actor, detail),
    )
    .await?;
    let job = reload(&mut tx, job_id).await?;
    tx.commit().await?;
    Ok(Some(CancelOutcome::Cancelled { job, live }))
}

pub(super) async fn recover(
    store: &SqliteStore,
    owner: &Principal,
    job_id: Uuid,
    actor: &str,
) -> Result<Option<RecoverOutcome>, StoreError> {
    let mut tx = store.begin_write().await?;
    let Some(job) = owned(&mut tx, owner, job_id).await? else {
        return release(tx, None).await;
    };
    if job.state != JobState::Failed {
        return release(tx, Some(RecoverOutcome::NotFailed(job))).await;
    }
    sqlx::query(concat!(
        "UPDATE jobs SET state = 'pending', error = NULL, recoveries = recoveries + 1, \
         dispatch_at = ",
        now!(),
        ", version = version + 1, updated_at = ",
        now!(),
        " WHERE id = ?1"
    ))
    .bind(job_id.to_string())
    .execute(&mut *tx)
    .await?;
    let detail = json!({ "generation": job.recoveries + 1, "previous_error": job.error });
    insert_event(
        &mut tx,
        &job_event(job_id, EventKind::Recovered, actor, detail),
    )
    .await?;
    let job = reload(&mut tx, job_id).await?;
    tx.commit().await?;
    store.wake.notify_one();
    Ok(Some(RecoverOutcome::Recovered(job)))
}
