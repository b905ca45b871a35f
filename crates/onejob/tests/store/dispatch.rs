//! Dispatch: what workers ask of the store — which jobs are due (`due_jobs`,
//! `next_due_in`, `defer_dispatch`), starting attempts under the attempt guard,
//! acknowledging them, the send fence (`owns_attempt`), leases (`heartbeat`) and the
//! rescuer's view of expired ones (`expired_attempts`).

use std::{sync::Arc, time::Duration};

use futures::future::join_all;

use onejob::store::{
    Acknowledged, Intake, Resolution, StartOutcome, StartRefusal, Store, UnknownBy, Unsuccessful,
};
use onejob_domain::{AttemptState, EventKind, JobState, Principal};
use serde_json::json;
use uuid::Uuid;

use crate::support::{
    Backend, RETRY, TestDatabase, alice, created, every_backend_tests, fail, new_job_of, start_for,
    started,
};

every_backend_tests!(
    thirty_two_racing_starts_make_exactly_one_attempt,
    nothing_starts_beside_a_starting_or_unknown_attempt,
    a_hedge_starts_only_beside_a_running_attempt,
    the_send_fence_and_the_rescuer_respect_the_lease,
    the_heartbeat_reports_attempts_of_cancelled_jobs,
    due_jobs_are_listed_oldest_first_up_to_the_limit,
    a_start_is_refused_for_each_reason_of_the_guard,
    a_start_on_another_provider_logs_a_failover,
    an_acknowledgement_schedules_the_hedge,
    the_next_due_time_is_none_zero_or_ahead,
    a_deferral_applies_only_to_the_version_it_read,
    expired_attempts_are_those_past_their_lease_or_their_deadlines_grace,
    the_heartbeat_renews_only_the_workers_live_attempts,
    the_send_fence_holds_only_a_starting_attempt,
    the_send_fence_refuses_an_attempt_at_its_deadline,
);

async fn thirty_two_racing_starts_make_exactly_one_attempt(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let stores: [Arc<dyn Store>; 2] = [db.open_store().await, db.open_store().await];
    for round in 0..5 {
        let job_id = created(&*stores[0], &format!("guard-{round}")).await;
        let tries = (0..32).map(|i| {
            let store = stores[i % 2].clone();
            tokio::spawn(
                async move { store.start_attempt(&start_for(job_id, 0, "a", false)).await },
            )
        });
        let outcomes: Vec<StartOutcome> = join_all(tries)
            .await
            .into_iter()
            .map(|r| {
                r.unwrap()
                    .expect("a refused start is an answer, not an error")
            })
            .collect();
        let winners = outcomes
            .iter()
            .filter(|o| matches!(o, StartOutcome::Started(_)))
            .count();
        assert_eq!(winners, 1, "{outcomes:?}");
        assert_eq!(stores[0].job_attempts(job_id).await.unwrap().len(), 1);
    }
    assert_eq!(db.scalar("SELECT COUNT(*) FROM attempts").await, 5);
    assert_eq!(
        db.scalar("SELECT CAST(MAX(attempts) AS BIGINT) FROM jobs")
            .await,
        1
    );
}

async fn nothing_starts_beside_a_starting_or_unknown_attempt(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "blocked").await;
    let first = started(&*store, &start_for(job_id, 0, "a", false)).await;
    // While it is starting, nothing else (not even a hedge) starts; the job is not due anyway,
    // so force it due to prove the guard itself refuses.
    let force_due = db.dialect(
        "UPDATE jobs SET dispatch_at = now() - interval '1 second'",
        "UPDATE jobs SET dispatch_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 seconds')",
    );
    db.exec(force_due).await.unwrap();
    for hedge in [false, true] {
        assert_eq!(
            store
                .start_attempt(&start_for(job_id, 1, "b", hedge))
                .await
                .unwrap(),
            StartOutcome::Refused(StartRefusal::Blocked {
                attempt_id: first,
                state: AttemptState::Starting
            })
        );
    }
    assert!(
        store
            .mark_unknown(first, &json!({"reason": "deadline"}), UnknownBy::Worker)
            .await
            .unwrap()
    );
    db.exec(force_due).await.unwrap();
    assert_eq!(
        store
            .start_attempt(&start_for(job_id, 1, "b", false))
            .await
            .unwrap(),
        StartOutcome::Refused(StartRefusal::Blocked {
            attempt_id: first,
            state: AttemptState::Unknown
        })
    );
    assert_eq!(store.job_attempts(job_id).await.unwrap().len(), 1);
}

