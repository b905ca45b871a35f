//! The statistics intake's cached plans are made from: `jobs` is analyzed when an intake
//! connection opens on a table that holds rows that were never analyzed.
//!
//! Intake's sessions keep one generic plan per statement for the connection's life. Made on
//! a `jobs` table that holds rows but has no statistics (after a restore, with autovacuum
//! off, or in the minute before autovacuum's first analyze), that plan looks keys up through
//! the owner's index `jobs_owner_recent`: without statistics both indexes are estimated to
//! return one row, and the narrower one costs a hair less. It then reads every job of the
//! owner for each submission (bench/analysis.md has how much slower that is). Once `jobs` has statistics, the planner picks the key's unique index, so
//! each new intake connection checks whether it has them, and has `jobs` analyzed if not.

use sqlx::{PgConnection, PgPool};

/// Whether `jobs` holds rows but the planner has no statistics on it: no row of `pg_stats`
/// for it in the current schema (empty tables, analyzed or not, are planned safely).
const NEVER_ANALYZED: &str = "SELECT NOT EXISTS (SELECT 1 FROM pg_stats \
                                  WHERE schemaname = current_schema() AND tablename = 'jobs') \
                              AND EXISTS (SELECT 1 FROM jobs)";

/// If `jobs` holds rows that were never analyzed (checked on `connection`), analyzes it in
/// the background on a connection of `analyzer`: analyzing a large table may take longer
/// than the connection's caller should wait, and its end replans the cached plans anyway.
/// Failures are logged, never returned: without statistics intake still works, slower.
pub(super) async fn analyze_if_never_analyzed(connection: &mut PgConnection, analyzer: PgPool) {
    match never_analyzed(connection).await {
        Ok(false) => {}
        Ok(true) => {
            tokio::spawn(async move {
                if let Err(error) = analyze(&analyzer).await {
                    tracing::warn!(%error, "could not analyze jobs");
                }
            });
        }
        Err(error) => tracing::warn!(%error, "could not check jobs' statistics"),
    }
}

/// Whether `jobs` holds rows that were never analyzed.
pub(super) async fn never_analyzed(connection: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(NEVER_ANALYZED)
        .fetch_one(connection)
        .await
}

/// Analyzes `jobs`.
///
/// `ANALYZE` samples at most 30,000 rows (at the default statistics target) whatever the
/// table's size, and does not block writers. It also invalidates every session's cached
/// plans on `jobs`, so every connection replans with the statistics. Without the right to
/// analyze `jobs` (not its owner), PostgreSQL skips it with a warning; onejob then relies
/// on autovacuum, as before.
async fn analyze(pool: &PgPool) -> Result<(), sqlx::Error> {
    tracing::info!("jobs holds rows that were never analyzed: analyzing it for intake's plans");
    sqlx::query("ANALYZE jobs").execute(pool).await?;
    Ok(())
}
