//! Batches: state changes the store makes for many jobs at once behave, job by job, exactly
//! as the single ones. First attempts started in a batch (`start_first_attempts`) pass the
//! same guard as `start_attempt`: the right jobs, one attempt each however many starters
//! race, a job another starter holds or took first left to it.

use std::{sync::Arc, time::Duration};

use futures::future::join_all;

use onejob::store::{FirstAttempts, FirstStart, StartOutcome, Store};
use onejob_domain::{AttemptState, EventKind, JobState};
use serde_json::json;
use uuid::Uuid;

use crate::support::{
    Backend, TestDatabase, alice, backend_tests, created, new_job_of, start_for, started,
};

backend_tests!(
    a_batch_starts_the_first_attempt_of_each_due_new_job,
    a_batch_takes_the_oldest_due_jobs_up_to_its_limit,
    racing_batches_and_single_starts_make_one_attempt_per_job,
    a_job_another_starter_took_first_is_left_to_it,
);

/// A batch of up to `limit` first attempts of `chat.completion` jobs on provider `a`.
fn batch(limit: u32) -> FirstAttempts {
    FirstAttempts {
        limit,
        worker: "batch-worker".into(),
        lease: Duration::from_secs(30),
        kinds: vec![FirstStart {
            kind: "chat.completion".into(),
            provider: "a".into(),
            timeout: Duration::from_secs(60),
        }],
    }
}

async fn a_batch_starts_the_first_attempt_of_each_due_new_job(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let fresh = [
        created(&*store, "new-1").await,
        created(&*store, "new-2").await,
    ];
    // Not for this batch: another kind, a job that already had an attempt, one not due yet.
    store
        .create_or_replay(new_job_of(alice(), "image", "other-kind", "x"))
        .await
        .unwrap();
    let attempted = created(&*store, "attempted").await;
    started(&*store, &start_for(attempted, 0, "z", false)).await;
    let later = created(&*store, "later").await;
    let job = store.job_for_dispatch(later).await.unwrap().unwrap();
    assert!(
        store
            .defer_dispatch(later, job.version, Duration::from_secs(3600))
            .await
            .unwrap()
    );

    let mut started = store.start_first_attempts(&batch(10)).await.unwrap();
    started.sort_by_key(|(job, _)| job.id);
    let ids: Vec<Uuid> = started.iter().map(|(job, _)| job.id).collect();
    assert_eq!(ids, fresh.to_vec());
    for (job, attempt) in &started {
        assert_eq!(job.state, JobState::Running);
        assert_eq!(job.attempts, 1);
        assert_eq!(attempt.job_id, job.id);
        assert_eq!(attempt.number, 1);
        assert_eq!(attempt.provider, "a");
        assert_eq!(attempt.state, AttemptState::Starting);
        assert!(!attempt.hedge);
        assert_eq!(attempt.worker.as_deref(), Some("batch-worker"));
        assert_eq!(
            attempt.upstream_key.as_deref(),
            Some(format!("onejob:{}", job.id).as_str())
        );
        let deadline = attempt.deadline_at.unwrap() - attempt.started_at;
        let lease = attempt.lease_expires_at.unwrap() - attempt.started_at;
        assert!((59..=61).contains(&deadline.whole_seconds()), "{deadline}");
        assert!((29..=31).contains(&lease.whole_seconds()), "{lease}");
        // As a single start leaves it: the attempt is the job's, logged, and the job not due.
        assert_eq!(
            store.job_attempts(job.id).await.unwrap(),
            vec![attempt.clone()]
        );
        let events = store
            .events(&alice(), job.id, None, 10)
            .await
            .unwrap()
            .unwrap();
        let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [EventKind::Created, EventKind::AttemptStarted]);
        assert_eq!(events[1].attempt_id, Some(attempt.id));
        assert_eq!(
            events[1].detail,
            json!({ "number": 1, "provider": "a", "hedge": false })
        );
    }
    assert!(
        !store
            .due_jobs(10)
            .await
            .unwrap()
            .iter()
            .any(|id| fresh.contains(id))
    );
    // Nothing is left for a second batch, and an empty batch asks nothing.
    assert!(
        store
            .start_first_attempts(&batch(10))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .start_first_attempts(&batch(0))
            .await
            .unwrap()
            .is_empty()
    );
}