async fn a_hedge_starts_only_beside_a_running_attempt(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "hedge").await;
    let first = started(&*store, &start_for(job_id, 0, "a", false)).await;
    assert_eq!(
        store
            .acknowledge_attempt(first, Some("task-1"), Some(Duration::ZERO))
            .await
            .unwrap(),
        Acknowledged::Running
    );
    // Running and due for a hedge: a plain start is refused, a hedge starts.
    assert_eq!(
        store
            .start_attempt(&start_for(job_id, 1, "b", false))
            .await
            .unwrap(),
        StartOutcome::Refused(StartRefusal::NotHedgeable)
    );
    let hedge = started(&*store, &start_for(job_id, 1, "b", true)).await;
    let attempts = store.job_attempts(job_id).await.unwrap();
    assert_eq!(attempts[0].task_id.as_deref(), Some("task-1"));
    assert_eq!(attempts[0].state, AttemptState::Running);
    assert!(attempts[1].hedge && attempts[1].id == hedge);
}

/// The fence before a send: the worker owns its `starting` attempt only with enough lease
/// left and its job not cancelled; a rescuer takes an attempt only while its lease is still
/// expired, so a renewal that came first keeps it.
async fn the_send_fence_and_the_rescuer_respect_the_lease(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "fence").await;
    let mut start = start_for(job_id, 0, "a", false);
    // A lease long enough that a loaded machine still asks within it, with the margin.
    start.lease = Duration::from_millis(2_000);
    let attempt = started(&*store, &start).await;
    let margin = Duration::from_millis(100);
    assert!(
        store
            .owns_attempt(attempt, "test-worker", margin)
            .await
            .unwrap()
    );
    assert!(
        !store
            .owns_attempt(attempt, "another-worker", margin)
            .await
            .unwrap()
    );
    // Too little lease left to send safely.
    assert!(
        !store
            .owns_attempt(attempt, "test-worker", Duration::from_secs(5))
            .await
            .unwrap()
    );
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let expired = store
        .expired_attempts(Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(expired.len(), 1, "{expired:?}");
    // The owner renews before the rescuer acts on what it read: the rescue must not happen.
    store
        .heartbeat("test-worker", Duration::from_secs(30))
        .await
        .unwrap();
    let rescuer = UnknownBy::Rescuer {
        grace: Duration::from_secs(5),
    };
    let why = json!({"reason": "lease expired"});
    assert!(!store.mark_unknown(attempt, &why, rescuer).await.unwrap());
    assert_eq!(
        store.job_attempts(job_id).await.unwrap()[0].state,
        AttemptState::Starting
    );
    // A cancelled job's attempt is not the worker's to send any more.
    let owner = Principal::new("acme", "alice");
    store.cancel_job(&owner, job_id, "key:alice").await.unwrap();
    assert!(
        !store
            .owns_attempt(attempt, "test-worker", margin)
            .await
            .unwrap()
    );
}

/// The fence refuses an attempt whose deadline is closer than the margin, even with its lease
/// renewed: a late worker never sends after (or just before) the deadline, when the
/// reconciler would soon believe "never received" of a request still on its way.
async fn the_send_fence_refuses_an_attempt_at_its_deadline(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "late").await;
    let mut start = start_for(job_id, 0, "a", false);
    start.timeout = Duration::from_secs(3);
    let attempt = started(&*store, &start).await;
    // Plenty of lease (30 s), the deadline 3 s away: a 1 s margin fits, a 5 s one does not.
    assert!(
        store
            .owns_attempt(attempt, "test-worker", Duration::from_secs(1))
            .await
            .unwrap()
    );
    assert!(
        !store
            .owns_attempt(attempt, "test-worker", Duration::from_secs(5))
            .await
            .unwrap(),
        "sent with its deadline 3 s away and a 5 s margin"
    );
    // Past the deadline, with the lease renewed: never.
    tokio::time::sleep(Duration::from_millis(3_100)).await;
    store
        .heartbeat("test-worker", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(
        !store
            .owns_attempt(attempt, "test-worker", Duration::from_millis(10))
            .await
            .unwrap(),
        "sent after its deadline"
    );
}

