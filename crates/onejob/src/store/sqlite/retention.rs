//! Retention on SQLite: one batch of finished jobs deleted with their attempts and events
//! (see the PostgreSQL twin for why the event log lets it through).
//!
//! SQLite's single writer makes the pass exclusive, and the three tables' cycle of foreign
//! keys is handled by deferring their checks to the commit (`PRAGMA defer_foreign_keys`,
//! which lasts until the transaction ends). The batch is chosen once, by one query against
//! one cutoff time bound from here, and the three deletes then name those jobs by id: a job
//! that finishes its `finished_after` while the pass runs is either in the batch with all its
//! rows or not at all (each statement reading the clock anew left the events of a job that
//! crossed the threshold between two deletes behind, and the commit failed its foreign key).

use async_trait::async_trait;
use std::time::Duration;
use time::{OffsetDateTime, macros::format_description};

use super::SqliteStore;
use crate::store::{
    Pruned, Retention, StoreError,
    backend::{Backend, Dialect, Tx},
    rows,
};

/// The finished jobs a pass deletes, oldest first (`?1` the cutoff, `?2` the batch size).
const DOOMED: &str = "SELECT id, tenant, user_id, key_hash FROM jobs \
     WHERE state IN ('succeeded', 'failed', 'cancelled') AND updated_at < ?1 \
     ORDER BY updated_at, id LIMIT ?2";

/// The deletes of a batch, each naming its jobs by id (`?1`, a JSON array).
const DELETES: [&str; 3] = [
    "DELETE FROM job_events WHERE job_id IN (SELECT value FROM json_each(?1))",
    "DELETE FROM attempts WHERE job_id IN (SELECT value FROM json_each(?1))",
    "DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?1))",
];

#[async_trait]
impl Retention for SqliteStore {
    async fn prune_finished(&self, older_than: Duration, limit: u32) -> Result<Pruned, StoreError> {
        let cutoff = stored_time(OffsetDateTime::now_utc() - older_than)?;
        let mut tx = self.begin().await?;
        tx.execute("PRAGMA defer_foreign_keys = ON", args![])
            .await?;
        tx.execute("INSERT INTO onejob_retention_pass DEFAULT VALUES", args![])
            .await?;
        let doomed = tx.all(DOOMED, args![cutoff.as_str(), limit]).await?;
        let mut ids = Vec::with_capacity(doomed.len());
        let mut keys = Vec::with_capacity(doomed.len());
        for row in &doomed {
            ids.push(Self::uuid(row, "id")?);
            keys.push(rows::key_of::<Self>(row)?);
        }
        let counts = delete_batch(&mut tx, &ids).await?;
        tx.execute("DELETE FROM onejob_retention_pass", args![])
            .await?;
        tx.commit().await?;
        self.settled().forget(keys);
        let [events, attempts, jobs] = counts;
        Ok(Pruned {
            jobs,
            attempts,
            events,
            busy: false,
        })
    }
}

/// Deletes the events, attempts and jobs of `ids`: how many of each.
async fn delete_batch(
    tx: &mut Tx<SqliteStore>,
    ids: &[uuid::Uuid],
) -> Result<[u64; 3], StoreError> {
    let mut counts = [0u64; 3];
    if ids.is_empty() {
        return Ok(counts);
    }
    for (count, statement) in counts.iter_mut().zip(DELETES) {
        *count = tx.execute(statement, args![ids]).await?;
    }
    Ok(counts)
}

/// A point in time as SQLite's columns hold it (`strftime('%Y-%m-%dT%H:%M:%fZ')`: UTC,
/// milliseconds), so that it compares with them as text.
fn stored_time(at: OffsetDateTime) -> Result<String, StoreError> {
    at.to_offset(time::UtcOffset::UTC)
        .format(format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
        ))
        .map_err(|e| StoreError::Corrupt(format!("a cutoff time cannot be written: {e}")))
}
