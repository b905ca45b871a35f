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
//! reads the started jobs back.

use sqlx::{PgConnection, postgres::PgRow};
use uuid::Uuid;

use super::PgStore;
use crate::store::{AttemptRecord, FirstAttempts, JobRecord, StoreError, rows};

/// `$1` limit, `$2` kinds, `$3` their providers, `$4` their timeouts (seconds), `$5` the
/// worker, `$6` the lease (seconds), `$7` an id for each attempt → the attempts.
const START_FIRST: &str = concat!(
    "WITH kinds AS (SELECT * FROM unnest($2::text[], $3::text[], $4::float8[]) \
       AS k (kind, provider, timeout)), \
     due AS (SELECT j.id, j.tenant, j.kind FROM jobs j \
       WHERE j.dispatch_at <= now() AND j.state = 'pending' AND j.attempts = 0 \
       AND j.kind = ANY($2) ORDER BY j.dispatch_at LIMIT $1 FOR UPDATE SKIP LOCKED), \
     numbered AS (SELECT due.id, due.tenant, k.provider, k.timeout, \
       row_number() OVER (ORDER BY due.id) AS n \
       FROM due JOIN kinds k USING (kind)), \
     started AS (UPDATE jobs SET state = 'running', attempts = attempts + 1, \
       version = version + 1, dispatch_at = NULL, updated_at = now() \
       FROM numbered WHERE jobs.id = numbered.id AND jobs.tenant = numbered.tenant \
       RETURNING jobs.id), \
     inserted AS (INSERT INTO attempts (",
    new_attempt_columns!(),
    ") SELECT ",
    first_attempt_values!(
        "ids.id",
        "numbered.id",
        "numbered.provider",
        "$5",
        "$6",
        "numbered.timeout",
        "numbered.tenant"
    ),
    " FROM started JOIN numbered ON numbered.id = started.id \
       JOIN unnest($7::uuid[]) WITH ORDINALITY AS ids (id, n) ON ids.n = numbered.n \
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
);

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

    /// Both statements prepare on the migrated schema.
    #[tokio::test]
    async fn the_batch_statements_prepare_on_the_schema() {
        let (mut db, _) = fresh!("onejob_unit_first_attempts").await;
        for sql in [START_FIRST, JOBS] {
            (&mut db).prepare(sql.into_sql_str()).await.unwrap();
        }
    }
}