/// The heartbeat reports the attempts of cancelled jobs among the ones it renewed.
async fn the_heartbeat_reports_attempts_of_cancelled_jobs(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let kept = created(&*store, "kept").await;
    let dropped = created(&*store, "dropped").await;
    started(&*store, &start_for(kept, 0, "a", false)).await;
    let doomed = started(&*store, &start_for(dropped, 0, "a", false)).await;
    let lease = Duration::from_secs(30);
    assert!(
        store
            .heartbeat("test-worker", lease)
            .await
            .unwrap()
            .is_empty()
    );
    let owner = Principal::new("acme", "alice");
    store
        .cancel_job(&owner, dropped, "key:alice")
        .await
        .unwrap();
    assert_eq!(
        store.heartbeat("test-worker", lease).await.unwrap(),
        vec![doomed]
    );
    assert!(
        store
            .heartbeat("another-worker", lease)
            .await
            .unwrap()
            .is_empty()
    );
}

/// `due_jobs` lists the jobs whose dispatch time has come, oldest first, at most `limit`,
/// whoever owns them; a job with an attempt in flight, or a finished one, is not due.
async fn due_jobs_are_listed_oldest_first_up_to_the_limit(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(created(&*store, &format!("due-{n}")).await);
    }
    let Intake::Created(bobs) = store
        .create_or_replay(new_job_of(
            Principal::new("globex", "bob"),
            "chat.completion",
            "due-bob",
            "a fox",
        ))
        .await
        .unwrap()
    else {
        panic!("a new job");
    };
    ids.push(bobs.id);
    assert_eq!(store.due_jobs(10).await.unwrap(), ids);
    assert_eq!(store.due_jobs(2).await.unwrap(), ids[..2]);
    started(&*store, &start_for(ids[0], 0, "a", false)).await;
    store
        .cancel_job(&alice(), ids[1], "key:alice")
        .await
        .unwrap();
    assert_eq!(store.due_jobs(10).await.unwrap(), ids[2..]);
    assert_eq!(store.due_jobs(0).await.unwrap(), Vec::<Uuid>::new());
}

/// Every refusal of `start_attempt` the guard documents, each leaving no attempt behind.
async fn a_start_is_refused_for_each_reason_of_the_guard(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let refused = |outcome: StartOutcome| match outcome {
        StartOutcome::Refused(reason) => reason,
        StartOutcome::Started(attempt) => panic!("started {attempt:?}"),
    };
    let nobody = start_for(Uuid::now_v7(), 0, "a", false);
    assert_eq!(
        refused(store.start_attempt(&nobody).await.unwrap()),
        StartRefusal::NotFound
    );
    let job_id = created(&*store, "guarded").await;
    assert_eq!(
        refused(
            store
                .start_attempt(&start_for(job_id, 1, "a", false))
                .await
                .unwrap()
        ),
        StartRefusal::Stale
    );
    assert_eq!(
        refused(
            store
                .start_attempt(&start_for(job_id, 0, "a", true))
                .await
                .unwrap()
        ),
        StartRefusal::NotHedgeable,
        "a hedge needs a running attempt"
    );
    // One failed attempt, then the kind's max_attempts lowered to 1: exhausted.
    let attempt = started(&*store, &start_for(job_id, 0, "a", false)).await;
    fail(&*store, attempt).await;
    let mut lowered = start_for(job_id, 1, "a", false);
    lowered.max_attempts = 1;
    assert_eq!(
        refused(store.start_attempt(&lowered).await.unwrap()),
        StartRefusal::Exhausted
    );
    // A pending job deferred is not due.
    let version = store
        .job_for_dispatch(job_id)
        .await
        .unwrap()
        .unwrap()
        .version;
    assert!(
        store
            .defer_dispatch(job_id, version, Duration::from_secs(3_600))
            .await
            .unwrap()
    );
    assert_eq!(
        refused(
            store
                .start_attempt(&start_for(job_id, 1, "a", false))
                .await
                .unwrap()
        ),
        StartRefusal::NotDue(JobState::Pending)
    );
    // A cancelled job is final, however due it is made.
    store
        .cancel_job(&alice(), job_id, "key:alice")
        .await
        .unwrap();
    db.exec(db.dialect(
        "UPDATE jobs SET dispatch_at = now() - interval '1 second'",
        "UPDATE jobs SET dispatch_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 seconds')",
    ))
    .await
    .unwrap();
    assert_eq!(
        refused(
            store
                .start_attempt(&start_for(job_id, 1, "a", false))
                .await
                .unwrap()
        ),
        StartRefusal::NotDue(JobState::Cancelled)
    );
    assert_eq!(store.job_attempts(job_id).await.unwrap().len(), 1);
}