async fn a_batch_takes_the_oldest_due_jobs_up_to_its_limit(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let mut jobs = Vec::new();
    for i in 0..5 {
        jobs.push(created(&*store, &format!("job-{i}")).await);
        // Distinct dispatch times, oldest first.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let first = store.start_first_attempts(&batch(2)).await.unwrap();
    let mut ids: Vec<Uuid> = first.iter().map(|(job, _)| job.id).collect();
    ids.sort();
    assert_eq!(ids, jobs[..2].to_vec());
    let rest = store.start_first_attempts(&batch(10)).await.unwrap();
    assert_eq!(rest.len(), 3);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM attempts").await, 5);
}

async fn racing_batches_and_single_starts_make_one_attempt_per_job(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let stores: [Arc<dyn Store>; 2] = [db.open_store().await, db.open_store().await];
    let mut jobs = Vec::new();
    for i in 0..24 {
        jobs.push(created(&*stores[0], &format!("race-{i}")).await);
    }
    let batches = (0..8).map(|i| {
        let store = stores[i % 2].clone();
        tokio::spawn(async move {
            let started = store.start_first_attempts(&batch(5)).await.unwrap();
            started
                .into_iter()
                .map(|(job, _)| job.id)
                .collect::<Vec<_>>()
        })
    });
    let singles = jobs.iter().enumerate().map(|(i, &job_id)| {
        let store = stores[i % 2].clone();
        tokio::spawn(async move {
            match store
                .start_attempt(&start_for(job_id, 0, "a", false))
                .await
                .expect("a refused start is an answer, not an error")
            {
                StartOutcome::Started(_) => vec![job_id],
                StartOutcome::Refused(_) => Vec::new(),
            }
        })
    });
    let (batched, single) = futures::join!(join_all(batches), join_all(singles));
    let mut started: Vec<Uuid> = batched
        .into_iter()
        .chain(single)
        .flat_map(|r| r.unwrap())
        .collect();
    started.sort();
    let mut expected = jobs.clone();
    expected.sort();
    // Every job started exactly once, by a batch or by a single start.
    assert_eq!(started, expected);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM attempts").await, 24);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM attempts WHERE number = 1")
            .await,
        24
    );
    assert_eq!(
        db.scalar("SELECT CAST(MAX(attempts) AS BIGINT) FROM jobs")
            .await,
        1
    );
}

async fn a_job_another_starter_took_first_is_left_to_it(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let taken = created(&*store, "taken").await;
    let free = created(&*store, "free").await;
    let first = started(&*store, &start_for(taken, 0, "z", false)).await;
    let started = store.start_first_attempts(&batch(10)).await.unwrap();
    let ids: Vec<Uuid> = started.iter().map(|(job, _)| job.id).collect();
    assert_eq!(ids, vec![free]);
    let attempts = store.job_attempts(taken).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].id, first);
}

/// PostgreSQL: a job whose row another transaction holds is skipped, not waited for (as a
/// single start's `SKIP LOCKED`), and started by the next batch once it is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_held_job_is_skipped_not_waited_for() {
    let db = TestDatabase::create(Backend::Postgres).await;
    let store = db.open_store().await;
    let held = created(&*store, "held").await;
    let free = created(&*store, "free").await;
    let pg = onejob::store::postgres::PgStore::connect(&db.url, &Default::default())
        .await
        .unwrap();
    let mut tx = pg.pool().begin().await.unwrap();
    sqlx::query("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE")
        .bind(held)
        .execute(&mut *tx)
        .await
        .unwrap();
    let started = tokio::time::timeout(
        Duration::from_secs(10),
        store.start_first_attempts(&batch(10)),
    )
    .await
    .expect("the batch does not wait for the held job")
    .unwrap();
    let ids: Vec<Uuid> = started.iter().map(|(job, _)| job.id).collect();
    assert_eq!(ids, vec![free]);
    tx.rollback().await.unwrap();
    let next = store.start_first_attempts(&batch(10)).await.unwrap();
    let ids: Vec<Uuid> = next.iter().map(|(job, _)| job.id).collect();
    assert_eq!(ids, vec![held]);
}
