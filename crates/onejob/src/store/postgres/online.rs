//! Online schema steps on PostgreSQL: changes that cannot run inside sqlx's transactional
//! migrations, run by `onejob migrate` (and every start) right after them.
//!
//! The one step so far widens the key's unique scope (docs/design.md §2.10, migration
//! `20261130000006_key_scope.sql`): from `jobs_one_per_key (tenant, user_id, key_hash)` to
//! the index `jobs_one_per_key_scope (tenant, user_id, environment, key_hash)`, without a
//! moment in which no unique boundary holds:
//!
//! 1. `build-index`: `CREATE UNIQUE INDEX CONCURRENTLY` (writes go on meanwhile). A build
//!    that was killed leaves an *invalid* index behind; it is dropped (concurrently) and
//!    built again.
//! 2. `verify-index`: the index must be the one step 1 builds — an index on `jobs`,
//!    `indisunique`, without a predicate or expressions, over exactly `(tenant, user_id,
//!    environment, key_hash)` in that order — and `indisvalid`, `indisready` and `indislive`
//!    in `pg_index`; otherwise the step fails and nothing is dropped. The definition matters
//!    because `CREATE … IF NOT EXISTS` skips the build whenever *any* relation of that name
//!    exists: a non-unique or partial index created by hand under the name would otherwise
//!    pass for the boundary while the real one is dropped. Such an index is never dropped
//!    by onejob (it is not onejob's); the error says what is wrong with it and how to fix it.
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

/// The key columns of [`KEY_SCOPE_INDEX`], in order.
pub const KEY_SCOPE_COLUMNS: [&str; 4] = ["tenant", "user_id", "environment", "key_hash"];

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
    /// A relation named `jobs_one_per_key_scope` exists (valid or not, right or wrong).
    pub wide_exists: bool,
    /// `jobs_one_per_key_scope` is the index onejob builds (see [`WideIndex::defects`]) and
    /// is valid, ready and live: it enforces uniqueness for all rows.
    pub wide_valid: bool,
    /// A relation named `jobs_one_per_key_scope` exists but is not the index onejob builds
    /// (not unique, partial, other columns, …): it is no boundary, and the migration stops.
    pub wide_wrong: bool,
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

/// What the catalog says about the relation named [`KEY_SCOPE_INDEX`] (in the schema of
/// `jobs`, where `CREATE INDEX` puts it and where its `IF NOT EXISTS` looks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WideIndex {
    /// `pg_class.relkind` (`i` for an index).
    pub relkind: String,
    /// The table it indexes; `None` when it is no index.
    pub table: Option<String>,
    /// `pg_index.indisunique`.
    pub unique: bool,
    /// Its predicate (`pg_index.indpred`, as SQL): a partial index.
    pub predicate: Option<String>,
    /// `pg_index.indexprs IS NOT NULL`: some column is an expression.
    pub expressions: bool,
    /// Its columns (`pg_index.indkey`, key and included ones), in order, by name
    /// (`(expression)` for an expression).
    pub columns: Vec<String>,
    /// `indisvalid AND indisready AND indislive`.
    pub valid: bool,
}

impl WideIndex {
    /// What makes it another index than the one `build-index` creates (empty: it is that
    /// index, valid or not).
    pub fn defects(&self) -> Vec<String> {
        if self.relkind != "i" {
            return vec![format!("it is not an index (relkind {:?})", self.relkind)];
        }
        let mut defects = Vec::new();
        if let Some(table) = self.table.as_deref().filter(|table| *table != "jobs") {
            defects.push(format!("it indexes table {table}, not jobs"));
        }
        if !self.unique {
            defects.push("it is not unique".to_owned());
        }
        if let Some(predicate) = &self.predicate {
            defects.push(format!("it has a predicate (WHERE {predicate})"));
        }
        if self.expressions {
            defects.push("it indexes expressions".to_owned());
        }
        if self.columns != KEY_SCOPE_COLUMNS {
            defects.push(format!(
                "it has columns ({}) instead of ({})",
                self.columns.join(", "),
                KEY_SCOPE_COLUMNS.join(", ")
            ));
        }
        defects
    }
}

/// Reads the relation named [`KEY_SCOPE_INDEX`], if there is one.
pub async fn wide_index(conn: &mut PgConnection) -> Result<Option<WideIndex>, StoreError> {
    // relkind, table, indisunique, predicate, expressions, columns, valid: the `pg_index`
    // ones are NULL when the relation is no index.
    type Row = (
        String,
        Option<String>,
        Option<bool>,
        Option<String>,
        Option<bool>,
        Option<Vec<String>>,
        Option<bool>,
    );
    let row: Option<Row> = sqlx::query_as(
        "SELECT c.relkind::text, t.relname::text, i.indisunique, \
         pg_get_expr(i.indpred, i.indrelid), i.indexprs IS NOT NULL, \
         CASE WHEN i.indexrelid IS NOT NULL THEN ARRAY( \
           SELECT COALESCE(a.attname::text, '(expression)') \
           FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n) \
           LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
           ORDER BY k.n) END, \
         i.indisvalid AND i.indisready AND i.indislive \
         FROM pg_class c \
         LEFT JOIN pg_index i ON i.indexrelid = c.oid \
         LEFT JOIN pg_class t ON t.oid = i.indrelid \
         WHERE c.relname = $1 \
           AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'jobs'::regclass)",
    )
    .bind(KEY_SCOPE_INDEX)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.map(
        |(relkind, table, unique, predicate, expressions, columns, valid)| WideIndex {
            relkind,
            table,
            unique: unique.unwrap_or(false),
            predicate,
            expressions: expressions.unwrap_or(false),
            columns: columns.unwrap_or_default(),
            valid: valid.unwrap_or(false),
        },
    ))
}