/// A started attempt is `starting`, leased to its worker, numbered, with its upstream key;
/// the job is `running`. The next attempt on another provider logs a `failover`.
async fn a_start_on_another_provider_logs_a_failover(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "failover").await;
    let StartOutcome::Started(first) = store
        .start_attempt(&start_for(job_id, 0, "a", false))
        .await
        .unwrap()
    else {
        panic!("starts");
    };
    assert_eq!(
        (first.number, first.state, first.hedge),
        (1, AttemptState::Starting, false)
    );
    assert_eq!(first.provider, "a");
    assert_eq!(first.worker.as_deref(), Some("test-worker"));
    assert_eq!(
        first.upstream_key.as_deref(),
        Some(format!("onejob:{job_id}").as_str())
    );
    assert!(first.lease_expires_at.is_some() && first.deadline_at.is_some());
    let job = store.job_for_dispatch(job_id).await.unwrap().unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Running, 1));
    store
        .fail_attempt(
            first.id,
            Unsuccessful::Failed,
            &json!({"message": "no"}),
            RETRY,
            &Resolution::worker(),
        )
        .await
        .unwrap();
    let second = started(&*store, &start_for(job_id, 1, "b", false)).await;
    let events = store
        .events(&alice(), job_id, None, 100)
        .await
        .unwrap()
        .unwrap();
    let failovers: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::Failover)
        .collect();
    assert_eq!(failovers.len(), 1, "{events:?}");
    assert_eq!(failovers[0].attempt_id, Some(second));
    assert_eq!(failovers[0].detail, json!({"from": "a", "to": "b"}));
    assert_eq!(
        events
            .iter()
            .filter(|e| e.kind == EventKind::AttemptStarted)
            .count(),
        2
    );
}

/// An acknowledgement with `hedge_after` makes the running job due again then; without it,
/// the job waits for its attempt.
async fn an_acknowledgement_schedules_the_hedge(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let plain = created(&*store, "plain").await;
    let attempt = started(&*store, &start_for(plain, 0, "a", false)).await;
    assert_eq!(
        store
            .acknowledge_attempt(attempt, None, None)
            .await
            .unwrap(),
        Acknowledged::Running
    );
    assert_eq!(store.next_due_in().await.unwrap(), None);
    let hedged = created(&*store, "hedged").await;
    let attempt = started(&*store, &start_for(hedged, 0, "a", false)).await;
    store
        .acknowledge_attempt(attempt, None, Some(Duration::from_secs(3_600)))
        .await
        .unwrap();
    assert!(store.due_jobs(10).await.unwrap().is_empty());
    let wait = store.next_due_in().await.unwrap().expect("the hedge waits");
    assert!(wait > Duration::from_secs(3_000), "{wait:?}");
    // A second acknowledgement finds it running: no longer the caller's to start.
    assert_eq!(
        store
            .acknowledge_attempt(attempt, None, Some(Duration::ZERO))
            .await
            .unwrap(),
        Acknowledged::NotStarting(AttemptState::Running)
    );
    assert!(store.due_jobs(10).await.unwrap().is_empty());
}

