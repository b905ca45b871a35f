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

use super::{PgStore, Variant, citus};
use crate::store::{
    Pruned, Retention, StoreError,
    backend::{Backend, Tx},
    rows,
};

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
        if self.variant == Variant::Citus {
            return prune_on_citus(self, tx, older_than, limit).await;
        }
        // One row per deleted job, its key (for the replay cache), with the batch's counts of
        // attempts and events (none deleted when no job is).
        let deleted = tx
            .run(async |connection| {
                sqlx::query("INSERT INTO onejob_retention_pass DEFAULT VALUES")
                    .execute(&mut *connection)
                    .await?;
                let deleted = sqlx::query(
                    "WITH doomed AS (SELECT id, tenant FROM jobs \
                         WHERE state IN ('succeeded', 'failed', 'cancelled') \
                         AND updated_at < now() - make_interval(secs => $1) \
                         ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED), \
                     events AS (DELETE FROM job_events e USING doomed d \
                                WHERE e.job_id = d.id AND e.tenant = d.tenant RETURNING 1), \
                     attempts AS (DELETE FROM attempts a USING doomed d \
                                  WHERE a.job_id = d.id AND a.tenant = d.tenant RETURNING 1), \
                     jobs AS (DELETE FROM jobs j USING doomed d WHERE j.id = d.id AND j.tenant = d.tenant \
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

/// The pass on Citus: the tenants with old finished jobs are read across the shards, then
/// each tenant's jobs are deleted by a statement on its shard alone
/// ([`citus::PRUNE_TENANT`]), all in the one transaction that holds the pass's advisory lock
/// and its row of `onejob_retention_pass` (a reference table, so every shard's delete
/// guard sees it), up to `limit` jobs in all.
async fn prune_on_citus(
    store: &PgStore,
    mut tx: Tx<PgStore>,
    older_than: Duration,
    limit: u32,
) -> Result<Pruned, StoreError> {
    let seconds = older_than.as_secs_f64();
    let (pruned, keys) = tx
        .run(async |connection| {
            let tenants: Vec<String> = sqlx::query_scalar(citus::PRUNABLE_TENANTS)
                .bind(seconds)
                .bind(i64::from(limit))
                .fetch_all(&mut *connection)
                .await?;
            let mut pruned = Pruned::default();
            let mut keys = Vec::new();
            if tenants.is_empty() {
                return Ok((pruned, keys));
            }
            sqlx::query("INSERT INTO onejob_retention_pass DEFAULT VALUES")
                .execute(&mut *connection)
                .await?;
            for tenant in &tenants {
                let left = u64::from(limit).saturating_sub(pruned.jobs);
                if left == 0 {
                    break;
                }
                let deleted = sqlx::query(citus::PRUNE_TENANT)
                    .bind(seconds)
                    .bind(left as i64)
                    .bind(tenant)
                    .fetch_all(&mut *connection)
                    .await?;
                citus::count_pruned(&deleted, &mut pruned)?;
                for row in &deleted {
                    keys.push(rows::key_of::<PgStore>(row)?);
                }
            }
            sqlx::query("DELETE FROM onejob_retention_pass")
                .execute(&mut *connection)
                .await?;
            Ok((pruned, keys))
        })
        .await?;
    tx.commit().await?;
    store.settled().forget(keys);
    Ok(pruned)
}
