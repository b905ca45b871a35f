//! Lifecycle: a job's owner cancelling it (`cancel_job`, and what it means for attempts in
//! flight), controlled recovery of a failed job (`recover_job`), and the end of a finished
//! job's life (`prune_finished`).

use std::{sync::Arc, time::Duration};

use futures::future::join_all;

use onejob::store::{
    Acknowledged, CancelOutcome, Completion, Intake, RecoverOutcome, Resolution, StartOutcome,
    Store, UnknownBy,
};
use onejob_domain::{AttemptState, EventKind, IdempotencyKey, JobState, Principal};
use serde_json::json;
use uuid::Uuid;

use crate::support::{
    Backend, TestDatabase, alice, created, every_backend_tests, fail, new_job, start_for, started,
};

every_backend_tests!(
    acknowledging_an_attempt_of_a_cancelled_job_cancels_it,
    a_result_after_cancellation_is_discarded,
    cancelling_twice_answers_the_cancelled_job_unchanged,
    a_finished_job_is_not_cancelled,
    cancelling_ends_unknown_attempts_and_returns_live_ones,
    another_owner_can_neither_cancel_nor_recover,
    only_a_failed_job_is_recovered,
    a_recovered_job_has_a_fresh_attempt_budget,
    pruning_deletes_only_old_finished_jobs,
    pruning_deletes_at_most_the_limit,
    racing_pruners_delete_each_job_once,
    a_pass_takes_a_job_crossing_its_threshold_whole_or_not_at_all,
);

/// The acknowledgement of an attempt whose job was cancelled while it was being sent ends
/// it `cancelled` (task id stored) and says so, so the worker asks the provider to cancel.
async fn acknowledging_an_attempt_of_a_cancelled_job_cancels_it(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "cancel-while-starting").await;
    let attempt = started(&*store, &start_for(job_id, 0, "a", false)).await;
    let owner = Principal::new("acme", "alice");
    let cancelled = store.cancel_job(&owner, job_id, "key:alice").await.unwrap();
    assert!(matches!(cancelled, Some(CancelOutcome::Cancelled { .. })));
    assert_eq!(
        store
            .acknowledge_attempt(attempt, Some("task-9"), None)
            .await
            .unwrap(),
        Acknowledged::JobCancelled
    );
    let attempts = store.job_attempts(job_id).await.unwrap();
    assert_eq!(attempts[0].state, AttemptState::Cancelled);
    assert_eq!(attempts[0].task_id.as_deref(), Some("task-9"));
}

/// A result arriving after the job was cancelled is discarded (never merged) and recorded.
async fn a_result_after_cancellation_is_discarded(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "cancelled-late").await;
    let attempt = started(&*store, &start_for(job_id, 0, "a", false)).await;
    store
        .acknowledge_attempt(attempt, None, None)
        .await
        .unwrap();
    let owner = Principal::new("acme", "alice");
    store.cancel_job(&owner, job_id, "key:alice").await.unwrap();
    let completion = store
        .complete_attempt(attempt, &json!({"text": "late"}), &Resolution::worker())
        .await
        .unwrap();
    assert!(
        matches!(
            completion,
            Completion::Discarded {
                job_state: onejob_domain::JobState::Cancelled,
                ..
            }
        ),
        "{completion:?}"
    );
    let job = store.job_for_dispatch(job_id).await.unwrap().unwrap();
    assert_eq!(job.result, None);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_events WHERE kind = 'race_lost'")
            .await,
        1
    );
}

/// A job that failed: three failed attempts under [`RETRY`].
async fn failed_job(store: &dyn Store, key: &str) -> Uuid {
    let job_id = created(store, key).await;
    for n in 0..3 {
        let attempt = started(store, &start_for(job_id, n, "a", false)).await;
        fail(store, attempt).await;
    }
    job_id
}