/// `next_due_in`: `None` with nothing waiting, zero when a job is due now, the wait
/// otherwise.
async fn the_next_due_time_is_none_zero_or_ahead(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    assert_eq!(store.next_due_in().await.unwrap(), None);
    let job_id = created(&*store, "due").await;
    assert_eq!(store.next_due_in().await.unwrap(), Some(Duration::ZERO));
    let version = store
        .job_for_dispatch(job_id)
        .await
        .unwrap()
        .unwrap()
        .version;
    assert!(
        store
            .defer_dispatch(job_id, version, Duration::from_secs(600))
            .await
            .unwrap()
    );
    let wait = store
        .next_due_in()
        .await
        .unwrap()
        .expect("deferred, waiting");
    // Up to a millisecond over: SQLite keeps times to the millisecond, and its `now` may
    // round up past the caller's clock (seen: 600.0000045 s).
    assert!(
        wait > Duration::from_secs(500)
            && wait <= Duration::from_secs(600) + Duration::from_millis(1),
        "{wait:?}"
    );
    // The earliest one counts.
    created(&*store, "due-now").await;
    assert_eq!(store.next_due_in().await.unwrap(), Some(Duration::ZERO));
    for job in store
        .list_jobs(
            &alice(),
            &onejob::store::JobFilter {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap()
    {
        store
            .cancel_job(&alice(), job.id, "key:alice")
            .await
            .unwrap();
    }
    assert_eq!(store.next_due_in().await.unwrap(), None);
}

/// `defer_dispatch` pushes a due job back only if it is still at the version read; a job
/// that changed meanwhile keeps its new dispatch time, and one not waiting for dispatch is
/// not deferred.
async fn a_deferral_applies_only_to_the_version_it_read(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "deferred").await;
    let read = store
        .job_for_dispatch(job_id)
        .await
        .unwrap()
        .unwrap()
        .version;
    // The job changes meanwhile: an attempt fails, due again in an hour.
    let attempt = started(&*store, &start_for(job_id, 0, "a", false)).await;
    let retry = onejob::store::RetryPolicy {
        max_attempts: 3,
        backoff: Duration::from_secs(3_600),
    };
    store
        .fail_attempt(
            attempt,
            Unsuccessful::Failed,
            &json!({"message": "no"}),
            retry,
            &Resolution::worker(),
        )
        .await
        .unwrap();
    assert!(
        !store
            .defer_dispatch(job_id, read, Duration::ZERO)
            .await
            .unwrap()
    );
    let wait = store.next_due_in().await.unwrap().unwrap();
    assert!(
        wait > Duration::from_secs(3_000),
        "kept its new time: {wait:?}"
    );
    let current = store.job_for_dispatch(job_id).await.unwrap().unwrap();
    assert!(current.version > read);
    assert!(
        store
            .defer_dispatch(job_id, current.version, Duration::ZERO)
            .await
            .unwrap()
    );
    assert_eq!(store.next_due_in().await.unwrap(), Some(Duration::ZERO));
    assert_eq!(store.due_jobs(10).await.unwrap(), vec![job_id]);
    // Running, then cancelled: nothing to defer.
    started(&*store, &start_for(job_id, 1, "a", false)).await;
    let running = store.job_for_dispatch(job_id).await.unwrap().unwrap();
    assert!(
        !store
            .defer_dispatch(job_id, running.version, Duration::from_secs(60))
            .await
            .unwrap()
    );
    assert!(
        !store
            .defer_dispatch(Uuid::now_v7(), 1, Duration::from_secs(60))
            .await
            .unwrap()
    );
}

/// `expired_attempts` lists live attempts (id and provider) whose lease ran out or whose
/// deadline passed more than `grace` ago; ended attempts never.
async fn expired_attempts_are_those_past_their_lease_or_their_deadlines_grace(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let hour = Duration::from_secs(3_600);
    let start_with = async |key: &str, provider: &str, lease, timeout| {
        let job_id = created(&*store, key).await;
        let mut start = start_for(job_id, 0, provider, false);
        (start.lease, start.timeout) = (lease, timeout);
        started(&*store, &start).await
    };
    let healthy = start_with("healthy", "a", hour, hour).await;
    let lapsed = start_with("lapsed", "b", Duration::ZERO, hour).await;
    let overdue = start_with("overdue", "c", hour, Duration::ZERO).await;
    let ended = start_with("ended", "d", Duration::ZERO, Duration::ZERO).await;
    fail(&*store, ended).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut within_grace = store.expired_attempts(hour).await.unwrap();
    within_grace.sort();
    assert_eq!(within_grace, vec![(lapsed, "b".to_owned())]);
    let mut no_grace = store.expired_attempts(Duration::ZERO).await.unwrap();
    no_grace.sort();
    let mut expected = vec![(lapsed, "b".to_owned()), (overdue, "c".to_owned())];
    expected.sort();
    assert_eq!(no_grace, expected);
    assert!(!no_grace.iter().any(|(id, _)| *id == healthy));
}

/// `heartbeat` renews the leases of the worker's `starting` and `running` attempts, not
/// other workers' and not ended or unknown ones.
async fn the_heartbeat_renews_only_the_workers_live_attempts(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let start_as = async |key: &str, worker: &str| {
        let job_id = created(&*store, key).await;
        let mut start = start_for(job_id, 0, "a", false);
        (start.worker, start.lease) = (worker.into(), Duration::ZERO);
        started(&*store, &start).await
    };
    let starting = start_as("starting", "test-worker").await;
    let running = start_as("running", "test-worker").await;
    let unknown = start_as("unknown", "test-worker").await;
    let theirs = start_as("theirs", "another-worker").await;
    store
        .acknowledge_attempt(running, None, None)
        .await
        .unwrap();
    assert!(
        store
            .mark_unknown(unknown, &json!({"reason": "deadline"}), UnknownBy::Worker)
            .await
            .unwrap()
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut expired: Vec<Uuid> = store
        .expired_attempts(Duration::from_secs(3_600))
        .await
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    expired.sort();
    let mut all = vec![starting, running, theirs];
    all.sort();
    assert_eq!(expired, all);
    renew_for_an_hour(&*store).await;
    let expired: Vec<Uuid> = store
        .expired_attempts(Duration::from_secs(3_600))
        .await
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(expired, vec![theirs]);
    let attempts = store
        .list_attempts(
            &onejob::store::Scope {
                tenant: "acme".into(),
                user: None,
            },
            Some(AttemptState::Unknown),
            10,
        )
        .await
        .unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].id, unknown);
}

