//! First attempts on PostgreSQL, many jobs in one statement: the batch form of a start
//! ([`crate::store::Transitions::start_first_attempts`]), and with intake the one other
//! place where the PostgreSQL store writes a rule in SQL of its own instead of in the
//! generic statements.
//!
//! One statement locks up to N due jobs that never had an attempt (`FOR UPDATE SKIP
//! LOCKED`, so two workers claiming side by side split the jobs between them instead of
//! queueing), makes each `running`, inserts its attempt number 1 and logs its
//! `attempt_started`, in data-modifying CTEs: one round trip and one commit for the batch.
//! The guard is the single start's: the row lock, the conditions re-checked on the locked
//! row (`pending`, due, no attempt), and the attempt's unique indexes. A second statement
//! reads the started jobs back. Each step's rows carry what the next needs (a job's kind
//! picks its provider and timeout from the parameters, its row number its attempt's id), so
//! no step joins two of the statement's own results: planned for a handful of rows, such a
//! join is a nested loop over both, quadratic in the batch.

use sqlx::{PgConnection, postgres::PgRow};
use uuid::Uuid;

use super::PgStore;
use crate::store::{AttemptRecord, FirstAttempts, JobRecord, StoreError, rows};

/// The batch's statement ([`START_FIRST`]), as a macro so that a test can prepare it under
/// a name (`concat!`: SQL is never built by formatting).
macro_rules! start_first_sql {
    () => {
        concat!(
    "WITH due AS (SELECT j.id, j.tenant, array_position($2::text[], j.kind) AS k FROM jobs j \
       WHERE j.dispatch_at <= now() AND j.state = 'pending' AND j.attempts = 0 \
       AND j.kind = ANY($2) ORDER BY j.dispatch_at LIMIT $1 FOR UPDATE SKIP LOCKED), \
     numbered AS (SELECT due.id, due.tenant, ($3::text[])[due.k] AS provider, \
       ($4::float8[])[due.k] AS timeout, \
       ($7::uuid[])[row_number() OVER (ORDER BY due.id)] AS attempt_id FROM due), \
     started AS (UPDATE jobs SET state = 'running', attempts = attempts + 1, \
       version = version + 1, dispatch_at = NULL, updated_at = now() \
       FROM numbered WHERE jobs.id = numbered.id AND jobs.tenant = numbered.tenant \
       RETURNING jobs.id, numbered.attempt_id, numbered.provider, numbered.timeout, \
       numbered.tenant), \
     inserted AS (INSERT INTO attempts (",
    new_attempt_columns!(),
    ") SELECT ",
    first_attempt_values!(
        "started.attempt_id",
        "started.id",
        "started.provider",
        "$5",
        "$6",
        "started.timeout",
        "started.tenant"
    ),
    " FROM started \
       RETURNING tenant, ",
    attempt_columns!(),
    "), \
     logged AS (INSERT INTO job_events (job_id, attempt_id, kind, detail, tenant) \
       SELECT job_id, id, 'attempt_started', ",
    attempt_started_detail!("number", "provider", "hedge"),
    ", tenant FROM inserted) \
     SELECT ",
    attempt_columns!(),
    " FROM inserted"
)
    };
}

/// `$1` limit, `$2` kinds, `$3` their providers, `$4` their timeouts (seconds), `$5` the
/// worker, `$6` the lease (seconds), `$7` an id for each attempt → the attempts.
const START_FIRST: &str = start_first_sql!();

/// The started jobs: `$1` their ids.
const JOBS: &str = concat!("SELECT ", job_columns!(), " FROM jobs WHERE id = ANY($1)");

/// Starts the batch's first attempts (see the module doc).
pub(super) async fn start_first(
    connection: &mut PgConnection,
    batch: &FirstAttempts,
) -> Result<Vec<(JobRecord, AttemptRecord)>, StoreError> {
    let ids: Vec<Uuid> = (0..batch.limit).map(|_| Uuid::now_v7()).collect();
    let attempts: Vec<PgRow> = sqlx::query(START_FIRST)
        .bind(i64::from(batch.limit))
        .bind(
            batch
                .kinds
                .iter()
                .map(|k| k.kind.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            batch
                .kinds
                .iter()
                .map(|k| k.provider.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            batch
                .kinds
                .iter()
                .map(|k| k.timeout.as_secs_f64())
                .collect::<Vec<_>>(),
        )
        .bind(&batch.worker)
        .bind(batch.lease.as_secs_f64())
        .bind(ids)
        .fetch_all(&mut *connection)
        .await?;
    if attempts.is_empty() {
        return Ok(Vec::new());
    }
    let attempts = rows::all::<PgStore, _>(&attempts, rows::attempt::<PgStore>)?;
    let job_ids: Vec<Uuid> = attempts.iter().map(|a| a.job_id).collect();
    let jobs = sqlx::query(JOBS)
        .bind(&job_ids)
        .fetch_all(&mut *connection)
        .await?;
    let mut jobs = rows::all::<PgStore, _>(&jobs, rows::job::<PgStore>)?;
    attempts
        .into_iter()
        .map(|attempt| {
            let at = jobs
                .iter()
                .position(|job| job.id == attempt.job_id)
                .ok_or_else(|| StoreError::Corrupt(format!("no job {}", attempt.job_id)))?;
            Ok((jobs.swap_remove(at), attempt))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use sqlx::{Executor, SqlSafeStr};

    use super::{JOBS, START_FIRST};
    use crate::store::postgres::fresh;

    /// The batch's generic plan joins none of its own steps' results by comparing every row
    /// of one with every row of the other (a join filter), which is quadratic in the batch:
    /// 65,280 comparisons for a batch of 256.
    #[tokio::test]
    async fn the_batch_never_compares_every_row_with_every_other() {
        let (mut db, _) = fresh!("onejob_unit_first_attempts_plan").await;
        (&mut db)
            .execute("SET plan_cache_mode = force_generic_plan")
            .await
            .unwrap();
        (&mut db)
            .execute(concat!(
                "PREPARE start_first(int, text[], text[], float8[], text, float8, uuid[]) AS ",
                start_first_sql!()
            ))
            .await
            .unwrap();
        let plan: Vec<String> = sqlx::query_scalar(
            "EXPLAIN EXECUTE start_first(256, ARRAY['chat'], ARRAY['a'], ARRAY[60::float8], \
             'w', 30, ARRAY[gen_random_uuid()])",
        )
        .fetch_all(&mut db)
        .await
        .unwrap();
        let plan = plan.join("\n");
        assert!(!plan.contains("Join Filter"), "a join filter:\n{plan}");
    }

    /// Both statements prepare on the migrated schema.
    #[tokio::test]
    async fn the_batch_statements_prepare_on_the_schema() {
        let (mut db, _) = fresh!("onejob_unit_first_attempts").await;
        for sql in [START_FIRST, JOBS] {
            (&mut db).prepare(sql.into_sql_str()).await.unwrap();
        }
    }
}