/// A job that succeeded on its first attempt.
async fn succeeded_job(store: &dyn Store, key: &str) -> Uuid {
    let job_id = created(store, key).await;
    let attempt = started(store, &start_for(job_id, 0, "a", false)).await;
    assert_eq!(
        store
            .complete_attempt(attempt, &json!({"text": "done"}), &Resolution::worker())
            .await
            .unwrap(),
        Completion::Won
    );
    job_id
}

async fn events_of_kind(store: &dyn Store, job_id: Uuid, kind: EventKind) -> usize {
    store
        .events(&alice(), job_id, None, 1_000)
        .await
        .unwrap()
        .unwrap()
        .iter()
        .filter(|e| e.kind == kind)
        .count()
}

/// Cancelling a pending job makes it `cancelled`, not due, with one `cancelled` event
/// naming the actor; cancelling it again answers the same job unchanged.
async fn cancelling_twice_answers_the_cancelled_job_unchanged(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "cancel").await;
    let Some(CancelOutcome::Cancelled { job, live }) = store
        .cancel_job(&alice(), job_id, "key:alice")
        .await
        .unwrap()
    else {
        panic!("cancelled");
    };
    assert_eq!(job.state, JobState::Cancelled);
    assert!(live.is_empty());
    assert!(store.due_jobs(10).await.unwrap().is_empty());
    assert_eq!(
        store.cancel_job(&alice(), job_id, "key:bob").await.unwrap(),
        Some(CancelOutcome::Cancelled {
            job: job.clone(),
            live: Vec::new()
        })
    );
    assert_eq!(
        store.job_for_dispatch(job_id).await.unwrap(),
        Some(job.clone())
    );
    let cancelled: Vec<_> = store
        .events(&alice(), job_id, None, 100)
        .await
        .unwrap()
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == EventKind::Cancelled)
        .collect();
    assert_eq!(cancelled.len(), 1, "{cancelled:?}");
    assert_eq!(cancelled[0].actor.as_deref(), Some("key:alice"));
}

/// A job that succeeded or failed is final: cancelling answers it as it is.
async fn a_finished_job_is_not_cancelled(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    for (job_id, state) in [
        (succeeded_job(&*store, "won").await, JobState::Succeeded),
        (failed_job(&*store, "lost").await, JobState::Failed),
    ] {
        let before = store.job_for_dispatch(job_id).await.unwrap().unwrap();
        assert_eq!(before.state, state);
        assert_eq!(
            store
                .cancel_job(&alice(), job_id, "key:alice")
                .await
                .unwrap(),
            Some(CancelOutcome::Final(before.clone()))
        );
        assert_eq!(store.job_for_dispatch(job_id).await.unwrap(), Some(before));
        assert_eq!(
            events_of_kind(&*store, job_id, EventKind::Cancelled).await,
            0
        );
    }
}

