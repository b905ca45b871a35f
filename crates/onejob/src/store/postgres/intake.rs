//! Intake on PostgreSQL: create-or-replay with group commit.
//!
//! Every submission goes to the intake [`Batcher`]. One transaction serves a whole batch:
//! one `SELECT` of the keys already taken (replays and conflicts need no insert), one
//! `INSERT … SELECT FROM unnest(…) ON CONFLICT DO NOTHING` of the rest, a read-back of those
//! another transaction won meanwhile (a batch or a node racing on the same key), the
//! `created`/`replayed` events, one commit. The key's unique index stays the arbiter (no
//! conflict target is named, so the insert works under the old narrow constraint, the widened
//! index, or both while `online` widens the scope); a conflict in one row never fails the
//! others. If a batch fails for another reason, its submissions are retried one by one, so a
//! bad row fails alone.
//!
//! A batch that creates nothing (only replays and conflicts) commits with
//! `synchronous_commit = off`: its `replayed` events are committed and ordered like any
//! other, but the answers, which point at jobs already durable, do not wait for the WAL
//! flush (a crash may lose the last few replayed events; it can lose no job and no result).

use std::{collections::HashMap, sync::Arc};

use futures::FutureExt;
use serde_json::Value;
use sqlx::{PgPool, Postgres, Transaction, types::Json};
use uuid::Uuid;

use super::PgJobRow;
use crate::store::{
    Intake, JobRecord, NewEvent, NewJob, StoreError,
    batch::{Batcher, WriteBatch},
};

/// Most submissions one intake transaction carries.
pub(super) const MAX_BATCH: usize = 256;

/// Intake writer tasks: two transactions may be in flight, so commits overlap.
pub(super) const WRITERS: usize = 2;

/// The intake batcher.
pub(super) fn intake_batcher(pool: PgPool) -> Batcher<NewJob, Intake> {
    let write: WriteBatch<NewJob, Intake> = Arc::new(move |jobs| {
        let pool = pool.clone();
        async move { write_intake(&pool, jobs).await }.boxed()
    });
    Batcher::spawn(WRITERS, MAX_BATCH, write)
}

async fn write_intake(pool: &PgPool, jobs: Vec<NewJob>) -> Vec<Result<Intake, StoreError>> {
    match write_batch(pool, &jobs).await {
        Ok(results) => results.into_iter().map(Ok).collect(),
        Err(error) if jobs.len() == 1 || error.is_retryable() => {
            let message = error.to_string();
            let retryable = error.is_retryable();
            let mut first = Some(error);
            jobs.iter()
                .map(|_| {
                    Err(first.take().unwrap_or_else(|| {
                        if retryable {
                            StoreError::Unavailable(sqlx::Error::Protocol(message.clone()))
                        } else {
                            StoreError::Corrupt(message.clone())
                        }
                    }))
                })
                .collect()
        }
        Err(_) => {
            // One bad submission must not fail the others: write them one by one.
            let mut results = Vec::with_capacity(jobs.len());
            for job in jobs {
                results.push(
                    write_batch(pool, std::slice::from_ref(&job))
                        .await
                        .map(|mut r| r.pop().expect("one result per job")),
                );
            }
            results
        }
    }
}

/// The key a job is found by: owner and key hash.
type Key = (String, String, Vec<u8>);

fn key_of(job: &NewJob) -> Key {
    (
        job.owner.tenant.clone(),
        job.owner.user.clone(),
        job.key_hash.0.to_vec(),
    )
}

/// The jobs already under these submissions' keys.
async fn taken(
    tx: &mut Transaction<'static, Postgres>,
    jobs: &[&NewJob],
) -> Result<HashMap<Key, JobRecord>, StoreError> {
    let rows: Vec<PgJobRow> = sqlx::query_as(concat!(
        "SELECT ",
        job_columns!(),
        " FROM jobs WHERE (tenant, user_id, key_hash) IN \
         (SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[]))"
    ))
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
    .fetch_all(&mut **tx)
    .await?;
    rows.into_iter()
        .map(|row| {
            let record = JobRecord::try_from(row)?;
            let key = (
                record.owner.tenant.clone(),
                record.owner.user.clone(),
                record.key_hash.0.to_vec(),
            );
            Ok((key, record))
        })
        .collect()
}

