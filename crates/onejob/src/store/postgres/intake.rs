//! Intake on PostgreSQL: create-or-replay with group commit.
//!
//! Every submission goes to the intake [`Batcher`]. A batch is written with one statement,
//! and a second only when concurrent writers raced for its keys, each its own (autocommit)
//! transaction:
//!
//! 1. one statement inserts every submission's job (`INSERT … SELECT FROM unnest(…) ON
//!    CONFLICT DO NOTHING RETURNING …`), in a data-modifying CTE the `created` events of the
//!    rows it inserted, and in another CTE looks up, in its snapshot, the jobs already under
//!    the keys it did not insert (a new key is not looked up twice): one round trip and one
//!    durable commit for the whole batch, the shape of the single `INSERT` the benchmark's
//!    ceiling measures, and one round trip with no write and no flush for a batch of
//!    replays. The key's unique index stays the arbiter (no
//!    conflict target is named, so the insert works under the old narrow constraint, the
//!    widened index, or both while `online` widens the scope); a conflict in one row never
//!    fails the others;
//! 2. only if some submissions were neither inserted nor found (a key another transaction
//!    committed after the statement's snapshot was taken, or a second copy of a key within
//!    the batch): one `SELECT` reads back the jobs under those keys. The insert waited for
//!    any transaction holding such a key, and has committed, so this read, a new statement
//!    with a new snapshot, sees every winner.
//!
//! Rows are inserted in one global order (by key hash): two batches, on one node or on
//! several, that share keys then wait for each other's unique-index entries in the same
//! order and cannot deadlock. (Unordered, a storm of copies of the same keys across nodes
//! deadlocked, and every submission of the losing batch was answered 503.)
//!
//! The writer keeps its connection between batches ([`HeldConnection`]): taken from the pool
//! for each batch, it would cost two more round trips per batch (sqlx checks a connection
//! when it is acquired and when it is released); bench/journal.md has the A/B.
//!
//! What waits for nobody goes to [`Relaxed`]: the `replayed` events (a replay's answer
//! points at a job already durable, so it does not wait for its event) and the dispatch
//! wake-up, sent after the batch committed. If a batch fails for another reason than the
//! database being unavailable, its submissions are retried one by one, so a bad row fails
//! alone.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use futures::FutureExt;
use onejob_domain::{KeyHash, Principal};
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor, PgPool, postgres::PgPoolOptions, types::Json};
use uuid::Uuid;

use super::{
    PgStore,
    connections::{
        Hosts,
        held::{HeldConnection, Spare},
        side_pool, tcp,
    },
    relaxed::Relaxed,
    statistics,
};
use crate::store::{
    Intake, JobRecord, NewEvent, NewJob, StoreError,
    batch::{Batcher, WriteBatch},
    bound::Bound,
    rows,
};

/// Most submissions one intake transaction carries.
pub(super) const MAX_BATCH: usize = 256;

/// Intake writer tasks: one, so that every submission that arrives while a batch commits
/// joins the next batch.
///
/// A second writer overlaps one batch's flush with the next batch's statement, but halves
/// the batches, and fuller batches share more of each flush; so do not raise this without
/// the A/B in bench/journal.md, which also covers writers overlapping only from `COMMIT`
/// on.
pub(super) const WRITERS: usize = 1;

/// The intake batcher, writing through [`intake_pool`], each writer on a connection it holds
/// across batches ([`HeldConnection`]: going through the pool for every batch cost two more
/// round trips per batch), and poking a [`statistics::Watch`] after each batch.
pub(super) fn intake_batcher(
    pool: &PgPool,
    hosts: Option<&Arc<Hosts>>,
    bound: &Bound,
    relaxed: Relaxed,
    watch: statistics::Watch,
) -> Batcher<NewJob, Intake> {
    let spare = Spare::new(
        intake_pool(pool, hosts, watch.clone()),
        bound.clone(),
        hosts.map(|hosts| hosts.switches()),
    );
    let write: WriteBatch<NewJob, Intake> = Arc::new(move |jobs| {
        let mut held = spare.take();
        let spare = spare.clone();
        let relaxed = relaxed.clone();
        let watch = watch.clone();
        async move {
            let results = write_intake(&mut held, &relaxed, jobs).await;
            spare.put(held);
            watch.poke();
            results
        }
        .boxed()
    });
    Batcher::spawn(WRITERS, MAX_BATCH, write)
}