/// Cancelling a job in flight: its `unknown` attempts become `cancelled` (an
/// `attempt_resolved` event each, naming the actor), its `starting` and `running` ones are
/// returned for an upstream cancel, and their lease holders learn it from the heartbeat.
async fn cancelling_ends_unknown_attempts_and_returns_live_ones(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "in-flight").await;
    let primary = started(&*store, &start_for(job_id, 0, "a", false)).await;
    store
        .acknowledge_attempt(primary, Some("task-1"), Some(Duration::ZERO))
        .await
        .unwrap();
    let hedge = started(&*store, &start_for(job_id, 1, "b", true)).await;
    store
        .acknowledge_attempt(hedge, Some("task-2"), Some(Duration::ZERO))
        .await
        .unwrap();
    let third = started(&*store, &start_for(job_id, 2, "c", true)).await;
    assert!(
        store
            .mark_unknown(primary, &json!({"reason": "deadline"}), UnknownBy::Worker)
            .await
            .unwrap()
    );
    assert_eq!(store.count_unknown().await.unwrap(), 1);
    let Some(CancelOutcome::Cancelled { job, live }) = store
        .cancel_job(&alice(), job_id, "key:alice")
        .await
        .unwrap()
    else {
        panic!("cancelled");
    };
    assert_eq!(job.state, JobState::Cancelled);
    let live: Vec<(Uuid, AttemptState)> = live.iter().map(|a| (a.id, a.state)).collect();
    assert_eq!(
        live,
        [
            (hedge, AttemptState::Running),
            (third, AttemptState::Starting)
        ]
    );
    let states: Vec<AttemptState> = store
        .job_attempts(job_id)
        .await
        .unwrap()
        .iter()
        .map(|a| a.state)
        .collect();
    assert_eq!(
        states,
        [
            AttemptState::Cancelled,
            AttemptState::Running,
            AttemptState::Starting
        ]
    );
    assert_eq!(store.count_unknown().await.unwrap(), 0);
    let resolved: Vec<_> = store
        .events(&alice(), job_id, None, 100)
        .await
        .unwrap()
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == EventKind::AttemptResolved)
        .collect();
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    assert_eq!(resolved[0].attempt_id, Some(primary));
    assert_eq!(resolved[0].actor.as_deref(), Some("key:alice"));
    let mut stopped = store
        .heartbeat("test-worker", Duration::from_secs(30))
        .await
        .unwrap();
    stopped.sort();
    let mut expected = vec![hedge, third];
    expected.sort();
    assert_eq!(stopped, expected);
    assert_eq!(
        store
            .acknowledge_attempt(third, Some("task-3"), None)
            .await
            .unwrap(),
        Acknowledged::JobCancelled
    );
}

/// `cancel_job` and `recover_job` answer `None` for another owner's job (or no job), and
/// change nothing.
async fn another_owner_can_neither_cancel_nor_recover(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let pending = created(&*store, "pending").await;
    let failed = failed_job(&*store, "failed").await;
    let before = [
        store.job_for_dispatch(pending).await.unwrap(),
        store.job_for_dispatch(failed).await.unwrap(),
    ];
    for stranger in [
        Principal::new("acme", "bob"),
        Principal::new("globex", "alice"),
    ] {
        for job_id in [pending, failed] {
            assert_eq!(
                store.cancel_job(&stranger, job_id, "key:x").await.unwrap(),
                None
            );
            assert_eq!(
                store.recover_job(&stranger, job_id, "key:x").await.unwrap(),
                None
            );
        }
    }
    let nobody = Uuid::now_v7();
    assert_eq!(
        store.cancel_job(&alice(), nobody, "key:x").await.unwrap(),
        None
    );
    assert_eq!(
        store.recover_job(&alice(), nobody, "key:x").await.unwrap(),
        None
    );
    let after = [
        store.job_for_dispatch(pending).await.unwrap(),
        store.job_for_dispatch(failed).await.unwrap(),
    ];
    assert_eq!(before, after);
}

/// Only a `failed` job is recovered: pending, succeeded and cancelled ones are answered as
/// they are.
async fn only_a_failed_job_is_recovered(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let pending = created(&*store, "pending").await;
    let succeeded = succeeded_job(&*store, "succeeded").await;
    let cancelled = created(&*store, "cancelled").await;
    store
        .cancel_job(&alice(), cancelled, "key:alice")
        .await
        .unwrap();
    for job_id in [pending, succeeded, cancelled] {
        let before = store.job_for_dispatch(job_id).await.unwrap().unwrap();
        assert_eq!(
            store
                .recover_job(&alice(), job_id, "key:alice")
                .await
                .unwrap(),
            Some(RecoverOutcome::NotFailed(before.clone())),
        );
        assert_eq!(store.job_for_dispatch(job_id).await.unwrap(), Some(before));
        assert_eq!(
            events_of_kind(&*store, job_id, EventKind::Recovered).await,
            0
        );
    }
}

