//! Intake on SQLite: create-or-replay with group commit (see the PostgreSQL twin for the
//! shape). SQLite has one writer, so the batch runs on the process's writing connection in
//! one `BEGIN IMMEDIATE` transaction: a statement per submission, one commit (one fsync)
//! for all. A failing statement rolls back only itself in SQLite, so one bad submission
//! fails alone while the others commit.

use std::sync::Arc;

use futures::FutureExt;
use sqlx::SqlitePool;

use super::{SqliteJobRow, insert_event};
use crate::store::{
    Intake, JobRecord, NewEvent, NewJob, StoreError,
    batch::{Batcher, WriteBatch},
};

/// Most submissions one intake transaction carries.
const MAX_BATCH: usize = 256;

/// The job with this owner and key, if any.
pub(super) async fn existing(
    pool: &SqlitePool,
    job: &NewJob,
) -> Result<Option<JobRecord>, StoreError> {
    let row: Option<SqliteJobRow> = sqlx::query_as(concat!(
        "SELECT ",
        job_columns!(),
        " FROM jobs WHERE tenant = ?1 AND user_id = ?2 AND key_hash = ?3 AND environment = 'default'"
    ))
    .bind(&job.owner.tenant)
    .bind(&job.owner.user)
    .bind(&job.key_hash.0[..])
    .fetch_optional(pool)
    .await?;
    row.map(JobRecord::try_from).transpose()
}

/// The intake batcher, writing through `writer` and waking local workers on creations.
pub(super) fn intake_batcher(
    writer: SqlitePool,
    wake: Arc<tokio::sync::Notify>,
) -> Batcher<NewJob, Intake> {
    let write: WriteBatch<NewJob, Intake> = Arc::new(move |jobs| {
        let writer = writer.clone();
        let wake = wake.clone();
        async move {
            let results = write_batch(&writer, jobs).await;
            if results.iter().any(|r| matches!(r, Ok(Intake::Created(_)))) {
                wake.notify_one();
            }
            results
        }
        .boxed()
    });
    Batcher::spawn(1, MAX_BATCH, write)
}

/// The batcher of `replayed` events.
pub(super) fn replay_batcher(writer: SqlitePool) -> Batcher<NewEvent, ()> {
    let write: WriteBatch<NewEvent, ()> = Arc::new(move |events| {
        let writer = writer.clone();
        async move {
            let count = events.len();
            let written = async {
                let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
                for event in &events {
                    insert_event(&mut tx, event).await?;
                }
                tx.commit().await?;
                Ok::<_, StoreError>(())
            }
            .await;
            match written {
                Ok(()) => (0..count).map(|_| Ok(())).collect(),
                Err(error) => {
                    let message = error.to_string();
                    (0..count)
                        .map(|_| {
                            Err(StoreError::Unavailable(sqlx::Error::Protocol(
                                message.clone(),
                            )))
                        })
                        .collect()
                }
            }
        }
        .boxed()
    });
    Batcher::spawn(1, MAX_BATCH, write)
}

async fn write_batch(writer: &SqlitePool, jobs: Vec<NewJob>) -> Vec<Result<Intake, StoreError>> {
    let mut tx = match writer.begin_with("BEGIN IMMEDIATE").await {
        Ok(tx) => tx,
        Err(error) => {
            let message = error.to_string();
            return jobs
                .iter()
                .map(|_| {
                    Err(StoreError::Unavailable(sqlx::Error::Protocol(
                        message.clone(),
                    )))
                })
                .collect();
        }
    };
    let mut results = Vec::with_capacity(jobs.len());
    for job in &jobs {
        results.push(write_one(&mut tx, job).await);
    }
    if let Err(error) = tx.commit().await {
        let message = error.to_string();
        return jobs
            .iter()
            .map(|_| {
                Err(StoreError::Unavailable(sqlx::Error::Protocol(
                    message.clone(),
                )))
            })
            .collect();
    }
    results
}

async fn write_one(
    tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>,
    job: &NewJob,
) -> Result<Intake, StoreError> {
    let inserted: Option<SqliteJobRow> = sqlx::query_as(concat!(
        "INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
         ON CONFLICT DO NOTHING RETURNING ",
        job_columns!()
    ))
    .bind(job.id.to_string())
    .bind(&job.owner.tenant)
    .bind(&job.owner.user)
    .bind(&job.key_hash.0[..])
    .bind(&job.kind)
    .bind(&job.fingerprint.0[..])
    .bind(job.params.to_string())
    .fetch_optional(&mut **tx)
    .await?;
    if let Some(row) = inserted {
        let record = JobRecord::try_from(row)?;
        insert_event(tx, &job.created_event()).await?;
        return Ok(Intake::Created(record));
    }
    let existing: SqliteJobRow = sqlx::query_as(concat!(
        "SELECT ",
        job_columns!(),
        " FROM jobs WHERE tenant = ?1 AND user_id = ?2 AND key_hash = ?3 AND environment = 'default'"
    ))
    .bind(&job.owner.tenant)
    .bind(&job.owner.user)
    .bind(&job.key_hash.0[..])
    .fetch_one(&mut **tx)
    .await?;
    let existing = JobRecord::try_from(existing)?;
    if job.matches(&existing) {
        insert_event(tx, &job.replayed_event(&existing)).await?;
        Ok(Intake::Replayed(existing))
    } else {
        Ok(Intake::Conflict(existing))
    }
}