/// Reads where the widening stands.
pub async fn key_scope(conn: &mut PgConnection) -> Result<KeyScope, StoreError> {
    Ok(catalog(conn).await?.0)
}

/// Where the widening stands, and the relation named [`KEY_SCOPE_INDEX`].
async fn catalog(conn: &mut PgConnection) -> Result<(KeyScope, Option<WideIndex>), StoreError> {
    let narrow: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_constraint \
         WHERE conname = $1 AND conrelid = 'jobs'::regclass)",
    )
    .bind(NARROW_CONSTRAINT)
    .fetch_one(&mut *conn)
    .await?;
    let wide = wide_index(conn).await?;
    let wrong = wide
        .as_ref()
        .is_some_and(|index| !index.defects().is_empty());
    let scope = KeyScope {
        narrow,
        wide_exists: wide.is_some(),
        wide_valid: !wrong && wide.as_ref().is_some_and(|index| index.valid),
        wide_wrong: wrong,
    };
    Ok((scope, wide))
}

/// The error for a relation under [`KEY_SCOPE_INDEX`]'s name that is not that index: what is
/// wrong with it and how to fix it. Nothing has been dropped.
fn wrong_index(index: &WideIndex, narrow: bool) -> StoreError {
    let fix = if index.relkind == "i" {
        // Spelled out, not formatted: no SQL is built from strings (tests/sql_is_static.rs).
        "drop it (DROP INDEX CONCURRENTLY jobs_one_per_key_scope)".to_owned()
    } else {
        "rename or drop it".to_owned()
    };
    let boundary = if narrow {
        format!("{NARROW_CONSTRAINT} stays in force")
    } else {
        format!(
            "{NARROW_CONSTRAINT} is already gone, so no unique boundary on keys is in force \
             until the index is rebuilt"
        )
    };
    StoreError::Schema(format!(
        "index {KEY_SCOPE_INDEX} exists but is not the key index onejob builds: {}; \
         {boundary}; {fix} and run onejob migrate again",
        index.defects().join(", ")
    ))
}

/// Runs the widening to its end (or as far as it can), each step after the previous one
/// succeeded; a no-op when it is done.
///
/// On a database whose schema was `created` just now the steps are how the index comes to
/// be, not an upgrade of anything: they are logged at debug, not info.
pub async fn widen_key_scope(pool: &PgPool, created: bool) -> Result<KeyScope, StoreError> {
    let mut conn = pool.acquire().await?;
    sqlx::query("SET application_name = 'onejob-migrate'")
        .execute(&mut *conn)
        .await?;
    let scope = key_scope(&mut conn).await?;
    if scope.is_done() {
        return Ok(scope);
    }
    take_turn(&mut conn).await?;
    let finished = run_steps(&mut conn, created).await;
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

async fn run_steps(
    conn: &mut PoolConnection<Postgres>,
    created: bool,
) -> Result<KeyScope, StoreError> {
    let (mut scope, _) = catalog(conn).await?;
    // A wrong index under the name is left alone: `IF NOT EXISTS` then skips the build, and
    // `verify-index` refuses it.
    if !scope.wide_valid && !scope.wide_wrong {
        if scope.wide_exists {
            tracing::warn!(
                index = KEY_SCOPE_INDEX,
                "an earlier build was interrupted and left an invalid index; building it again"
            );
            sqlx::raw_sql("DROP INDEX CONCURRENTLY IF EXISTS jobs_one_per_key_scope")
                .execute(&mut **conn)
                .await?;
        }
        if created {
            tracing::debug!(index = KEY_SCOPE_INDEX, "building the key index");
        } else {
            tracing::info!(
                index = KEY_SCOPE_INDEX,
                "building the widened key index concurrently"
            );
        }
        sqlx::raw_sql(
            "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS jobs_one_per_key_scope \
             ON jobs (tenant, user_id, environment, key_hash)",
        )
        .execute(&mut **conn)
        .await?;
    }
    crate::fault::after_migration_step(STEPS[0]);

    let wide;
    (scope, wide) = catalog(conn).await?;
    if let Some(index) = wide.as_ref().filter(|_| scope.wide_wrong) {
        return Err(wrong_index(index, scope.narrow));
    }
    if !scope.wide_valid {
        return Err(StoreError::Schema(format!(
            "the index {KEY_SCOPE_INDEX} is not valid after its build; {NARROW_CONSTRAINT} \
             stays in force (run `onejob migrate` again)"
        )));
    }
    crate::fault::after_migration_step(STEPS[1]);

    if scope.narrow {
        if created {
            tracing::debug!(
                constraint = NARROW_CONSTRAINT,
                "dropping the narrower constraint"
            );
        } else {
            tracing::info!(
                constraint = NARROW_CONSTRAINT,
                "the widened key index is valid; dropping the old constraint"
            );
        }
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
