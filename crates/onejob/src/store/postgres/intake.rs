//! Intake on PostgreSQL: create-or-replay with group commit.
//!
//! Every submission goes to the intake [`Batcher`]. A batch is written with at most two
//! statements, each its own (autocommit) transaction:
//!
//! 1. one statement inserts every submission's job (`INSERT … SELECT FROM unnest(…) ON
//!    CONFLICT DO NOTHING RETURNING …`) and, in a data-modifying CTE, the `created` events of
//!    the rows it inserted: one round trip and one durable commit for the whole batch, the
//!    shape of the single `INSERT` the benchmark's ceiling measures. The key's unique index
//!    stays the arbiter (no conflict target is named, so the insert works under the old
//!    narrow constraint, the widened index, or both while `online` widens the scope); a
//!    conflict in one row never fails the others, and a replay inserts nothing, so a batch of
//!    replays commits no write and waits for no flush;
//! 2. only if some submissions were not inserted: one `SELECT` reads back the jobs under
//!    their keys. The insert waited for any transaction holding such a key, and has
//!    committed, so this read sees every winner: replays, conflicts, copies of a key within
//!    the batch, and keys another node took meanwhile.
//!
//! Rows are inserted in one global order (by key hash): two batches, on one node or on
//! several, that share keys then wait for each other's unique-index entries in the same
//! order and cannot deadlock. (Unordered, a storm of copies of the same keys across nodes
//! deadlocked, and every submission of the losing batch was answered 503.)
//!
//! What waits for nobody goes to [`Relaxed`]: the `replayed` events (a replay's answer
//! points at a job already durable, so it does not wait for its event) and the dispatch
//! wake-up, sent after the batch committed. If a batch fails for another reason than the
//! database being unavailable, its submissions are retried one by one, so a bad row fails
//! alone.

use std::{collections::HashMap, sync::Arc};

use futures::FutureExt;
use onejob_domain::{KeyHash, Principal};
use serde_json::Value;
use sqlx::{PgExecutor, PgPool, types::Json};
use uuid::Uuid;

use super::{PgJobRow, relaxed::Relaxed};
use crate::store::{
    Intake, JobRecord, NewEvent, NewJob, StoreError,
    batch::{Batcher, WriteBatch},
};

/// Most submissions one intake transaction carries.
pub(super) const MAX_BATCH: usize = 256;

/// Intake writer tasks: two transactions may be in flight, so commits overlap.
pub(super) const WRITERS: usize = 2;

/// The intake batcher.
pub(super) fn intake_batcher(pool: PgPool, relaxed: Relaxed) -> Batcher<NewJob, Intake> {
    let write: WriteBatch<NewJob, Intake> = Arc::new(move |jobs| {
        let pool = pool.clone();
        let relaxed = relaxed.clone();
        async move { write_intake(&pool, &relaxed, jobs).await }.boxed()
    });
    Batcher::spawn(WRITERS, MAX_BATCH, write)
}

async fn write_intake(
    pool: &PgPool,
    relaxed: &Relaxed,
    jobs: Vec<NewJob>,
) -> Vec<Result<Intake, StoreError>> {
    match write_batch(pool, relaxed, &jobs).await {
        Ok(results) => results,
        Err(error) if jobs.len() == 1 || error.is_retryable() => {
            let copies: Vec<_> = jobs
                .iter()
                .skip(1)
                .map(|_| Err(copy_error(&error)))
                .collect();
            std::iter::once(Err(error)).chain(copies).collect()
        }
        Err(_) => {
            // The insert failed, so nothing was written; one bad submission must not fail
            // the others: write them one by one.
            let mut results = Vec::with_capacity(jobs.len());
            for job in jobs {
                results.push(
                    match write_batch(pool, relaxed, std::slice::from_ref(&job)).await {
                        Ok(mut r) => r.pop().expect("one result per job"),
                        Err(error) => Err(error),
                    },
                );
            }
            results
        }
    }
}

/// The same failure for another submission of the batch (a [`StoreError`] is not `Clone`):
/// still retryable if it was, so its caller still answers 503.
fn copy_error(error: &StoreError) -> StoreError {
    if error.is_retryable() {
        StoreError::Unavailable(sqlx::Error::Protocol(error.to_string()))
    } else {
        StoreError::Corrupt(error.to_string())
    }
}

/// The key a job is found by: owner and key hash.
type Key = (String, String, Vec<u8>);

fn key_of(owner: &Principal, key_hash: &KeyHash) -> Key {
    (
        owner.tenant.clone(),
        owner.user.clone(),
        key_hash.0.to_vec(),
    )
}