/// Reads, inserts, reads back and logs one batch in one transaction.
///
/// Rows are inserted in one global order (by key hash): two batches, on one node or on
/// several, that share keys then wait for each other's unique-index entries in the same
/// order and cannot deadlock. (Unordered, a storm of copies of the same keys across nodes
/// deadlocked, and every submission of the losing batch was answered 503.)
async fn write_batch(pool: &PgPool, jobs: &[NewJob]) -> Result<Vec<Intake>, StoreError> {
    let mut tx = pool.begin().await?;
    let all: Vec<&NewJob> = jobs.iter().collect();
    let mut existing = taken(&mut tx, &all).await?;
    let fresh: Vec<&NewJob> = jobs
        .iter()
        .filter(|j| !existing.contains_key(&key_of(j)))
        .collect();
    let mut created: HashMap<Uuid, JobRecord> = HashMap::new();
    if !fresh.is_empty() {
        let rows: Vec<PgJobRow> = sqlx::query_as(concat!(
            "INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params) \
             SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::text[], \
             $6::bytea[], $7::jsonb[]) AS batch (id, tenant, user_id, key_hash, kind, fingerprint, params) \
             ORDER BY key_hash, tenant, user_id \
             ON CONFLICT DO NOTHING RETURNING ",
            job_columns!()
        ))
        .bind(fresh.iter().map(|j| j.id).collect::<Vec<_>>())
        .bind(fresh.iter().map(|j| j.owner.tenant.as_str()).collect::<Vec<_>>())
        .bind(fresh.iter().map(|j| j.owner.user.as_str()).collect::<Vec<_>>())
        .bind(fresh.iter().map(|j| j.key_hash.0.to_vec()).collect::<Vec<_>>())
        .bind(fresh.iter().map(|j| j.kind.as_str()).collect::<Vec<_>>())
        .bind(fresh.iter().map(|j| j.fingerprint.0.to_vec()).collect::<Vec<_>>())
        .bind(fresh.iter().map(|j| Json(&j.params)).collect::<Vec<_>>())
        .fetch_all(&mut *tx)
        .await?;
        for row in rows {
            let record = JobRecord::try_from(row)?;
            created.insert(record.id, record);
        }
        // Keys another transaction took since the first read, and copies of one key within
        // this batch (the first copy's row is visible to this transaction).
        let raced: Vec<&NewJob> = fresh
            .into_iter()
            .filter(|j| !created.contains_key(&j.id))
            .collect();
        if !raced.is_empty() {
            existing.extend(taken(&mut tx, &raced).await?);
        }
    }
    let mut results = Vec::with_capacity(jobs.len());
    let mut events = Vec::with_capacity(jobs.len());
    for job in jobs {
        if let Some(record) = created.get(&job.id) {
            events.push(job.created_event(record));
            results.push(Intake::Created(record.clone()));
            continue;
        }
        let Some(record) = existing.get(&key_of(job)) else {
            return Err(StoreError::Corrupt(
                "a conflicting job vanished before it could be read back".into(),
            ));
        };
        if job.matches(record) {
            events.push(job.replayed_event(record));
            results.push(Intake::Replayed(record.clone()));
        } else {
            results.push(Intake::Conflict(record.clone()));
        }
    }
    if created.is_empty() {
        // Nothing new: every answer points at a job already durable.
        sqlx::query("SET LOCAL synchronous_commit = off")
            .execute(&mut *tx)
            .await?;
    }
    insert_events(&mut tx, &events).await?;
    tx.commit().await?;
    Ok(results)
}

/// Appends events with one statement.
pub(super) async fn insert_events(
    tx: &mut Transaction<'static, Postgres>,
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
    .execute(&mut **tx)
    .await?;
    Ok(())
}
