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

use sqlx::Row;

use super::PgStore;
use crate::store::{Pruned, Retention, StoreError, backend::Backend, rows};

/// The advisory lock of pruning passes (an arbitrary constant, `onejob` in ASCII).
const RETENTION_LOCK: i64 = 0x6f6e_656a_6f62;

#[async_trait]
impl Retention for PgStore {
    async fn prune_finished(&self, older_than: Duration, limit: u32) -> Result<Pruned, StoreError> {
        let mut tx = self.begin().await?;
        let ours: bool = tx
            .run(async |connection| {
                Ok(sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
                    .bind(RETENTION_LOCK)
                    .fetch_one(connection)
                    .await?)
            })
            .await?;
        if !ours {
            tx.rollback().await?;
            return Ok(Pruned {
                busy: true,
                ..Pruned::default()
            });
        }
        // One row per deleted job, its key (for the replay cache), with the batch's counts of
        // attempts and events (none deleted when no job is).
        let deleted = tx
            .run(async |connection| {
                sqlx::query("INSERT INTO onejob_retention_pass DEFAULT VALUES")
                    .execute(&mut *connection)
                    .await?;
                let deleted = sqlx::query(
                    "WITH doomed AS (SELECT id FROM jobs \
                         WHERE state IN ('succeeded', 'failed', 'cancelled') \
                         AND updated_at < now() - make_interval(secs => $1) \
                         ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED), \
                     events AS (DELETE FROM job_events e USING doomed d WHERE e.job_id = d.id RETURNING 1), \
                     attempts AS (DELETE FROM attempts a USING doomed d WHERE a.job_id = d.id RETURNING 1), \
                     jobs AS (DELETE FROM jobs j USING doomed d WHERE j.id = d.id \
                              RETURNING j.tenant, j.user_id, j.key_hash) \
                     SELECT tenant, user_id, key_hash, (SELECT count(*) FROM attempts) AS attempts, \
                            (SELECT count(*) FROM events) AS events FROM jobs",
                )
                .bind(older_than.as_secs_f64())
                .bind(i64::from(limit))
                .fetch_all(&mut *connection)
                .await?;
                sqlx::query("DELETE FROM onejob_retention_pass")
                    .execute(&mut *connection)
                    .await?;
                Ok(deleted)
            })
            .await?;
        tx.commit().await?;
        let count = |column: &str| -> Result<u64, StoreError> {
            match deleted.first() {
                Some(row) => Ok(row.try_get::<i64, _>(column)?.max(0) as u64),
                None => Ok(0),
            }
        };
        let pruned = Pruned {
            jobs: deleted.len() as u64,
            attempts: count("attempts")?,
            events: count("events")?,
            busy: false,
        };
        let keys = deleted
            .iter()
            .map(rows::key_of::<Self>)
            .collect::<Result<Vec<_>, _>>()?;
        self.settled().forget(keys);
        Ok(pruned)
    }
}