/// A recovered job is `pending`, due now, its version bumped and its error cleared, with
/// `max_attempts` more attempts and a `recovered` event naming the actor; recovering it
/// again (no longer failed) changes nothing.
async fn a_recovered_job_has_a_fresh_attempt_budget(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = failed_job(&*store, "recover").await;
    let failed = store.job_for_dispatch(job_id).await.unwrap().unwrap();
    assert_eq!(failed.state, JobState::Failed);
    assert_eq!(
        store
            .start_attempt(&start_for(job_id, 3, "a", false))
            .await
            .unwrap(),
        StartOutcome::Refused(onejob::store::StartRefusal::NotDue(JobState::Failed))
    );
    let Some(RecoverOutcome::Recovered(job)) = store
        .recover_job(&alice(), job_id, "key:ops")
        .await
        .unwrap()
    else {
        panic!("recovered");
    };
    assert_eq!(job.state, JobState::Pending);
    assert!(job.version > failed.version);
    assert_eq!((job.recoveries, job.attempts), (1, 3));
    assert_eq!(job.error, None);
    assert_eq!(store.due_jobs(10).await.unwrap(), vec![job_id]);
    assert_eq!(store.next_due_in().await.unwrap(), Some(Duration::ZERO));
    let recovered: Vec<_> = store
        .events(&alice(), job_id, None, 100)
        .await
        .unwrap()
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == EventKind::Recovered)
        .collect();
    assert_eq!(recovered.len(), 1);
    assert_eq!(recovered[0].actor.as_deref(), Some("key:ops"));
    assert_eq!(
        store
            .recover_job(&alice(), job_id, "key:ops")
            .await
            .unwrap(),
        Some(RecoverOutcome::NotFailed(job))
    );
    // Three more attempts, then failed again.
    for n in 3..6 {
        let attempt = started(&*store, &start_for(job_id, n, "a", false)).await;
        fail(&*store, attempt).await;
    }
    let job = store.job_for_dispatch(job_id).await.unwrap().unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Failed, 6));
}

/// Pruning deletes the jobs that finished (succeeded, failed, cancelled) longer ago than
/// `older_than`, with their attempts and events; the rest stay, and a pruned job's key
/// names nothing any more.
async fn pruning_deletes_only_old_finished_jobs(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    succeeded_job(&*store, "old-succeeded").await;
    failed_job(&*store, "old-failed").await;
    let cancelled = created(&*store, "old-cancelled").await;
    store
        .cancel_job(&alice(), cancelled, "key:alice")
        .await
        .unwrap();
    let pending = created(&*store, "old-pending").await;
    let running = created(&*store, "old-running").await;
    started(&*store, &start_for(running, 0, "a", false)).await;
    db.age_jobs().await;
    let recent = succeeded_job(&*store, "recent-succeeded").await;
    let events_before = db.scalar("SELECT COUNT(*) FROM job_events").await;
    let mut kept_events = 0;
    for job_id in [pending, running, recent] {
        kept_events += store
            .events(&alice(), job_id, None, 1_000)
            .await
            .unwrap()
            .unwrap()
            .len() as i64;
    }

    let pruned = store
        .prune_finished(Duration::from_secs(1_800), 100)
        .await
        .unwrap();
    assert_eq!((pruned.jobs, pruned.attempts, pruned.busy), (3, 4, false));
    assert_eq!(pruned.events as i64, events_before - kept_events);
    let mut left: Vec<Uuid> = store
        .list_jobs(
            &alice(),
            &onejob::store::JobFilter {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    left.sort();
    let mut expected = vec![pending, running, recent];
    expected.sort();
    assert_eq!(left, expected);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_events").await,
        kept_events
    );
    let key = IdempotencyKey::parse("old-cancelled").unwrap().hash();
    assert_eq!(store.job_by_key(&alice(), &key).await.unwrap(), None);
    assert!(matches!(
        store
            .create_or_replay(new_job("old-cancelled", "old-cancelled"))
            .await
            .unwrap(),
        Intake::Created(_)
    ));
    let again = store
        .prune_finished(Duration::from_secs(1_800), 100)
        .await
        .unwrap();
    assert_eq!((again.jobs, again.attempts, again.events), (0, 0, 0));
}

/// One pass deletes at most `limit` jobs; the next passes take the rest.
async fn pruning_deletes_at_most_the_limit(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    for n in 0..5 {
        let job_id = created(&*store, &format!("done-{n}")).await;
        store
            .cancel_job(&alice(), job_id, "key:alice")
            .await
            .unwrap();
    }
    let mut passes = Vec::new();
    for _ in 0..4 {
        passes.push(store.prune_finished(Duration::ZERO, 2).await.unwrap().jobs);
    }
    assert_eq!(passes, [2, 2, 1, 0]);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM jobs").await, 0);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM job_events").await, 0);
}