/// Intake's pool of its own: one connection per writer, whose session runs with
/// `plan_cache_mode = force_generic_plan`.
///
/// Intake's statements take arrays. Given the arrays' values, the planner knows a batch's
/// size and estimates a custom plan cheaper than the generic one (which assumes ten rows
/// per array), so under the default `auto` mode it plans every execution anew, which can
/// cost more database CPU than executing it (bench/journal.md). Generic plans are made once
/// per connection; the tests in this module check that they still look every key up in the unique index, on an empty
/// table and on an analyzed one. Between the two, a `jobs` table with rows but no statistics
/// would be planned through the owner's index (see [`statistics`]), so each new connection
/// pokes `watch`, which checks for that and, if so, has `jobs` analyzed on a connection of
/// the main pool: in the background, since analyzing a large table may take longer than a
/// submission should wait, and the `ANALYZE` replans every cached plan on `jobs` when it
/// ends.
fn intake_pool(pool: &PgPool, hosts: Option<&Arc<Hosts>>, watch: statistics::Watch) -> PgPool {
    let base = PgPoolOptions::new().after_connect(move |connection, _| {
        let watch = watch.clone();
        Box::pin(async move {
            tcp::set(connection).await?;
            watch.poke();
            Ok(())
        })
    });
    side_pool(
        base,
        pool,
        hosts,
        WRITERS as u32,
        &[("plan_cache_mode", "force_generic_plan")],
    )
}

/// Writes one batch on `held`'s connection, each statement bounded in time, and discards
/// that connection if a failure may have broken it (a retryable error: the database
/// unavailable, the connection lost, a statement that ran out of time).
async fn write_intake(
    held: &mut HeldConnection,
    relaxed: &Relaxed,
    jobs: Vec<NewJob>,
) -> Vec<Result<Intake, StoreError>> {
    let results = write_or_split(held, relaxed, jobs).await;
    for error in results.iter().filter_map(|result| result.as_ref().err()) {
        held.discard_if_broken(error);
    }
    results
}

/// Writes one batch; if it fails for another reason than the database being unavailable,
/// writes its submissions one by one, so that a bad one fails alone.
async fn write_or_split(
    held: &mut HeldConnection,
    relaxed: &Relaxed,
    jobs: Vec<NewJob>,
) -> Vec<Result<Intake, StoreError>> {
    match write_batch(held, relaxed, &jobs).await {
        Ok(results) => results,
        Err(error) if jobs.len() == 1 || error.is_retryable() => fail_all(error, jobs.len()),
        Err(_) => {
            // The insert failed, so nothing was written; one bad submission must not fail
            // the others: write them one by one.
            let mut results = Vec::with_capacity(jobs.len());
            for job in jobs {
                results.push(
                    match write_batch(held, relaxed, std::slice::from_ref(&job)).await {
                        Ok(mut r) => r.pop().expect("one result per job"),
                        Err(error) => Err(error),
                    },
                );
            }
            results
        }
    }
}

/// The same `error` for each of `count` submissions of a failed batch.
fn fail_all(error: StoreError, count: usize) -> Vec<Result<Intake, StoreError>> {
    vec![Err(error); count]
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

/// Submissions' keys as the arrays the statements bind.
struct KeyColumns<'a> {
    tenants: Vec<&'a str>,
    users: Vec<&'a str>,
    key_hashes: Vec<Vec<u8>>,
}