/// The read-back of [`taken`]: `$1` tenants, `$2` users, `$3` key hashes.
macro_rules! taken_sql {
    () => {
        concat!(
            "SELECT job.* FROM unnest($1::text[], $2::text[], $3::bytea[]) AS batch (tenant, user_id, key_hash) \
             CROSS JOIN LATERAL (SELECT ",
            job_columns!(),
            " FROM jobs WHERE jobs.tenant = batch.tenant AND jobs.user_id = batch.user_id \
               AND jobs.environment = 'default' AND jobs.key_hash = batch.key_hash LIMIT 1) AS job"
        )
    };
}

/// The jobs already under these submissions' keys.
///
/// One index lookup per key, by construction: the `LIMIT 1` (the key is unique) keeps the
/// planner from turning the lateral subquery into a join, which it planned as a hash join
/// over a sequential scan of `jobs` once the cached generic plan was made on a small table.
/// Like every lookup by key, it names the environment (every job is in `'default'` until
/// environments are exposed, DESIGN §2.10), so the whole unique index `(tenant, user_id,
/// environment, key_hash)` applies, not only its owner prefix.
async fn taken(pool: &PgPool, jobs: &[&NewJob]) -> Result<HashMap<Key, JobRecord>, StoreError> {
    let rows: Vec<PgJobRow> = sqlx::query_as(taken_sql!())
        .bind(
            jobs.iter()
                .map(|j| j.owner.tenant.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            jobs.iter()
                .map(|j| j.owner.user.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            jobs.iter()
                .map(|j| j.key_hash.0.to_vec())
                .collect::<Vec<_>>(),
        )
        .fetch_all(pool)
        .await?;
    rows.into_iter()
        .map(|row| {
            let record = JobRecord::try_from(row)?;
            Ok((key_of(&record.owner, &record.key_hash), record))
        })
        .collect()
}

/// Inserts one batch with its `created` events, reads back what it did not insert, and
/// hands the rest to [`Relaxed`].
///
/// `Err` only when the insert failed, and so nothing was written. Once it committed, each
/// created job is answered `Created` whatever happens next; a failed read-back fails only
/// the submissions it was for (their clients retry and are answered by key).
async fn write_batch(
    pool: &PgPool,
    relaxed: &Relaxed,
    jobs: &[NewJob],
) -> Result<Vec<Result<Intake, StoreError>>, StoreError> {
    let created = insert_new(pool, jobs).await?;
    if !created.is_empty() {
        relaxed.wake_workers();
    }
    let rest: Vec<&NewJob> = jobs
        .iter()
        .filter(|j| !created.contains_key(&j.id))
        .collect();
    let existing = if rest.is_empty() {
        Ok(HashMap::new())
    } else {
        taken(pool, &rest).await
    };
    let mut results = Vec::with_capacity(jobs.len());
    let mut replayed = Vec::new();
    for job in jobs {
        if let Some(record) = created.get(&job.id) {
            results.push(Ok(Intake::Created(record.clone())));
            continue;
        }
        let found = match &existing {
            Ok(existing) => existing.get(&key_of(&job.owner, &job.key_hash)),
            Err(error) => {
                results.push(Err(copy_error(error)));
                continue;
            }
        };
        let Some(record) = found else {
            results.push(Err(StoreError::Corrupt(
                "a conflicting job vanished before it could be read back".into(),
            )));
            continue;
        };
        if job.matches(record) {
            replayed.push(job.replayed_event(record));
            results.push(Ok(Intake::Replayed(record.clone())));
        } else {
            results.push(Ok(Intake::Conflict(record.clone())));
        }
    }
    relaxed.log(replayed);
    Ok(results)
}

/// One statement, one commit: inserts the jobs whose keys are free and the `created` events
/// of exactly those rows; answers the inserted jobs by id.
async fn insert_new(
    pool: &PgPool,
    jobs: &[NewJob],
) -> Result<HashMap<Uuid, JobRecord>, StoreError> {
    let events: Vec<NewEvent> = jobs.iter().map(NewJob::created_event).collect();
    let rows: Vec<PgJobRow> = sqlx::query_as(concat!(
        "WITH inserted AS (\
           INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params) \
           SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::text[], \
           $6::bytea[], $7::jsonb[]) AS batch (id, tenant, user_id, key_hash, kind, fingerprint, params) \
           ORDER BY key_hash, tenant, user_id \
           ON CONFLICT DO NOTHING RETURNING ",
        job_columns!(),
        "), logged AS (\
           INSERT INTO job_events (job_id, attempt_id, kind, actor, detail) \
           SELECT event.* FROM unnest($1::uuid[], $8::uuid[], $9::text[], $10::text[], $11::jsonb[]) \
           AS event (job_id, attempt_id, kind, actor, detail) \
           WHERE event.job_id IN (SELECT id FROM inserted)) \
         SELECT * FROM inserted"
    ))
    .bind(jobs.iter().map(|j| j.id).collect::<Vec<_>>())
    .bind(jobs.iter().map(|j| j.owner.tenant.as_str()).collect::<Vec<_>>())
    .bind(jobs.iter().map(|j| j.owner.user.as_str()).collect::<Vec<_>>())
    .bind(jobs.iter().map(|j| j.key_hash.0.to_vec()).collect::<Vec<_>>())
    .bind(jobs.iter().map(|j| j.kind.as_str()).collect::<Vec<_>>())
    .bind(jobs.iter().map(|j| j.fingerprint.0.to_vec()).collect::<Vec<_>>())
    .bind(jobs.iter().map(|j| Json(&j.params)).collect::<Vec<_>>())
    .bind(events.iter().map(|e| e.attempt_id).collect::<Vec<_>>())
    .bind(events.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>())
    .bind(events.iter().map(|e| e.actor.as_deref()).collect::<Vec<_>>())
    .bind(events.iter().map(|e| Json(&e.detail)).collect::<Vec<Json<&Value>>>())
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|row| {
            let record = JobRecord::try_from(row)?;
            Ok((record.id, record))
        })
        .collect()
}

/// Appends events with one statement.
pub(super) async fn insert_events<'c>(
    executor: impl PgExecutor<'c>,
    events: &[NewEvent],
) -> Result<(), StoreError> {
    if events.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO job_events (job_id, attempt_id, kind, actor, detail) \
         SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::jsonb[])",
    )
    .bind(events.iter().map(|e| e.job_id).collect::<Vec<_>>())
    .bind(events.iter().map(|e| e.attempt_id).collect::<Vec<_>>())
    .bind(events.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>())
    .bind(
        events
            .iter()
            .map(|e| e.actor.as_deref())
            .collect::<Vec<_>>(),
    )
    .bind(
        events
            .iter()
            .map(|e| Json(&e.detail))
            .collect::<Vec<Json<&Value>>>(),
    )
    .execute(executor)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use sqlx::{Connection, Executor, PgConnection, PgPool, postgres::PgConnectOptions};

    use crate::store::{Store, postgres::PgStore};

    /// A fresh database holding 20,000 jobs of one owner, analyzed, on the test PostgreSQL.
    async fn large_owner() -> PgConnection {
        let admin = std::env::var("ONEJOB_TEST_POSTGRES")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let mut conn = PgConnection::connect(&admin)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL is required for the tests ({admin}): {e}"));
        conn.execute("DROP DATABASE IF EXISTS onejob_unit_key_lookup WITH (FORCE)")
            .await
            .unwrap();
        conn.execute("CREATE DATABASE onejob_unit_key_lookup")
            .await
            .unwrap();
        let options: PgConnectOptions = admin.parse().unwrap();
        let options = options.database("onejob_unit_key_lookup");
        let store = PgStore::from_pool(PgPool::connect_with(options.clone()).await.unwrap());
        store.migrate().await.unwrap();
        let mut db = PgConnection::connect_with(&options).await.unwrap();
        db.execute(
            "INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params) \
             SELECT gen_random_uuid(), 'acme', 'alice', sha256(i::text::bytea), 'chat', \
                    sha256(i::text::bytea), '{}'::jsonb \
             FROM generate_series(1, 20000) AS i; \
             ANALYZE jobs",
        )
        .await
        .unwrap();
        db
    }

    /// The read-back stays one lookup of the whole unique key per submission, with a custom
    /// plan and with the cached generic plan sqlx's prepared statement ends up using. (Before
    /// the lookups named the environment, the generic plan was a hash join over a sequential
    /// scan of `jobs`, and the key hash was never part of an index condition.)
    #[tokio::test]
    async fn the_read_back_looks_each_key_up_in_the_unique_index() {
        let mut db = large_owner().await;
        db.execute(concat!(
            "PREPARE taken(text[], text[], bytea[]) AS ",
            taken_sql!()
        ))
        .await
        .unwrap();
        for mode in ["force_custom_plan", "force_generic_plan"] {
            sqlx::query("SELECT set_config('plan_cache_mode', $1, false)")
                .bind(mode)
                .execute(&mut db)
                .await
                .unwrap();
            let plan: Vec<String> = sqlx::query_scalar(
                "EXPLAIN EXECUTE taken(ARRAY['acme', 'acme'], ARRAY['alice', 'alice'], \
                 ARRAY[sha256('7'::bytea), sha256('no such key'::bytea)])",
            )
            .fetch_all(&mut db)
            .await
            .unwrap();
            let plan = plan.join("\n");
            assert!(
                plan.contains("jobs_one_per_key_scope") && !plan.contains("Seq Scan on jobs"),
                "{mode}:\n{plan}"
            );
            let condition = plan
                .lines()
                .find(|line| line.contains("Index Cond"))
                .unwrap_or_default();
            assert!(
                condition.contains("key_hash") && condition.contains("environment"),
                "{mode}:\n{plan}"
            );
        }
        db.close().await.unwrap();
    }
}
