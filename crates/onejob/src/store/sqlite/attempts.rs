//! Attempt statements on SQLite that stand alone, outside the written-once transitions:
//! the send fence, heartbeats, the rescuer's scan, the reconciler's claim, late task ids.

use std::time::Duration;

use uuid::Uuid;

use super::{SqliteAttemptRow, SqliteStore, minus, parse_uuid, plus};
use crate::store::{AttemptRecord, StoreError, records::storable_text};

pub(super) async fn owns(
    store: &SqliteStore,
    attempt_id: Uuid,
    worker: &str,
    margin: Duration,
) -> Result<bool, StoreError> {
    Ok(sqlx::query_scalar(concat!(
        "SELECT EXISTS (SELECT 1 FROM attempts a JOIN jobs j ON j.id = a.job_id \
         WHERE a.id = ?1 AND a.state = 'starting' AND a.worker = ?2 AND a.lease_expires_at > ",
        now_plus!("?3"),
        " AND j.state <> 'cancelled')"
    ))
    .bind(attempt_id.to_string())
    .bind(worker)
    .bind(plus(margin))
    .fetch_one(store.pool())
    .await?)
}

pub(super) async fn heartbeat(
    store: &SqliteStore,
    worker: &str,
    lease: Duration,
) -> Result<Vec<Uuid>, StoreError> {
    let mut tx = store.begin_write().await?;
    let renewed: Vec<(String, String)> = sqlx::query_as(concat!(
        "UPDATE attempts SET lease_expires_at = ",
        now_plus!("?2"),
        " WHERE worker = ?1 AND state IN ('starting', 'running') RETURNING id, job_id"
    ))
    .bind(worker)
    .bind(plus(lease))
    .fetch_all(&mut *tx)
    .await?;
    let mut cancelled = Vec::new();
    for (attempt_id, job_id) in renewed {
        let state: String = sqlx::query_scalar("SELECT state FROM jobs WHERE id = ?1")
            .bind(&job_id)
            .fetch_one(&mut *tx)
            .await?;
        if state == "cancelled" {
            cancelled.push(parse_uuid(&attempt_id)?);
        }
    }
    tx.commit().await?;
    Ok(cancelled)
}

pub(super) async fn expired(
    store: &SqliteStore,
    grace: Duration,
) -> Result<Vec<(Uuid, String)>, StoreError> {
    let rows: Vec<(String, String)> = sqlx::query_as(concat!(
        "SELECT id, provider FROM attempts WHERE state IN ('starting', 'running') AND (lease_expires_at < ",
        now!(),
        " OR deadline_at < ",
        now_plus!("?1"),
        ") ORDER BY started_at LIMIT 100"
    ))
    .bind(minus(grace))
    .fetch_all(store.pool())
    .await?;
    rows.into_iter()
        .map(|(id, provider)| Ok((parse_uuid(&id)?, provider)))
        .collect()
}

pub(super) async fn claim_unknown(
    store: &SqliteStore,
    limit: u32,
    backoff: Duration,
    max_backoff: Duration,
) -> Result<Vec<AttemptRecord>, StoreError> {
    let mut tx = store.begin_write().await?;
    let due: Vec<(String, i32)> = sqlx::query_as(concat!(
        "SELECT id, reconcile_checks FROM attempts WHERE state = 'unknown' AND reconcile_at <= ",
        now!(),
        " ORDER BY reconcile_at LIMIT ?1"
    ))
    .bind(i64::from(limit))
    .fetch_all(&mut *tx)
    .await?;
    let mut claimed = Vec::with_capacity(due.len());
    for (id, checks) in due {
        let wait = backoff
            .saturating_mul(2u32.saturating_pow(checks.clamp(0, 20) as u32))
            .min(max_backoff);
        let row: SqliteAttemptRow = sqlx::query_as(concat!(
            "UPDATE attempts SET reconcile_checks = reconcile_checks + 1, reconcile_at = ",
            now_plus!("?2"),
            " WHERE id = ?1 RETURNING ",
            attempt_columns!()
        ))
        .bind(&id)
        .bind(plus(wait))
        .fetch_one(&mut *tx)
        .await?;
        claimed.push(AttemptRecord::try_from(row)?);
    }
    tx.commit().await?;
    Ok(claimed)
}

pub(super) async fn set_task_id(
    store: &SqliteStore,
    attempt_id: Uuid,
    task_id: &str,
) -> Result<(), StoreError> {
    let mut tx = store.begin_write().await?;
    sqlx::query("UPDATE attempts SET task_id = ?2 WHERE id = ?1 AND task_id IS NULL")
        .bind(attempt_id.to_string())
        .bind(storable_text(task_id))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}
