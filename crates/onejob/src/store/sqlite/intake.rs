//! Intake on SQLite: create-or-replay with group commit (see the PostgreSQL twin for the
//! shape). SQLite has one writer, so the batch runs on the process's writing connection in
//! one `BEGIN IMMEDIATE` transaction: a statement per submission, one commit (one fsync)
//! for all, by intake's group commit written once (`statements.rs`'s `submit_together`,
//! which Citus shares): if a submission's statements fail, the batch is rolled back and
//! each submission written alone, so that one bad submission fails alone while the
//! others commit.

use std::sync::Arc;

use futures::FutureExt;
use sqlx::SqlitePool;

use super::SqliteStore;
use crate::store::{
    Intake, NewEvent, NewJob, StoreError, WorkSignal,
    backend::Tx,
    batch::{Batcher, EVENT_QUEUE, WriteBatch},
    bound::Bound,
    statements::submit_together,
};

/// Most submissions one intake transaction carries.
const MAX_BATCH: usize = 256;

/// The insert of one submission: `?1`–`?10` the job's columns → job columns, or no row when
/// its key is taken.
const INSERT_JOB: &str = concat!(
    "INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params, request_body, \
     run_key, step) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
     ON CONFLICT DO NOTHING RETURNING ",
    job_columns!()
);

/// The intake batcher, writing through `writer` and waking local workers on creations.
pub(super) fn intake_batcher(writer: SqlitePool, wake: WorkSignal) -> Batcher<NewJob, Intake> {
    let write: WriteBatch<NewJob, Intake> = Arc::new(move |jobs| {
        let writer = writer.clone();
        let wake = wake.clone();
        async move {
            let results = write_batch(&writer, jobs).await;
            // Jobs started at intake are not due: only the others wake the workers.
            if results
                .iter()
                .any(|r| matches!(r, Ok(Intake::Created(job)) if job.attempts == 0))
            {
                wake.new_jobs();
            }
            results
        }
        .boxed()
    });
    Batcher::spawn(1, MAX_BATCH, write)
}

/// The batcher of `replayed` events, bounded: a cached replay whose event finds the queue
/// full is answered through intake instead, which waits for room.
pub(super) fn replay_batcher(writer: SqlitePool) -> Batcher<NewEvent, ()> {
    let write: WriteBatch<NewEvent, ()> = Arc::new(move |events| {
        let writer = writer.clone();
        async move {
            let count = events.len();
            // A failing insert (an event whose job retention deleted meanwhile) rolls back
            // only itself in SQLite: it fails alone, and the others commit.
            let written = async {
                let mut tx = begin(&writer).await?;
                let mut results = Vec::with_capacity(count);
                for event in &events {
                    results.push(tx.insert_event(event).await);
                }
                tx.commit().await.map(|()| results)
            }
            .await;
            written.unwrap_or_else(|error| vec![Err(error); count])
        }
        .boxed()
    });
    Batcher::bounded("replayed event", 1, MAX_BATCH, EVENT_QUEUE, write)
}

/// A write transaction on `writer`, holding the write lock from its first statement.
async fn begin(writer: &SqlitePool) -> Result<Tx<SqliteStore>, StoreError> {
    Tx::begin(writer, &Bound::unbounded()).await
}

/// The batch in one transaction on the writer, by intake's group commit written once
/// ([`submit_together`]): a batch that fails is written again submission by submission, so
/// that only the failing one fails.
async fn write_batch(writer: &SqlitePool, jobs: Vec<NewJob>) -> Vec<Result<Intake, StoreError>> {
    let jobs: Vec<&NewJob> = jobs.iter().collect();
    submit_together::<SqliteStore>(writer, &Bound::unbounded(), INSERT_JOB, &jobs).await
}

#[cfg(test)]
mod tests {
    use crate::store::{
        Intake, NewJob, Store,
        sqlite::{SqliteStore, fresh},
    };

    /// A submission whose statements fail after its job row was inserted (here its `created`
    /// event is refused by a trigger) leaves no job behind, and the submissions batched with
    /// it are written whole. (The batch used to commit the failed one's job row without its
    /// event.)
    #[tokio::test]
    async fn a_submission_that_fails_halfway_leaves_nothing_and_spares_its_batch() {
        let (_dir, store) = fresh().await;
        sqlx::query(
            "CREATE TRIGGER refuse_doomed BEFORE INSERT ON job_events \
             WHEN NEW.kind = 'created' \
              AND (SELECT kind FROM jobs WHERE id = NEW.job_id) = 'doomed' \
             BEGIN SELECT RAISE(ABORT, 'refused for the test'); END",
        )
        .execute(store.pool())
        .await
        .unwrap();
        let (doomed, before, after) = tokio::join!(
            store.create_or_replay(NewJob::for_test("doomed", "doomed")),
            store.create_or_replay(NewJob::for_test("chat", "before")),
            store.create_or_replay(NewJob::for_test("chat", "after")),
        );
        assert!(doomed.is_err(), "{doomed:?}");
        for written in [before, after] {
            assert!(matches!(written, Ok(Intake::Created(_))), "{written:?}");
        }
        let kinds: Vec<String> = sqlx::query_scalar("SELECT kind FROM jobs ORDER BY kind")
            .fetch_all(store.pool())
            .await
            .unwrap();
        assert_eq!(kinds, ["chat", "chat"]);
        let created: i64 =
            sqlx::query_scalar("SELECT count(*) FROM job_events WHERE kind = 'created'")
                .fetch_one(store.pool())
                .await
                .unwrap();
        assert_eq!(created, 2);
    }

    /// A lookup by key searches the unique index by the whole key, also for an owner with
    /// many jobs, before `ANALYZE` (rows but no statistics: the case PostgreSQL's intake has
    /// to analyze for, store/postgres/statistics.rs) and after it. (Without the environment in
    /// the lookup, the search used only the owner prefix and read every job of the owner.)
    #[tokio::test]
    async fn a_lookup_by_key_searches_the_whole_unique_key() {
        let (_dir, store) = fresh().await;
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
            sqlx::query_as(concat!("EXPLAIN QUERY PLAN ", job_by_key!()))
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
