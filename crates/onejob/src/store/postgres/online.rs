//! Online schema steps on PostgreSQL: changes that cannot run inside sqlx's transactional
//! migrations, run by `onejob migrate` (and every start) right after them.
//!
//! The one step so far widens the key's unique scope (DESIGN §2.10, migration
//! `20261130000006_key_scope.sql`): from `jobs_one_per_key (tenant, user_id, key_hash)` to
//! the index `jobs_one_per_key_scope (tenant, user_id, environment, key_hash)`, without a
//! moment in which no unique boundary holds:
//!
//! 1. `build-index`: `CREATE UNIQUE INDEX CONCURRENTLY` (writes go on meanwhile). A build
//!    that was killed leaves an *invalid* index behind; it is dropped (concurrently) and
//!    built again.
//! 2. `verify-index`: the index must be `indisvalid`, `indisready` and `indislive` in
//!    `pg_index`; otherwise the step fails and nothing is dropped.
//! 3. `drop-narrow`: only then `ALTER TABLE jobs DROP CONSTRAINT jobs_one_per_key` (a short
//!    lock, bounded by `lock_timeout`; on a table too busy to lock, the old constraint simply
//!    stays until the next run, which is safe).
//!
//! Each step reads its state from the catalog, not from a progress table, so the sequence is
//! resumable from wherever a migrator died: rerunning `onejob migrate` finishes it. Before
//! step 3 the old, narrower constraint refuses every duplicate; after step 2 the new one does
//! too. Intake inserts with `ON CONFLICT DO NOTHING` (no conflict target), so it works with
//! either boundary or both.
//!
//! Migrators on several nodes take turns with a session advisory lock, taken by polling
//! `pg_try_advisory_lock`: a session *blocked* on a lock would hold a snapshot that the
//! concurrent build waits for, and the two would wait for each other.

use std::time::Duration;

use sqlx::{Connection, PgConnection, PgPool, Postgres, pool::PoolConnection};

use crate::store::StoreError;

/// The unique index of the widened key scope.
pub const KEY_SCOPE_INDEX: &str = "jobs_one_per_key_scope";

/// The narrow unique constraint it replaces.
pub const NARROW_CONSTRAINT: &str = "jobs_one_per_key";

/// The advisory lock id migrators take turns with (`"onejob-online"` as a number).
const ONLINE_LOCK: i64 = 0x6f6e_656a_6f62_6f6e;

/// The steps, in order, by the names `ONEJOB_FAULT=abort-after-migration-step:NAME` uses.
pub const STEPS: [&str; 3] = ["build-index", "verify-index", "drop-narrow"];

/// Where the widening stands, read from the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyScope {
    /// `jobs_one_per_key` still exists.
    pub narrow: bool,
    /// `jobs_one_per_key_scope` exists (valid or not).
    pub wide_exists: bool,
    /// `jobs_one_per_key_scope` is valid, ready and live: it enforces uniqueness for all rows.
    pub wide_valid: bool,
}

impl KeyScope {
    /// True when at least one unique boundary is fully in force.
    pub fn has_boundary(&self) -> bool {
        self.narrow || self.wide_valid
    }

    /// True when the widening is finished.
    pub fn is_done(&self) -> bool {
        !self.narrow && self.wide_valid
    }
}

/// Reads where the widening stands.
pub async fn key_scope(conn: &mut PgConnection) -> Result<KeyScope, StoreError> {
    let narrow: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_constraint \
         WHERE conname = $1 AND conrelid = 'jobs'::regclass)",
    )
    .bind(NARROW_CONSTRAINT)
    .fetch_one(&mut *conn)
    .await?;
    let wide: Option<bool> = sqlx::query_scalar(
        "SELECT i.indisvalid AND i.indisready AND i.indislive FROM pg_index i \
         JOIN pg_class c ON c.oid = i.indexrelid \
         WHERE c.relname = $1 AND i.indrelid = 'jobs'::regclass",
    )
    .bind(KEY_SCOPE_INDEX)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(KeyScope {
        narrow,
        wide_exists: wide.is_some(),
        wide_valid: wide.unwrap_or(false),
    })
}

