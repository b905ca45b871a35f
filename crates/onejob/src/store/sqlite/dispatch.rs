//! Dispatch on SQLite: due jobs, the send fence, heartbeats, the rescuer's scan, the
//! reconciler's claim and late task ids; one statement each, outside the written-once
//! transitions.

use async_trait::async_trait;
use std::time::Duration;

use uuid::Uuid;

use super::{SqliteAttemptRow, SqliteJobRow, SqliteStore, minus, parse_uuid, plus};
use crate::store::{AttemptRecord, Dispatch, JobRecord, StoreError, records::storable_text};

#[async_trait]
impl Dispatch for SqliteStore {
    async fn owns_attempt(
        &self,
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
        .fetch_one(self.pool())
        .await?)
    }

    async fn heartbeat(&self, worker: &str, lease: Duration) -> Result<Vec<Uuid>, StoreError> {
        let mut tx = self.begin_write().await?;
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

    async fn expired_attempts(&self, grace: Duration) -> Result<Vec<(Uuid, String)>, StoreError> {
        let rows: Vec<(String, String)> = sqlx::query_as(concat!(
            "SELECT id, provider FROM attempts WHERE state IN ('starting', 'running') AND (lease_expires_at < ",
            now!(),
            " OR deadline_at < ",
            now_plus!("?1"),
            ") ORDER BY started_at LIMIT 100"
        ))
        .bind(minus(grace))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter()
            .map(|(id, provider)| Ok((parse_uuid(&id)?, provider)))
            .collect()
    }

    async fn claim_unknown(
        &self,
        limit: u32,
        backoff: Duration,
        max_backoff: Duration,
    ) -> Result<Vec<AttemptRecord>, StoreError> {
        let mut tx = self.begin_write().await?;
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

    async fn set_task_id(&self, attempt_id: Uuid, task_id: &str) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        sqlx::query("UPDATE attempts SET task_id = ?2 WHERE id = ?1 AND task_id IS NULL")
            .bind(attempt_id.to_string())
            .bind(storable_text(task_id))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn due_jobs(&self, limit: u32) -> Result<Vec<Uuid>, StoreError> {
        let ids: Vec<String> = sqlx::query_scalar(concat!(
            "SELECT id FROM jobs WHERE dispatch_at <= ",
            now!(),
            " ORDER BY dispatch_at LIMIT ?1"
        ))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        ids.iter().map(|id| parse_uuid(id)).collect()
    }

    async fn job_for_dispatch(&self, id: Uuid) -> Result<Option<JobRecord>, StoreError> {
        let row: Option<SqliteJobRow> = sqlx::query_as(concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE id = ?1"
        ))
        .bind(id.to_string())
        .fetch_optional(&self.pool)
        .await?;
        row.map(JobRecord::try_from).transpose()
    }

    async fn job_attempts(&self, job_id: Uuid) -> Result<Vec<AttemptRecord>, StoreError> {
        let rows: Vec<SqliteAttemptRow> = sqlx::query_as(concat!(
            "SELECT ",
            attempt_columns!(),
            " FROM attempts WHERE job_id = ?1 ORDER BY number"
        ))
        .bind(job_id.to_string())
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(AttemptRecord::try_from).collect()
    }

    async fn defer_dispatch(
        &self,
        job_id: Uuid,
        version: i64,
        delay: Duration,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin_write().await?;
        let result = sqlx::query(concat!(
            "UPDATE jobs SET dispatch_at = ",
            now_plus!("?3"),
            " WHERE id = ?1 AND version = ?2 AND dispatch_at IS NOT NULL"
        ))
        .bind(job_id.to_string())
        .bind(version)
        .bind(format!("+{:.3} seconds", delay.as_secs_f64()))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(result.rows_affected() == 1)
    }

    async fn next_due_in(&self) -> Result<Option<Duration>, StoreError> {
        let seconds: Option<f64> = sqlx::query_scalar(
            "SELECT (julianday(min(dispatch_at)) - julianday('now')) * 86400.0 FROM jobs \
             WHERE dispatch_at IS NOT NULL",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(seconds.map(|s| Duration::from_secs_f64(s.max(0.0))))
    }

    async fn wait_for_work(&self, max_wait: Duration) {
        let _ = tokio::time::timeout(max_wait, self.wake.notified()).await;
    }
}