/// Passes run back to back while finished jobs cross their `older_than` one after another
/// (600 jobs finishing over 1.2 s): each pass takes every row of a job or none, so no pass
/// fails and no event or attempt is left without its job. On SQLite each of the pass's three
/// deletes read the clock anew, so a job crossing between the first and the last lost its
/// row but kept its events, and the deferred foreign key failed the commit.
async fn a_pass_takes_a_job_crossing_its_threshold_whole_or_not_at_all(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let jobs: u64 = 600;
    for n in 0..jobs {
        let job_id = created(&*store, &format!("crossing-{n}")).await;
        store
            .cancel_job(&alice(), job_id, "key:alice")
            .await
            .unwrap();
    }
    // Finished between 1 s ago and 0.2 s from now: with `older_than` 1 s, they become
    // prunable one after another over the next 1.2 s.
    db.exec(db.dialect(
        // A spread drawn from each job's id: Citus refuses `random()` in a distributed write.
        "UPDATE jobs SET updated_at = to_timestamp(extract(epoch FROM now()) - 1.0 \
         + ('x' || left(md5(id::text), 7))::bit(28)::int % 1200 / 1000.0)",
        "UPDATE jobs SET updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', \
         printf('%+.3f seconds', -1.0 + (abs(random()) % 1200) / 1000.0))",
    ))
    .await
    .unwrap();
    let mut deleted = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while deleted < jobs {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{deleted} of {jobs} pruned"
        );
        let pruned = store
            .prune_finished(Duration::from_secs(1), 50)
            .await
            .expect("a pass fails while jobs cross its threshold");
        deleted += pruned.jobs;
    }
    assert_eq!(db.scalar("SELECT COUNT(*) FROM jobs").await, 0);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM job_events").await, 0);
}

/// Pruners on many connections side by side: every call answers (a busy one deletes
/// nothing and says so), and each job is deleted exactly once.
async fn racing_pruners_delete_each_job_once(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let stores: [Arc<dyn Store>; 2] = [db.open_store().await, db.open_store().await];
    let jobs = 60;
    for n in 0..jobs {
        let job_id = created(&*stores[0], &format!("done-{n}")).await;
        stores[0]
            .cancel_job(&alice(), job_id, "key:alice")
            .await
            .unwrap();
    }
    let pruners = (0..8).map(|i| {
        let store = stores[i % 2].clone();
        tokio::spawn(async move { store.prune_finished(Duration::ZERO, 10).await })
    });
    let mut deleted = 0;
    for pruned in join_all(pruners).await {
        let pruned = pruned.unwrap().expect("a pruning pass answers");
        if pruned.busy {
            assert_eq!((pruned.jobs, pruned.attempts, pruned.events), (0, 0, 0));
        }
        deleted += pruned.jobs;
    }
    // Whatever the race left, later passes finish it; nothing is deleted twice.
    loop {
        let pruned = stores[0].prune_finished(Duration::ZERO, 100).await.unwrap();
        if pruned.jobs == 0 && !pruned.busy {
            break;
        }
        deleted += pruned.jobs;
    }
    assert_eq!(deleted, jobs);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM jobs").await, 0);
}