/// Runs the widening to its end (or as far as it can), each step after the previous one
/// succeeded; a no-op when it is done.
pub async fn widen_key_scope(pool: &PgPool) -> Result<KeyScope, StoreError> {
    let mut conn = pool.acquire().await?;
    sqlx::query("SET application_name = 'onejob-migrate'")
        .execute(&mut *conn)
        .await?;
    let scope = key_scope(&mut conn).await?;
    if scope.is_done() {
        return Ok(scope);
    }
    take_turn(&mut conn).await?;
    let finished = run_steps(&mut conn).await;
    // Release the turn whatever happened; a dead session releases it by itself.
    let released = sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(ONLINE_LOCK)
        .execute(&mut *conn)
        .await;
    let scope = finished?;
    released?;
    Ok(scope)
}

/// Drops the narrow constraint under a short `lock_timeout` (so that writers queued behind
/// the `ALTER TABLE` wait at most that long), trying a few times; false if it never got the
/// lock.
async fn drop_narrow(conn: &mut PoolConnection<Postgres>) -> Result<bool, StoreError> {
    for _ in 0..3 {
        let mut tx = conn.begin().await?;
        sqlx::query("SET LOCAL lock_timeout = '2s'")
            .execute(&mut *tx)
            .await?;
        match sqlx::query("ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_one_per_key")
            .execute(&mut *tx)
            .await
        {
            Ok(_) => {
                tx.commit().await?;
                return Ok(true);
            }
            // 55P03 lock_not_available: someone held the table; try again.
            Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some("55P03") => {
                tx.rollback().await?;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(false)
}

async fn take_turn(conn: &mut PoolConnection<Postgres>) -> Result<(), StoreError> {
    loop {
        let mine: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(ONLINE_LOCK)
            .fetch_one(&mut **conn)
            .await?;
        if mine {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn run_steps(conn: &mut PoolConnection<Postgres>) -> Result<KeyScope, StoreError> {
    let mut scope = key_scope(conn).await?;
    if !scope.wide_valid {
        if scope.wide_exists {
            tracing::warn!(
                index = KEY_SCOPE_INDEX,
                "an earlier build was interrupted and left an invalid index; building it again"
            );
            sqlx::raw_sql("DROP INDEX CONCURRENTLY IF EXISTS jobs_one_per_key_scope")
                .execute(&mut **conn)
                .await?;
        }
        tracing::info!(
            index = KEY_SCOPE_INDEX,
            "building the widened key index concurrently"
        );
        sqlx::raw_sql(
            "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS jobs_one_per_key_scope \
             ON jobs (tenant, user_id, environment, key_hash)",
        )
        .execute(&mut **conn)
        .await?;
    }
    crate::fault::after_migration_step(STEPS[0]);

    scope = key_scope(conn).await?;
    if !scope.wide_valid {
        return Err(StoreError::Corrupt(format!(
            "the index {KEY_SCOPE_INDEX} is not valid after its build; {NARROW_CONSTRAINT} \
             stays in force (run `onejob migrate` again)"
        )));
    }
    crate::fault::after_migration_step(STEPS[1]);

    if scope.narrow {
        tracing::info!(
            constraint = NARROW_CONSTRAINT,
            "the widened key index is valid; dropping the old constraint"
        );
        if !drop_narrow(conn).await? {
            // Busy tables: the old, stricter constraint stays in force, which is safe; the
            // next start or `onejob migrate` drops it.
            tracing::warn!(
                constraint = NARROW_CONSTRAINT,
                "the old constraint could not be locked in time; it stays in force until the \
                 next `onejob migrate` or start"
            );
            return key_scope(conn).await;
        }
    }
    crate::fault::after_migration_step(STEPS[2]);
    key_scope(conn).await
}
