//! Retention on SQLite: one batch of finished jobs deleted with their attempts and events
//! (see the PostgreSQL twin for why the event log lets it through).
//!
//! SQLite's single writer makes the pass exclusive, and the three tables' cycle of foreign
//! keys is handled by deferring their checks to the commit (`PRAGMA defer_foreign_keys`,
//! which lasts until the transaction ends). The jobs are chosen by the same query three
//! times inside one write transaction, so it names the same jobs each time.

use async_trait::async_trait;
use std::time::Duration;

/// The finished jobs a pass deletes, oldest first (`?1` the age as a `strftime` modifier,
/// `?2` the batch size).
macro_rules! doomed {
    () => {
        concat!(
            "WHERE state IN ('succeeded', 'failed', 'cancelled') AND updated_at < ",
            "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?1) ORDER BY updated_at LIMIT ?2"
        )
    };
}
use super::SqliteStore;
use crate::store::{Pruned, Retention, StoreError, backend::Backend};

#[async_trait]
impl Retention for SqliteStore {
    async fn prune_finished(&self, older_than: Duration, limit: u32) -> Result<Pruned, StoreError> {
        let before = format!("-{:.3} seconds", older_than.as_secs_f64());
        let mut tx = self.begin().await?;
        tx.execute("PRAGMA defer_foreign_keys = ON", args![])
            .await?;
        tx.execute("INSERT INTO onejob_retention_pass DEFAULT VALUES", args![])
            .await?;
        let mut counts = [0u64; 3];
        for (n, statement) in [
            concat!(
                "DELETE FROM job_events WHERE job_id IN (SELECT id FROM jobs ",
                doomed!(),
                ")"
            ),
            concat!(
                "DELETE FROM attempts WHERE job_id IN (SELECT id FROM jobs ",
                doomed!(),
                ")"
            ),
            concat!(
                "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs ",
                doomed!(),
                ")"
            ),
        ]
        .into_iter()
        .enumerate()
        {
            counts[n] = tx.execute(statement, args![before.as_str(), limit]).await?;
        }
        tx.execute("DELETE FROM onejob_retention_pass", args![])
            .await?;
        tx.commit().await?;
        let [events, attempts, jobs] = counts;
        Ok(Pruned {
            jobs,
            attempts,
            events,
            busy: false,
        })
    }
}