impl<'a> KeyColumns<'a> {
    fn of(jobs: impl IntoIterator<Item = &'a NewJob> + Clone) -> Self {
        Self {
            tenants: jobs
                .clone()
                .into_iter()
                .map(|j| j.owner.tenant.as_str())
                .collect(),
            users: jobs
                .clone()
                .into_iter()
                .map(|j| j.owner.user.as_str())
                .collect(),
            key_hashes: jobs.into_iter().map(|j| j.key_hash.0.to_vec()).collect(),
        }
    }
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
/// environments are exposed, docs/design.md §2.10), so the whole unique index `(tenant,
/// user_id, environment, key_hash)` applies, not only its owner prefix.
async fn taken(
    connection: &mut PgConnection,
    jobs: &[&NewJob],
) -> Result<HashMap<Key, JobRecord>, StoreError> {
    let keys = KeyColumns::of(jobs.iter().copied());
    let found = sqlx::query(taken_sql!())
        .bind(keys.tenants)
        .bind(keys.users)
        .bind(keys.key_hashes)
        .fetch_all(connection)
        .await?;
    found
        .iter()
        .map(|row| {
            let record = rows::job::<PgStore>(row)?;
            Ok((key_of(&record.owner, &record.key_hash), record))
        })
        .collect()
}

/// Inserts one batch with its `created` events, reads back what it neither inserted nor
/// found, and hands the rest to [`Relaxed`].
///
/// `Err` only when the insert failed, and so was not acknowledged: nothing was written, or,
/// when it ran out of time ([`StoreError::TimedOut`]), its outcome is unknown and its
/// clients' retries find out by key. Once it committed, each created job is answered
/// `Created` whatever happens next; a failed read-back fails only the submissions it was
/// for (their clients retry and are answered by key).
async fn write_batch(
    held: &mut HeldConnection,
    relaxed: &Relaxed,
    jobs: &[NewJob],
) -> Result<Vec<Result<Intake, StoreError>>, StoreError> {
    let Written { created, found } = held
        .run(async |connection| insert_new(connection, jobs).await)
        .await?;
    // Jobs started at intake are not due: only the others wake the workers.
    if created.values().any(|job| job.attempts == 0) {
        relaxed.wake_workers();
    }
    let rest: Vec<&NewJob> = jobs
        .iter()
        .filter(|j| {
            !created.contains_key(&j.id) && !found.contains_key(&key_of(&j.owner, &j.key_hash))
        })
        .collect();
    let raced = if rest.is_empty() {
        Ok(HashMap::new())
    } else {
        held.run(async |connection| taken(connection, &rest).await)
            .await
    };
    let mut results = Vec::with_capacity(jobs.len());
    let mut replayed = Vec::new();
    for job in jobs {
        if let Some(record) = created.get(&job.id) {
            results.push(Ok(Intake::Created(record.clone())));
            continue;
        }
        let key = key_of(&job.owner, &job.key_hash);
        let record = match (found.get(&key), &raced) {
            (Some(record), _) => record,
            (None, Ok(raced)) => match raced.get(&key) {
                Some(record) => record,
                None => {
                    results.push(Err(StoreError::Vanished(
                        "the job under the key was deleted before it could be read back".into(),
                    )));
                    continue;
                }
            },
            (None, Err(error)) => {
                results.push(Err(error.clone()));
                continue;
            }
        };
        if job.matches(record) {
            replayed.push(job.replayed_event(record));
            results.push(Ok(Intake::Replayed(record.clone())));
        } else {
            results.push(Ok(Intake::Conflict(record.clone())));
        }
    }
    // Events the relaxed queue cannot take (the database is slow to take writes) are written
    // here before the batch is answered, so that intake slows down instead of memory growing.
    let refused = relaxed.log(replayed);
    if !refused.is_empty() {
        let written = held
            .run(async |connection| Ok(super::relaxed::write_events(connection, &refused).await))
            .await
            .unwrap_or_else(|error| vec![Err(error); refused.len()]);
        for result in written {
            if let Err(error) = result {
                tracing::warn!(error = %crate::store::Chain(&error), "a replayed event was not written");
            }
        }
    }
    Ok(results)
}

/// What the intake statement did: the jobs it inserted, by id, and the jobs it found already
/// under the batch's keys in its snapshot, by key.
struct Written {
    created: HashMap<Uuid, JobRecord>,
    found: HashMap<Key, JobRecord>,
}

/// The intake statement: `$1`–`$7` and `$12` the jobs' columns, `$8`–`$11` their `created`
/// events', `$13`–`$17` the first attempts started with them (attempt id, provider, worker,
/// lease and timeout in seconds; `NULL` for a job left to dispatch: see
/// [`crate::store::StartAtIntake`]).
///
/// `found` looks up once in the unique index (`LIMIT 1`, as the read-back does) each key
/// whose submission was not inserted, its `NOT IN` filter applied before the lookup (the
/// plan tests below check the lookup's index; skipping the inserted keys saves buffer
/// accesses, see `bench/statements.sh`); its rows and
/// `inserted`'s are told apart by id, since every submission carries a new one.
///
/// A job inserted with a first attempt is written as the single start would leave it
/// (`running`, one attempt, not due, its version bumped), its attempt `starting` and leased
/// beside it, and its `attempt_started` event after its `created` one: only a job this
/// statement inserted gets an attempt, so nobody else can have seen it, or started it.
macro_rules! intake_sql {
    () => {
        concat!(
            "WITH inserted AS (\
               INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params, request_body, \
                 run_key, step, state, attempts, version, dispatch_at) \
               SELECT batch.id, batch.tenant, batch.user_id, batch.key_hash, batch.kind, batch.fingerprint, \
                 batch.params, batch.request_body, batch.run_key, batch.step, \
                 CASE WHEN batch.attempt_id IS NULL THEN 'pending' ELSE 'running' END, \
                 CASE WHEN batch.attempt_id IS NULL THEN 0 ELSE 1 END, \
                 CASE WHEN batch.attempt_id IS NULL THEN 0 ELSE 1 END, \
                 CASE WHEN batch.attempt_id IS NULL THEN now() END \
               FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::text[], \
               $6::bytea[], $7::jsonb[], $12::text[], $13::uuid[], $18::bytea[], $19::int4[]) \
               AS batch (id, tenant, user_id, key_hash, kind, fingerprint, params, request_body, attempt_id, \
                 run_key, step) \
               ORDER BY key_hash, tenant, user_id \
               ON CONFLICT DO NOTHING RETURNING ",
            job_columns!(),
            "), firsts AS (\
               SELECT * FROM unnest($1::uuid[], $2::text[], $13::uuid[], $14::text[], $15::text[], \
               $16::float8[], $17::float8[]) AS f (job_id, tenant, attempt_id, provider, worker, lease, timeout) \
               WHERE f.attempt_id IS NOT NULL AND f.job_id IN (SELECT id FROM inserted)\
             ), started AS (\
               INSERT INTO attempts (",
            new_attempt_columns!(),
            ") SELECT ",
            first_attempt_values!(
                "attempt_id", "job_id", "provider", "worker", "lease", "timeout", "tenant"
            ),
            " FROM firsts\
             ), logged AS (\
               INSERT INTO job_events (job_id, attempt_id, kind, actor, detail, tenant) \
               SELECT event.job_id, event.attempt_id, event.kind, event.actor, event.detail, event.tenant \
               FROM (SELECT created.*, 0 AS step FROM unnest($1::uuid[], $8::uuid[], $9::text[], $10::text[], \
                 $11::jsonb[], $2::text[]) AS created (job_id, attempt_id, kind, actor, detail, tenant) \
                 WHERE created.job_id IN (SELECT id FROM inserted) \
               UNION ALL SELECT job_id, attempt_id, 'attempt_started', NULL, ",
            attempt_started_detail!("1", "provider", "false"),
            ", tenant, 1 FROM firsts) AS event \
               ORDER BY event.step, event.job_id\
             ), found AS (\
               SELECT job.* FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bytea[]) \
               AS batch (id, tenant, user_id, key_hash) \
               CROSS JOIN LATERAL (SELECT ",
            job_columns!(),
            " FROM jobs WHERE jobs.tenant = batch.tenant AND jobs.user_id = batch.user_id \
                 AND jobs.environment = 'default' AND jobs.key_hash = batch.key_hash LIMIT 1) AS job \
               WHERE batch.id NOT IN (SELECT id FROM inserted)\
             ) SELECT * FROM inserted UNION ALL SELECT * FROM found"
        )
    };
}

/// One statement, one commit: inserts the jobs whose keys are free and the `created` events
/// of exactly those rows, and finds the jobs already under the other keys.
async fn insert_new(connection: &mut PgConnection, jobs: &[NewJob]) -> Result<Written, StoreError> {
    let events: Vec<NewEvent> = jobs.iter().map(NewJob::created_event).collect();
    let created = EventColumns::of(&events);
    let keys = KeyColumns::of(jobs);
    let first = FirstColumns::of(jobs);
    let written_rows = sqlx::query(intake_sql!())
        .bind(jobs.iter().map(|j| j.id).collect::<Vec<_>>())
        .bind(keys.tenants)
        .bind(keys.users)
        .bind(keys.key_hashes)
        .bind(jobs.iter().map(|j| j.kind.as_str()).collect::<Vec<_>>())
        .bind(
            jobs.iter()
                .map(|j| j.fingerprint.0.to_vec())
                .collect::<Vec<_>>(),
        )
        .bind(jobs.iter().map(|j| Json(&j.params)).collect::<Vec<_>>())
        .bind(created.attempt_ids)
        .bind(created.kinds)
        .bind(created.actors)
        .bind(created.details)
        .bind(
            jobs.iter()
                .map(|j| j.request_body.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(first.attempt_ids)
        .bind(first.providers)
        .bind(first.workers)
        .bind(first.leases)
        .bind(first.timeouts)
        .bind(
            jobs.iter()
                .map(|j| j.run.map(|run| run.key.0.to_vec()))
                .collect::<Vec<_>>(),
        )
        .bind(
            jobs.iter()
                .map(|j| j.run.map(|run| run.step))
                .collect::<Vec<_>>(),
        )
        .fetch_all(connection)
        .await?;
    let ids: HashSet<Uuid> = jobs.iter().map(|j| j.id).collect();
    let mut written = Written {
        created: HashMap::new(),
        found: HashMap::new(),
    };
    for row in &written_rows {
        let record = rows::job::<PgStore>(row)?;
        if ids.contains(&record.id) {
            written.created.insert(record.id, record);
        } else {
            written
                .found
                .insert(key_of(&record.owner, &record.key_hash), record);
        }
    }
    Ok(written)
}

/// The first attempts started with the submissions' jobs, as the arrays the intake
/// statement binds (`NULL` for a job left to dispatch).
struct FirstColumns<'a> {
    attempt_ids: Vec<Option<Uuid>>,
    providers: Vec<Option<&'a str>>,
    workers: Vec<Option<&'a str>>,
    leases: Vec<Option<f64>>,
    timeouts: Vec<Option<f64>>,
}

impl<'a> FirstColumns<'a> {
    fn of(jobs: &'a [NewJob]) -> Self {
        let starts = move || jobs.iter().map(|j| j.start.as_ref());
        Self {
            attempt_ids: starts().map(|s| s.map(|s| s.attempt_id)).collect(),
            providers: starts().map(|s| s.map(|s| s.provider.as_str())).collect(),
            workers: starts().map(|s| s.map(|s| s.worker.as_str())).collect(),
            leases: starts().map(|s| s.map(|s| s.lease.as_secs_f64())).collect(),
            timeouts: starts()
                .map(|s| s.map(|s| s.timeout.as_secs_f64()))
                .collect(),
        }
    }
}

/// Events as the arrays the statements bind, their job ids aside (the intake statement
/// binds those once, as the jobs' ids).
struct EventColumns<'a> {
    attempt_ids: Vec<Option<Uuid>>,
    kinds: Vec<&'a str>,
    actors: Vec<Option<&'a str>>,
    details: Vec<Json<&'a Value>>,
}

impl<'a> EventColumns<'a> {
    fn of(events: &'a [NewEvent]) -> Self {
        Self {
            attempt_ids: events.iter().map(|e| e.attempt_id).collect(),
            kinds: events.iter().map(|e| e.kind.as_str()).collect(),
            actors: events.iter().map(|e| e.actor.as_deref()).collect(),
            details: events.iter().map(|e| Json(&e.detail)).collect(),
        }
    }
}

/// Appends events with one statement, skipping those whose job is gone (deleted by
/// retention since the event was queued: its log went with it).
pub(super) async fn insert_events<'c>(
    executor: impl PgExecutor<'c>,
    events: &[NewEvent],
) -> Result<(), StoreError> {
    if events.is_empty() {
        return Ok(());
    }
    let columns = EventColumns::of(events);
    sqlx::query(
        "INSERT INTO job_events (job_id, attempt_id, kind, actor, detail, tenant) \
         SELECT e.* FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::jsonb[], \
           $6::text[]) AS e (job_id, attempt_id, kind, actor, detail, tenant) \
         WHERE EXISTS (SELECT 1 FROM jobs WHERE jobs.id = e.job_id AND jobs.tenant = e.tenant)",
    )
    .bind(events.iter().map(|e| e.job_id).collect::<Vec<_>>())
    .bind(columns.attempt_ids)
    .bind(columns.kinds)
    .bind(columns.actors)
    .bind(columns.details)
    .bind(
        events
            .iter()
            .map(|e| e.tenant.as_deref())
            .collect::<Vec<_>>(),
    )
    .execute(executor)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use sqlx::{Connection, Executor, PgConnection, PgPool};

    use super::{super::Variant, intake_pool, statistics};
    use crate::store::{
        Intake, NewJob, Store,
        bound::{Bound, WRITE_TIMEOUT},
        postgres::{PgStore, connections::held::IDLE_CHECK, fresh},
    };

    /// Adds 20,000 jobs of one owner, and analyzes.
    async fn fill_one_owner(db: &mut PgConnection) {
        add_jobs_of_one_owner(db).await;
        db.execute("ANALYZE jobs").await.unwrap();
    }

    /// Adds 20,000 jobs of one owner, without analyzing.
    async fn add_jobs_of_one_owner(db: &mut PgConnection) {
        db.execute(
            "INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params) \
             SELECT gen_random_uuid(), 'acme', 'alice', sha256(i::text::bytea), 'chat', \
                    sha256(i::text::bytea), '{}'::jsonb \
             FROM generate_series(1, 20000) AS i",
        )
        .await
        .unwrap();
    }

    /// Adds 20,000 jobs of one owner without analyzing, prepares intake's statement, and
    /// checks that its generic plan now reads the owner's index: the hazard
    /// [`statistics`] guards against, still there to guard against.
    async fn add_jobs_of_one_owner_planned_through_their_index(db: &mut PgConnection) {
        add_jobs_of_one_owner(db).await;
        prepare_intake(db).await;
        db.execute("SET plan_cache_mode = force_generic_plan")
            .await
            .unwrap();
        let plan: Vec<String> = sqlx::query_scalar(EXPLAIN_INTAKE)
            .fetch_all(&mut *db)
            .await
            .unwrap();
        let plan = plan.join("\n");
        assert!(
            plan.contains("jobs_owner_recent"),
            "without statistics of rows the plan was expected to use the owner's index:\n{plan}"
        );
    }

    /// How many rows the planner believes `jobs` holds (-1: never analyzed), as of the last
    /// `ANALYZE` that committed. `ANALYZE` writes `pg_class.reltuples` in place, at once, and
    /// its column statistics at its commit: between the two, a plan made in another session
    /// has no statistics to go by yet. So this waits for any `ANALYZE` of `jobs` running now
    /// to end first, by taking (and at once releasing) the lock it holds until it commits.
    async fn believed_rows(db: &mut PgConnection) -> f32 {
        let reltuples =
            sqlx::query_scalar("SELECT reltuples FROM pg_class WHERE oid = 'jobs'::regclass")
                .fetch_one(&mut *db)
                .await
                .unwrap();
        db.execute("BEGIN; LOCK TABLE jobs IN SHARE UPDATE EXCLUSIVE MODE; COMMIT")
            .await
            .unwrap();
        reltuples
    }

    /// `explain` looks each key up in the unique index on an empty, never analyzed `jobs`
    /// (the plans a new database gets, which a generic plan keeps until the table is
    /// analyzed), and again on 20,000 analyzed jobs of one owner.
    async fn assert_plans_look_keys_up_in_the_unique_index(
        db: &mut PgConnection,
        explain: &'static str,
    ) {
        assert_looks_keys_up_in_the_unique_index(db, explain).await;
        fill_one_owner(db).await;
        assert_looks_keys_up_in_the_unique_index(db, explain).await;
    }

    /// `explain` (an `EXPLAIN EXECUTE` of a prepared statement), under a custom plan and
    /// under the generic plan intake's sessions use, looks each key up in the unique index on
    /// the whole key (on an empty table, the owner's index `jobs_owner_recent` costs the same,
    /// and a plan that chose it would read every job of the owner once the table grew).
    async fn assert_looks_keys_up_in_the_unique_index(
        db: &mut PgConnection,
        explain: &'static str,
    ) {
        for mode in ["force_custom_plan", "force_generic_plan"] {
            sqlx::query("SELECT set_config('plan_cache_mode', $1, false)")
                .bind(mode)
                .execute(&mut *db)
                .await
                .unwrap();
            let plan: Vec<String> = sqlx::query_scalar(explain)
                .fetch_all(&mut *db)
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
    }

    /// The read-back stays one lookup of the whole unique key per submission. (Before the
    /// lookups named the environment, the generic plan was a hash join over a sequential scan
    /// of `jobs`, and the key hash was never part of an index condition.)
    #[tokio::test]
    async fn the_read_back_looks_each_key_up_in_the_unique_index() {
        let (mut db, _) = fresh!("onejob_unit_key_lookup").await;
        db.execute(concat!(
            "PREPARE taken(text[], text[], bytea[]) AS ",
            taken_sql!()
        ))
        .await
        .unwrap();
        assert_plans_look_keys_up_in_the_unique_index(
            &mut db,
            "EXPLAIN EXECUTE taken(ARRAY['acme', 'acme'], ARRAY['alice', 'alice'], \
             ARRAY[sha256('7'::bytea), sha256('no such key'::bytea)])",
        )
        .await;
        db.close().await.unwrap();
    }

    /// Prepares the intake statement as `intake` in `db`'s session.
    async fn prepare_intake(db: &mut PgConnection) {
        db.execute(concat!(
            "PREPARE intake(uuid[], text[], text[], bytea[], text[], bytea[], jsonb[], \
             uuid[], text[], text[], jsonb[], text[], uuid[], text[], text[], float8[], \
             float8[]) AS ",
            intake_sql!()
        ))
        .await
        .unwrap();
    }

    /// Plans [`prepare_intake`]'s statement for two submissions, one key taken and one free.
    const EXPLAIN_INTAKE: &str = "EXPLAIN EXECUTE intake(ARRAY[gen_random_uuid(), gen_random_uuid()], \
         ARRAY['acme', 'acme'], ARRAY['alice', 'alice'], \
         ARRAY[sha256('7'::bytea), sha256('no such key'::bytea)], \
         ARRAY['chat', 'chat'], ARRAY[sha256('7'::bytea), sha256('8'::bytea)], \
         ARRAY['{}'::jsonb, '{}'::jsonb], ARRAY[NULL::uuid, NULL::uuid], \
         ARRAY['created', 'created'], ARRAY[NULL::text, NULL::text], \
         ARRAY['{}'::jsonb, '{}'::jsonb], ARRAY[NULL::text, NULL::text], \
         ARRAY[NULL::uuid, NULL::uuid], ARRAY[NULL::text, NULL::text], \
         ARRAY[NULL::text, NULL::text], ARRAY[NULL::float8, NULL::float8], \
         ARRAY[NULL::float8, NULL::float8], ARRAY[NULL::bytea, NULL::bytea], \
         ARRAY[NULL::int4, NULL::int4])";

    /// The intake statement's lookup of the jobs already under its keys, likewise (EXPLAIN
    /// only plans it: nothing is inserted).
    #[tokio::test]
    async fn the_intake_statement_looks_each_key_up_in_the_unique_index() {
        let (mut db, _) = fresh!("onejob_unit_intake_plan").await;
        prepare_intake(&mut db).await;
        assert_plans_look_keys_up_in_the_unique_index(&mut db, EXPLAIN_INTAKE).await;
        db.close().await.unwrap();
    }

    /// On a `jobs` table with rows but no statistics, intake's generic plan reads the owner's
    /// index (checked first, so that this test proves the hazard is still there to guard
    /// against); once an intake connection opens, `jobs` gets analyzed, and the same
    /// session's cached statement is replanned through the unique index.
    #[tokio::test]
    async fn an_intake_connection_has_jobs_analyzed_when_it_never_was() {
        let (mut db, options) = fresh!("onejob_unit_never_analyzed").await;
        // Only onejob may analyze it during the test.
        db.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")
            .await
            .unwrap();
        add_jobs_of_one_owner_planned_through_their_index(&mut db).await;

        let pool = PgPool::connect_with(options).await.unwrap();
        let watch =
            statistics::Watch::new(pool.clone(), Bound::within(WRITE_TIMEOUT), Variant::Single);
        let intake = intake_pool(&pool, None, watch);
        drop(intake.acquire().await.unwrap());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while believed_rows(&mut db).await < 0.0 {
            assert!(
                std::time::Instant::now() < deadline,
                "jobs was not analyzed within a minute of an intake connection opening"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_looks_keys_up_in_the_unique_index(&mut db, EXPLAIN_INTAKE).await;
        intake.close().await;
        pool.close().await;
        db.close().await.unwrap();
    }

    /// On a `jobs` table analyzed while it was empty, with autovacuum off, nothing would ever
    /// analyze it again: once rows arrive, intake's generic plan reads the owner's index
    /// (checked first, as above). Intake's writer watches the statistics, has `jobs`
    /// analyzed while submissions go on, and the cached statement is replanned through the
    /// unique index.
    #[tokio::test]
    async fn intake_has_jobs_analyzed_again_when_it_was_analyzed_while_empty() {
        let (mut db, options) = fresh!("onejob_unit_analyzed_empty").await;
        db.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")
            .await
            .unwrap();
        db.execute("ANALYZE jobs").await.unwrap();
        let store = PgStore::from_pool(PgPool::connect_with(options).await.unwrap());
        // Intake's connection opens on the empty table: nothing to analyze yet.
        store
            .create_or_replay(NewJob::for_test("chat.completion", "first"))
            .await
            .unwrap();
        add_jobs_of_one_owner_planned_through_their_index(&mut db).await;

        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        for n in 0.. {
            let believed = believed_rows(&mut db).await;
            if believed >= 20_000.0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "jobs was not analyzed again within a minute of submissions (it is believed \
                 to hold {believed} rows)"
            );
            store
                .create_or_replay(NewJob::for_test("chat.completion", &format!("next-{n}")))
                .await
                .unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_looks_keys_up_in_the_unique_index(&mut db, EXPLAIN_INTAKE).await;
        db.close().await.unwrap();
    }

    /// Intake holds its connection between batches. One that broke while idle (here its
    /// backend is terminated, as a database restart would) is noticed by the check before
    /// the next batch, which then runs on a new connection instead of failing.
    #[tokio::test]
    async fn intake_replaces_a_held_connection_that_broke_while_idle() {
        let (mut db, options) = fresh!("onejob_unit_held_connection").await;
        let store = PgStore::from_pool(PgPool::connect_with(options).await.unwrap());
        let first = store
            .create_or_replay(NewJob::for_test("chat.completion", "first"))
            .await
            .unwrap();
        assert!(matches!(first, Intake::Created(_)), "{first:?}");
        let intake: Vec<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity \
             WHERE datname = current_database() AND query LIKE 'WITH inserted%'",
        )
        .fetch_all(&mut db)
        .await
        .unwrap();
        assert_eq!(
            intake.len(),
            1,
            "intake's connection was expected to be open"
        );
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(intake[0])
            .execute(&mut db)
            .await
            .unwrap();
        tokio::time::sleep(IDLE_CHECK + std::time::Duration::from_millis(200)).await;
        let second = store
            .create_or_replay(NewJob::for_test("chat.completion", "second"))
            .await;
        assert!(matches!(second, Ok(Intake::Created(_))), "{second:?}");
        db.close().await.unwrap();
    }
}