/// On PostgreSQL a heartbeat renews each lease in place (a HOT update: a new version of the
/// row on its page, no new entry in any index), since the lease is in no index: read from
/// the page itself (`pageinspect`), where each version written by a HOT update carries
/// `HEAP_ONLY_TUPLE`. With `attempts_live_leases` (keyed on the lease) every renewal wrote
/// an entry into each of the table's indexes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_heartbeat_renews_each_lease_in_place_on_postgres() {
    let db = TestDatabase::create(Backend::Postgres).await;
    let store = db.open_store().await;
    db.exec("CREATE EXTENSION IF NOT EXISTS pageinspect")
        .await
        .unwrap();
    let mut live = Vec::new();
    for key in ["in-place-1", "in-place-2", "in-place-3"] {
        let job_id = created(&*store, key).await;
        live.push(started(&*store, &start_for(job_id, 0, "a", false)).await);
    }
    // One of them running (acknowledged: a change of state, which is not in place).
    store
        .acknowledge_attempt(live[0], None, None)
        .await
        .unwrap();
    const IN_PLACE: &str = "SELECT count(*) FROM heap_page_items(get_raw_page('attempts', 0)) \
                            WHERE t_infomask2 & 32768 <> 0";
    let before = db.scalar(IN_PLACE).await;
    assert_eq!(
        db.scalar("SELECT count(*) FROM attempts WHERE (ctid::text::point)[0] <> 0")
            .await,
        0,
        "the few attempts of this test share the table's first page"
    );
    renew_for_an_hour(&*store).await;
    assert_eq!(
        db.scalar(IN_PLACE).await - before,
        live.len() as i64,
        "every renewed lease is a HOT update"
    );
}

/// `test-worker`'s heartbeat, renewing its live attempts' leases for an hour; none of them
/// is of a cancelled job.
async fn renew_for_an_hour(store: &dyn Store) {
    let cancelled = store
        .heartbeat("test-worker", Duration::from_secs(3_600))
        .await
        .unwrap();
    assert!(
        cancelled.is_empty(),
        "attempts of cancelled jobs: {cancelled:?}"
    );
}

/// The fence holds only for a `starting` attempt: once running, unknown or ended, it is not
/// the worker's to send; an unknown attempt id is nobody's.
async fn the_send_fence_holds_only_a_starting_attempt(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let stores: [Arc<dyn Store>; 2] = [db.open_store().await, db.open_store().await];
    let store = &stores[0];
    let margin = Duration::from_millis(100);
    let job_id = created(&**store, "fence").await;
    let attempt = started(&**store, &start_for(job_id, 0, "a", false)).await;
    // Many fence checks side by side all see the same answer.
    let checks = (0..16).map(|i| {
        let store = stores[i % 2].clone();
        tokio::spawn(async move { store.owns_attempt(attempt, "test-worker", margin).await })
    });
    assert!(
        join_all(checks)
            .await
            .into_iter()
            .all(|c| c.unwrap().unwrap())
    );
    store
        .acknowledge_attempt(attempt, None, None)
        .await
        .unwrap();
    assert!(
        !store
            .owns_attempt(attempt, "test-worker", margin)
            .await
            .unwrap()
    );
    assert!(
        !store
            .owns_attempt(Uuid::now_v7(), "test-worker", margin)
            .await
            .unwrap()
    );
}
