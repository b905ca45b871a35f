//! Attempt statements on PostgreSQL that stand alone, outside the written-once transitions:
//! the send fence, heartbeats, the rescuer's scan, the reconciler's claim, late task ids.

use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

use super::{PgAttemptRow, secs};
use crate::store::{AttemptRecord, StoreError, records::storable_text};

pub(super) async fn owns(
    pool: &PgPool,
    attempt_id: Uuid,
    worker: &str,
    margin: Duration,
) -> Result<bool, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM attempts a JOIN jobs j ON j.id = a.job_id \
         WHERE a.id = $1 AND a.state = 'starting' AND a.worker = $2 \
         AND a.lease_expires_at > now() + make_interval(secs => $3) AND j.state <> 'cancelled')",
    )
    .bind(attempt_id)
    .bind(worker)
    .bind(secs(margin))
    .fetch_one(pool)
    .await?)
}

pub(super) async fn heartbeat(
    pool: &PgPool,
    worker: &str,
    lease: Duration,
) -> Result<Vec<Uuid>, StoreError> {
    Ok(sqlx::query_scalar(
        "WITH renewed AS (UPDATE attempts SET lease_expires_at = now() + make_interval(secs => $2) \
         WHERE worker = $1 AND state IN ('starting', 'running') RETURNING id, job_id) \
         SELECT renewed.id FROM renewed JOIN jobs ON jobs.id = renewed.job_id \
         WHERE jobs.state = 'cancelled'",
    )
    .bind(worker)
    .bind(secs(lease))
    .fetch_all(pool)
    .await?)
}

pub(super) async fn expired(
    pool: &PgPool,
    grace: Duration,
) -> Result<Vec<(Uuid, String)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT id, provider FROM attempts WHERE state IN ('starting', 'running') \
         AND (lease_expires_at < now() OR deadline_at < now() - make_interval(secs => $1)) \
         ORDER BY started_at LIMIT 100",
    )
    .bind(secs(grace))
    .fetch_all(pool)
    .await?)
}

pub(super) async fn claim_unknown(
    pool: &PgPool,
    limit: u32,
    backoff: Duration,
    max_backoff: Duration,
) -> Result<Vec<AttemptRecord>, StoreError> {
    let rows: Vec<PgAttemptRow> = sqlx::query_as(concat!(
        "UPDATE attempts SET reconcile_checks = reconcile_checks + 1, \
         reconcile_at = now() + make_interval(secs => LEAST($2 * power(2, LEAST(reconcile_checks, 20)), $3)) \
         WHERE id IN (SELECT id FROM attempts WHERE state = 'unknown' AND reconcile_at <= now() \
         ORDER BY reconcile_at LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING ",
        attempt_columns!()
    ))
    .bind(i64::from(limit))
    .bind(secs(backoff))
    .bind(secs(max_backoff))
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(AttemptRecord::try_from).collect()
}

pub(super) async fn set_task_id(
    pool: &PgPool,
    attempt_id: Uuid,
    task_id: &str,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE attempts SET task_id = $2 WHERE id = $1 AND task_id IS NULL")
        .bind(attempt_id)
        .bind(storable_text(task_id))
        .execute(pool)
        .await?;
    Ok(())
}
