//! Retention on PostgreSQL: one batch of finished jobs deleted with their attempts and
//! events, in one statement.
//!
//! The three tables reference each other in a cycle (an attempt its job; a succeeded job its
//! winning attempt), with constraints checked at the end of each statement, so the three
//! deletes are one statement of data-modifying CTEs. The event log's delete trigger lets the
//! statement through because the transaction holds a row in `onejob_retention_pass`, which
//! no other transaction ever sees. A transaction-scoped advisory lock keeps the nodes taking
//! turns; jobs another transaction holds (`SKIP LOCKED`) wait for the next batch, so intake
//! and workers never queue behind a pass.

use async_trait::async_trait;
use std::time::Duration;

use super::PgStore;
use crate::store::{Pruned, Retention, StoreError};

/// The advisory lock of pruning passes (an arbitrary constant, `onejob` in ASCII).
const RETENTION_LOCK: i64 = 0x6f6e_656a_6f62;

#[async_trait]
impl Retention for PgStore {
    async fn prune_finished(&self, older_than: Duration, limit: u32) -> Result<Pruned, StoreError> {
        let mut tx = self.pool.begin().await?;
        let ours: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
            .bind(RETENTION_LOCK)
            .fetch_one(&mut *tx)
            .await?;
        if !ours {
            tx.rollback().await?;
            return Ok(Pruned {
                busy: true,
                ..Pruned::default()
            });
        }
        sqlx::query("INSERT INTO onejob_retention_pass DEFAULT VALUES")
            .execute(&mut *tx)
            .await?;
        let (jobs, attempts, events): (i64, i64, i64) = sqlx::query_as(
            "WITH doomed AS (SELECT id FROM jobs \
                 WHERE state IN ('succeeded', 'failed', 'cancelled') \
                 AND updated_at < now() - make_interval(secs => $1) \
                 ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED), \
             events AS (DELETE FROM job_events e USING doomed d WHERE e.job_id = d.id RETURNING 1), \
             attempts AS (DELETE FROM attempts a USING doomed d WHERE a.job_id = d.id RETURNING 1), \
             jobs AS (DELETE FROM jobs j USING doomed d WHERE j.id = d.id RETURNING 1) \
             SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM attempts), \
                    (SELECT count(*) FROM events)",
        )
        .bind(older_than.as_secs_f64())
        .bind(i64::from(limit))
        .fetch_one(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM onejob_retention_pass")
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Pruned {
            jobs: jobs.max(0) as u64,
            attempts: attempts.max(0) as u64,
            events: events.max(0) as u64,
            busy: false,
        })
    }
}
