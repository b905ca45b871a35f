//! Dispatch on PostgreSQL: due jobs, the send fence, heartbeats, the rescuer's scan, the
//! reconciler's claim and late task ids; one statement each, outside the written-once
//! transitions.

use async_trait::async_trait;
use std::time::Duration;

use uuid::Uuid;

use super::{PgAttemptRow, PgJobRow, PgStore, secs};
use crate::store::{AttemptRecord, Dispatch, JobRecord, StoreError, records::storable_text};

#[async_trait]
impl Dispatch for PgStore {
    async fn owns_attempt(
        &self,
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
        .fetch_one(&self.pool)
        .await?)
    }

    async fn heartbeat(&self, worker: &str, lease: Duration) -> Result<Vec<Uuid>, StoreError> {
        Ok(sqlx::query_scalar(
            "WITH renewed AS (UPDATE attempts SET lease_expires_at = now() + make_interval(secs => $2) \
             WHERE worker = $1 AND state IN ('starting', 'running') RETURNING id, job_id) \
             SELECT renewed.id FROM renewed JOIN jobs ON jobs.id = renewed.job_id \
             WHERE jobs.state = 'cancelled'",
        )
        .bind(worker)
        .bind(secs(lease))
        .fetch_all(&self.pool)
        .await?)
    }

    async fn expired_attempts(&self, grace: Duration) -> Result<Vec<(Uuid, String)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT id, provider FROM attempts WHERE state IN ('starting', 'running') \
             AND (lease_expires_at < now() OR deadline_at < now() - make_interval(secs => $1)) \
             ORDER BY started_at LIMIT 100",
        )
        .bind(secs(grace))
        .fetch_all(&self.pool)
        .await?)
    }

    async fn claim_unknown(
        &self,
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
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(AttemptRecord::try_from).collect()
    }

    async fn set_task_id(&self, attempt_id: Uuid, task_id: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE attempts SET task_id = $2 WHERE id = $1 AND task_id IS NULL")
            .bind(attempt_id)
            .bind(storable_text(task_id))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn due_jobs(&self, limit: u32) -> Result<Vec<Uuid>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT id FROM jobs WHERE dispatch_at <= now() ORDER BY dispatch_at LIMIT $1",
        )
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?)
    }

    async fn job_for_dispatch(&self, id: Uuid) -> Result<Option<JobRecord>, StoreError> {
        let row: Option<PgJobRow> = sqlx::query_as(concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(JobRecord::try_from).transpose()
    }

    async fn job_attempts(&self, job_id: Uuid) -> Result<Vec<AttemptRecord>, StoreError> {
        let rows: Vec<PgAttemptRow> = sqlx::query_as(concat!(
            "SELECT ",
            attempt_columns!(),
            " FROM attempts WHERE job_id = $1 ORDER BY number"
        ))
        .bind(job_id)
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
        let result = sqlx::query(
            "UPDATE jobs SET dispatch_at = now() + make_interval(secs => $3) \
             WHERE id = $1 AND version = $2 AND dispatch_at IS NOT NULL",
        )
        .bind(job_id)
        .bind(version)
        .bind(delay.as_secs_f64())
        .execute(&self.pool)
        .await?;
        Ok(result.rows_affected() == 1)
    }

    async fn next_due_in(&self) -> Result<Option<Duration>, StoreError> {
        let seconds: Option<f64> = sqlx::query_scalar(
            "SELECT EXTRACT(EPOCH FROM (min(dispatch_at) - now()))::float8 FROM jobs \
             WHERE dispatch_at IS NOT NULL",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(seconds.map(|s| Duration::from_secs_f64(s.max(0.0))))
    }

    async fn wait_for_work(&self, max_wait: Duration) {
        self.wake.wait(max_wait).await;
    }
}
