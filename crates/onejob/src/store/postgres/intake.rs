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
    connect::{
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
mod tests;
