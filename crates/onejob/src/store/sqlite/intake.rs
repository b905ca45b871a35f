//! Intake on SQLite: create-or-replay with group commit (see the PostgreSQL twin for the
//! shape). SQLite has one writer, so the batch runs on the process's writing connection in
//! one `BEGIN IMMEDIATE` transaction: a statement per submission, one commit (one fsync)
//! for all. A failing statement rolls back only itself in SQLite, so one bad submission
//! fails alone while the others commit.

use std::sync::Arc;

use futures::FutureExt;
use onejob_domain::{KeyHash, Principal};
use sqlx::{SqliteExecutor, SqlitePool};

use super::{SqliteJobRow, insert_event};
use crate::store::{
    Intake, JobRecord, NewEvent, NewJob, StoreError,
    batch::{Batcher, WriteBatch},
};

/// Most submissions one intake transaction carries.
const MAX_BATCH: usize = 256;

/// The lookup by key: `?1` tenant, `?2` user, `?3` key hash. It names the environment
/// (every job is in `'default'`, DESIGN §2.10) so that the whole unique key `(tenant,
/// user_id, environment, key_hash)` is the index search, not only its owner prefix.
macro_rules! by_key_sql {
    () => {
        concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE tenant = ?1 AND user_id = ?2 AND environment = 'default' \
             AND key_hash = ?3"
        )
    };
}

/// The job with this owner and key, if any.
pub(super) async fn by_key<'c>(
    executor: impl SqliteExecutor<'c>,
    owner: &Principal,
    key_hash: &KeyHash,
) -> Result<Option<JobRecord>, StoreError> {
    let row: Option<SqliteJobRow> = sqlx::query_as(by_key_sql!())
        .bind(&owner.tenant)
        .bind(&owner.user)
        .bind(&key_hash.0[..])
        .fetch_optional(executor)
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
                Err(error) => vec![Err(error); count],
            }
        }
        .boxed()
    });
    Batcher::spawn(1, MAX_BATCH, write)
}

async fn write_batch(writer: &SqlitePool, jobs: Vec<NewJob>) -> Vec<Result<Intake, StoreError>> {
    let mut tx = match writer.begin_with("BEGIN IMMEDIATE").await {
        Ok(tx) => tx,
        Err(error) => return vec![Err(StoreError::from(error)); jobs.len()],
    };
    let mut results = Vec::with_capacity(jobs.len());
    for job in &jobs {
        results.push(write_one(&mut tx, job).await);
    }
    if let Err(error) = tx.commit().await {
        return vec![Err(StoreError::from(error)); jobs.len()];
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
    let Some(existing) = by_key(&mut **tx, &job.owner, &job.key_hash).await? else {
        return Err(StoreError::Corrupt(
            "a conflicting job vanished before it could be read back".into(),
        ));
    };
    if job.matches(&existing) {
        insert_event(tx, &job.replayed_event(&existing)).await?;
        Ok(Intake::Replayed(existing))
    } else {
        Ok(Intake::Conflict(existing))
    }
}

#[cfg(test)]
mod tests {
    use crate::store::{Store, StoreOptions, sqlite::SqliteStore};

    /// A lookup by key searches the unique index by the whole key, also for an owner with
    /// many jobs, before `ANALYZE` (rows but no statistics: the case PostgreSQL's intake has
    /// to analyze for, store/postgres/statistics.rs) and after it. (Without the environment in
    /// the lookup, the search used only the owner prefix and read every job of the owner.)
    #[tokio::test]
    async fn a_lookup_by_key_searches_the_whole_unique_key() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("onejob.db").display());
        let store = SqliteStore::connect(&url, &StoreOptions::default())
            .await
            .unwrap();
        store.migrate().await.unwrap();
        sqlx::query(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000) \
             INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params) \
             SELECT printf('%08d-0000-7000-8000-000000000000', i), 'acme', 'alice', \
                    randomblob(32), 'chat', randomblob(32), '{}' FROM n",
        )
        .execute(store.pool())
        .await
        .unwrap();
        assert_lookup_searches_the_whole_unique_key(&store).await;
        sqlx::query("ANALYZE").execute(store.pool()).await.unwrap();
        assert_lookup_searches_the_whole_unique_key(&store).await;
    }

    async fn assert_lookup_searches_the_whole_unique_key(store: &SqliteStore) {
        let plan: Vec<(i64, i64, i64, String)> =
            sqlx::query_as(concat!("EXPLAIN QUERY PLAN ", by_key_sql!()))
                .bind("acme")
                .bind("alice")
                .bind(&[7u8; 32][..])
                .fetch_all(store.pool())
                .await
                .unwrap();
        let plan: Vec<String> = plan.into_iter().map(|(_, _, _, detail)| detail).collect();
        assert!(
            plan.iter()
                .any(|step| step.contains("environment=?") && step.contains("key_hash=?")),
            "{plan:?}"
        );
    }
}
