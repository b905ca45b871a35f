//! The store conformance suite: the same checks against the PostgreSQL and SQLite stores,
//! straight through the [`Store`] trait and raw SQL. These prove that the database, not the
//! application, enforces the invariants.

use std::sync::Arc;

use futures::future::join_all;
use std::time::Duration;

use onejob::store::{
    Acknowledged, AttemptStart, CancelOutcome, Completion, FailOutcome, Intake, Resolution,
    RetryPolicy, StartOutcome, StartRefusal, Store, UnknownBy, Unsuccessful,
};
use onejob_domain::AttemptState;
use onejob_domain::Principal;
use serde_json::json;
use uuid::Uuid;

use crate::helpers::{Backend, TestDatabase, backend_tests, new_job};

backend_tests!(
    racing_submissions_on_many_connections_create_one_job_per_key,
    overlapping_batches_in_opposite_orders_never_deadlock,
    a_different_fingerprint_conflicts_and_writes_nothing,
    the_unique_constraint_refuses_a_second_row_for_a_key,
    a_jobs_intent_cannot_be_changed_in_the_database,
    the_event_log_is_append_only,
    a_result_needs_a_winning_attempt_of_the_same_job,
    thirty_two_racing_starts_make_exactly_one_attempt,
    nothing_starts_beside_a_starting_or_unknown_attempt,
    a_hedge_starts_only_beside_a_running_attempt,
    racing_completions_have_exactly_one_winner,
    a_result_is_written_once_in_the_database,
    a_failed_attempt_frees_the_job_for_the_next_within_max_attempts,
    a_late_result_never_wins_over_a_resolution_racing_it,
    the_winner_discards_its_unknown_siblings,
    nul_characters_from_providers_and_operators_are_recorded,
    a_task_id_is_stored_whatever_the_attempts_state,
    acknowledging_an_attempt_of_a_cancelled_job_cancels_it,
    the_send_fence_and_the_rescuer_respect_the_lease,
    the_heartbeat_reports_attempts_of_cancelled_jobs,
    a_failure_records_whether_it_spent_the_upstream_key,
    a_pending_job_without_budget_is_settled_failed,
    a_result_after_cancellation_is_discarded,
);

async fn racing_submissions_on_many_connections_create_one_job_per_key(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    // Two independent pools, as two onejob nodes would have.
    let stores: [Arc<dyn Store>; 2] = [db.open_store().await, db.open_store().await];
    let keys = 25;
    let copies = 8;
    let attempts = (0..keys * copies).map(|i| {
        let store = stores[i % 2].clone();
        let job = new_job(
            &format!("key-{}", i % keys),
            &format!("prompt {}", i % keys),
        );
        tokio::spawn(async move { store.create_or_replay(job).await })
    });
    let mut created = std::collections::HashMap::new();
    let mut seen = std::collections::HashMap::<_, std::collections::HashSet<Uuid>>::new();
    for outcome in join_all(attempts).await {
        match outcome.unwrap().expect("store call") {
            Intake::Created(job) => {
                *created.entry(job.key_hash).or_insert(0) += 1;
                seen.entry(job.key_hash).or_default().insert(job.id);
            }
            Intake::Replayed(job) => {
                seen.entry(job.key_hash).or_default().insert(job.id);
            }
            Intake::Conflict(job) => panic!("same intent reported as a conflict: {job:?}"),
        }
    }
    assert_eq!(created.len(), keys, "every key created exactly once");
    assert!(created.values().all(|&n| n == 1));
    assert!(
        seen.values().all(|ids| ids.len() == 1),
        "one job id per key"
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM jobs").await, keys as i64);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_events WHERE kind = 'created'")
            .await,
        keys as i64
    );
}

/// Found by the fault suite's storm (`chaos/`): intake batches of two nodes that share keys
/// in opposite orders deadlocked, and the losing batch's submissions were all answered 503.
/// Every call must succeed.
async fn overlapping_batches_in_opposite_orders_never_deadlock(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let stores: [Arc<dyn Store>; 3] = [
        db.open_store().await,
        db.open_store().await,
        db.open_store().await,
    ];
    let keys = 150;
    let calls = (0..6).flat_map(|round| {
        let stores = stores.clone();
        (0..keys).map(move |i| {
            // Even rounds walk the keys up, odd rounds down: batches overlap in both orders.
            let k = if round % 2 == 0 { i } else { keys - 1 - i };
            let store = stores[round % 3].clone();
            let job = new_job(&format!("key-{k}"), &format!("prompt {k}"));
            tokio::spawn(async move { store.create_or_replay(job).await })
        })
    });
    let outcomes = join_all(calls.collect::<Vec<_>>()).await;
    let failed: Vec<String> = outcomes
        .into_iter()
        .filter_map(|o| {
            o.unwrap()
                .err()
                .map(|e| onejob::store::Chain(&e).to_string())
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} submissions failed, first: {:?}",
        failed.len(),
        failed.first()
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM jobs").await, keys as i64);
}

async fn a_different_fingerprint_conflicts_and_writes_nothing(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let Intake::Created(original) = store.create_or_replay(new_job("k", "a fox")).await.unwrap()
    else {
        panic!("first submission creates");
    };
    let events_before = db.scalar("SELECT COUNT(*) FROM job_events").await;
    match store.create_or_replay(new_job("k", "a cat")).await.unwrap() {
        Intake::Conflict(existing) => assert_eq!(existing, original),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(db.scalar("SELECT COUNT(*) FROM jobs").await, 1);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_events").await,
        events_before
    );
}

async fn the_unique_constraint_refuses_a_second_row_for_a_key(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    store.create_or_replay(new_job("k", "a fox")).await.unwrap();
    // Bypass the application entirely: a plain INSERT of a copy must be refused.
    let duplicate = db.dialect(
        "INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params) \
         SELECT gen_random_uuid(), tenant, user_id, key_hash, kind, fingerprint, params FROM jobs",
        "INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params) \
         SELECT lower(hex(randomblob(16))), tenant, user_id, key_hash, kind, fingerprint, params FROM jobs",
    );
    let error = db
        .exec(duplicate)
        .await
        .expect_err("a second row for one key");
    assert!(
        error.contains("jobs_one_per_key") || error.contains("UNIQUE"),
        "{error}"
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM jobs").await, 1);
}

async fn a_jobs_intent_cannot_be_changed_in_the_database(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    store.create_or_replay(new_job("k", "a fox")).await.unwrap();
    for statement in [
        db.dialect(
            "UPDATE jobs SET params = '{\"prompt\": \"a cat\"}'::jsonb",
            "UPDATE jobs SET params = '{\"prompt\": \"a cat\"}'",
        ),
        "UPDATE jobs SET kind = 'image.generate'",
        "UPDATE jobs SET user_id = 'mallory'",
    ] {
        let error = db.exec(statement).await.expect_err(statement);
        assert!(error.contains("never changes"), "{statement}: {error}");
    }
    // State changes are allowed.
    assert_eq!(
        db.exec("UPDATE jobs SET version = version + 1").await,
        Ok(1)
    );
}

async fn the_event_log_is_append_only(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    store.create_or_replay(new_job("k", "a fox")).await.unwrap();
    for statement in [
        "UPDATE job_events SET actor = 'someone else'",
        "DELETE FROM job_events",
    ] {
        let error = db.exec(statement).await.expect_err(statement);
        assert!(error.contains("append-only"), "{statement}: {error}");
    }
    assert_eq!(db.scalar("SELECT COUNT(*) FROM job_events").await, 1);
}

async fn a_result_needs_a_winning_attempt_of_the_same_job(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    store.create_or_replay(new_job("k", "a fox")).await.unwrap();
    // succeeded without completed_by, and a result on a pending job, are refused.
    for statement in [
        "UPDATE jobs SET state = 'succeeded'",
        db.dialect(
            "UPDATE jobs SET result = '{}'::jsonb",
            "UPDATE jobs SET result = '{}'",
        ),
    ] {
        assert!(db.exec(statement).await.is_err(), "{statement}");
    }
}

async fn created(store: &dyn Store, key: &str) -> Uuid {
    match store.create_or_replay(new_job(key, key)).await.unwrap() {
        Intake::Created(job) => job.id,
        other => panic!("expected a new job, got {other:?}"),
    }
}

fn start_for(job_id: Uuid, expected_attempts: i32, provider: &str, hedge: bool) -> AttemptStart {
    AttemptStart {
        job_id,
        expected_attempts,
        provider: provider.into(),
        hedge,
        worker: "test-worker".into(),
        lease: Duration::from_secs(30),
        timeout: Duration::from_secs(30),
        max_attempts: 3,
        upstream_key: format!("onejob:{job_id}"),
    }
}

async fn started(store: &dyn Store, start: &AttemptStart) -> Uuid {
    match store.start_attempt(start).await.unwrap() {
        StartOutcome::Started(attempt) => attempt.id,
        StartOutcome::Refused(reason) => panic!("refused: {reason:?}"),
    }
}

const RETRY: RetryPolicy = RetryPolicy {
    max_attempts: 3,
    backoff: Duration::ZERO,
};

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

async fn racing_completions_have_exactly_one_winner(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let stores: [Arc<dyn Store>; 2] = [db.open_store().await, db.open_store().await];
    for round in 0..8 {
        let store = &stores[0];
        let job_id = created(&**store, &format!("race-{round}")).await;
        let a = started(&**store, &start_for(job_id, 0, "a", false)).await;
        store
            .acknowledge_attempt(a, None, Some(Duration::ZERO))
            .await
            .unwrap();
        let b = started(&**store, &start_for(job_id, 1, "b", true)).await;
        let finishes = [(a, 0), (b, 1)].map(|(attempt, i)| {
            let store = stores[i].clone();
            tokio::spawn(async move {
                let output = json!({ "text": format!("from {attempt}") });
                (
                    attempt,
                    store
                        .complete_attempt(attempt, &output, &Resolution::worker())
                        .await,
                )
            })
        });
        let results: Vec<(Uuid, Completion)> = join_all(finishes)
            .await
            .into_iter()
            .map(|r| {
                let (attempt, completion) = r.unwrap();
                (
                    attempt,
                    completion.expect("a lost race is an answer, not an error"),
                )
            })
            .collect();
        let winners: Vec<Uuid> = results
            .iter()
            .filter(|(_, c)| *c == Completion::Won)
            .map(|(a, _)| *a)
            .collect();
        assert_eq!(winners.len(), 1, "{results:?}");
        let job = store.job_for_dispatch(job_id).await.unwrap().unwrap();
        assert_eq!(job.completed_by, Some(winners[0]));
        assert_eq!(
            job.result,
            Some(json!({ "text": format!("from {}", winners[0]) }))
        );
        let states: Vec<AttemptState> = store
            .job_attempts(job_id)
            .await
            .unwrap()
            .iter()
            .map(|a| a.state)
            .collect();
        assert!(
            states.contains(&AttemptState::Succeeded) && states.contains(&AttemptState::Discarded)
        );
    }
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_events WHERE kind = 'race_lost'")
            .await,
        8
    );
}

async fn a_result_is_written_once_in_the_database(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "once").await;
    let a = started(&*store, &start_for(job_id, 0, "a", false)).await;
    assert_eq!(
        store
            .complete_attempt(a, &json!({"text": "first"}), &Resolution::worker())
            .await
            .unwrap(),
        Completion::Won
    );
    // Bypassing the application: overwriting the result or the winner is refused.
    for statement in [
        db.dialect(
            "UPDATE jobs SET result = '{\"text\": \"second\"}'::jsonb",
            "UPDATE jobs SET result = '{\"text\": \"second\"}'",
        ),
        "UPDATE jobs SET completed_by = NULL, state = 'running'",
    ] {
        let error = db.exec(statement).await.expect_err(statement);
        assert!(error.contains("written once"), "{statement}: {error}");
    }
    // The winner answering again changes nothing either, and is no lost race.
    assert_eq!(
        store
            .complete_attempt(a, &json!({"text": "again"}), &Resolution::worker())
            .await
            .unwrap(),
        Completion::Won
    );
    let job = store.job_for_dispatch(job_id).await.unwrap().unwrap();
    assert_eq!(job.result, Some(json!({"text": "first"})));
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_events WHERE kind = 'race_lost'")
            .await,
        0,
        "the winner's own second answer is not logged as race_lost"
    );
}

async fn a_failed_attempt_frees_the_job_for_the_next_within_max_attempts(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "retry").await;
    for n in 0..3 {
        let attempt = started(&*store, &start_for(job_id, n, "a", false)).await;
        let FailOutcome::Recorded(state) = store
            .fail_attempt(
                attempt,
                Unsuccessful::Failed,
                &json!({"message": "no"}),
                RETRY,
                &Resolution::worker(),
            )
            .await
            .unwrap()
        else {
            panic!("the attempt was open");
        };
        let expected = if n < 2 { "pending" } else { "failed" };
        assert_eq!(state.as_str(), expected);
    }
    assert_eq!(
        store
            .start_attempt(&start_for(job_id, 3, "a", false))
            .await
            .unwrap(),
        StartOutcome::Refused(StartRefusal::NotDue(onejob_domain::JobState::Failed))
    );
    let job = store.job_for_dispatch(job_id).await.unwrap().unwrap();
    assert_eq!(job.error.unwrap()["attempts"], 3);
}

// ----- Issue 15: transitions that leave nothing unknown that proof can settle -----

/// A job with one attempt made `unknown` by its worker.
async fn unknown_attempt(store: &dyn Store, key: &str) -> (Uuid, Uuid) {
    let job_id = created(store, key).await;
    let attempt = started(store, &start_for(job_id, 0, "a", false)).await;
    assert!(
        store
            .mark_unknown(attempt, &json!({"reason": "deadline"}), UnknownBy::Worker)
            .await
            .unwrap()
    );
    (job_id, attempt)
}

/// A late result racing an operator's (or the reconciler's) `failed` resolution of the same
/// unknown attempt: whichever commits first decides, and the other changes nothing. Before
/// PostgreSQL's completion locked the job first, it read the attempt's state and the job's
/// version in two unlocked statements, and a resolution committing between them let the
/// late result win over an attempt already recorded `failed`.
async fn a_late_result_never_wins_over_a_resolution_racing_it(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let stores: [Arc<dyn Store>; 2] = [db.open_store().await, db.open_store().await];
    let rounds = 2_000;
    let (mut won, mut resolved) = (0, 0);
    for round in 0..rounds {
        let (job_id, attempt) = unknown_attempt(&*stores[0], &format!("race-{round}")).await;
        let late = {
            let store = stores[round % 2].clone();
            tokio::spawn(async move {
                store
                    .complete_attempt(attempt, &json!({"text": "late"}), &Resolution::worker())
                    .await
            })
        };
        let resolve = {
            let store = stores[(round + 1) % 2].clone();
            tokio::spawn(async move {
                store
                    .fail_attempt(
                        attempt,
                        Unsuccessful::FailedKeyKept,
                        &json!({"message": "the vendor says it never ran"}),
                        RETRY,
                        &Resolution::of_unknown("key:ops", "operator"),
                    )
                    .await
            })
        };
        let (late, resolve) = (late.await.unwrap(), resolve.await.unwrap());
        let job = stores[0].job_for_dispatch(job_id).await.unwrap().unwrap();
        let state = stores[0].job_attempts(job_id).await.unwrap()[0].state;
        match (late.unwrap(), resolve.unwrap()) {
            (Completion::Won, FailOutcome::NotOpen(_)) => {
                won += 1;
                assert_eq!(state, AttemptState::Succeeded, "round {round}");
                assert_eq!(job.completed_by, Some(attempt), "round {round}");
            }
            (Completion::Discarded { .. }, FailOutcome::Recorded(_)) => {
                resolved += 1;
                assert_eq!(state, AttemptState::Failed, "round {round}");
                assert_eq!(job.completed_by, None, "round {round}: {job:?}");
                assert_ne!(
                    job.state,
                    onejob_domain::JobState::Succeeded,
                    "round {round}"
                );
            }
            other => panic!("round {round}: both or neither took effect: {other:?}, {job:?}"),
        }
    }
    assert_eq!(won + resolved, rounds);
}

/// When an attempt wins, the job's `unknown` attempts (a primary that went unknown beside a
/// hedge) are discarded in the same transaction, with an event each: otherwise they wait
/// for proof, and count as unknown, for ever.
async fn the_winner_discards_its_unknown_siblings(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "siblings").await;
    let primary = started(&*store, &start_for(job_id, 0, "a", false)).await;
    store
        .acknowledge_attempt(primary, None, Some(Duration::ZERO))
        .await
        .unwrap();
    let hedge = started(&*store, &start_for(job_id, 1, "b", true)).await;
    assert!(
        store
            .mark_unknown(primary, &json!({"reason": "deadline"}), UnknownBy::Worker)
            .await
            .unwrap()
    );
    assert_eq!(store.count_unknown().await.unwrap(), 1);
    let completion = store
        .complete_attempt(hedge, &json!({"text": "hedge"}), &Resolution::worker())
        .await
        .unwrap();
    assert_eq!(completion, Completion::Won);
    let attempts = store.job_attempts(job_id).await.unwrap();
    assert_eq!(attempts[0].state, AttemptState::Discarded);
    assert_eq!(store.count_unknown().await.unwrap(), 0);
    let discarded = db
        .scalar(db.dialect(
            "SELECT COUNT(*) FROM job_events WHERE kind = 'attempt_resolved' \
             AND detail->>'outcome' = 'discarded'",
            "SELECT COUNT(*) FROM job_events WHERE kind = 'attempt_resolved' \
             AND json_extract(detail, '$.outcome') = 'discarded'",
        ))
        .await;
    assert_eq!(discarded, 1);
}

/// U+0000 in a provider's error body, an unknown reason, an operator's reason or a task id
/// cannot be stored in PostgreSQL as is: every one is recorded (with U+FFFD), on both
/// stores alike, instead of failing the write and leaving the attempt open.
async fn nul_characters_from_providers_and_operators_are_recorded(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "nul").await;
    let attempt = started(&*store, &start_for(job_id, 0, "a", false)).await;
    store
        .acknowledge_attempt(attempt, Some("task\0id"), None)
        .await
        .unwrap();
    assert!(
        store
            .mark_unknown(
                attempt,
                &json!({"reason": "reset\0", "internal": {"body\0": "\0"}}),
                UnknownBy::Worker,
            )
            .await
            .unwrap()
    );
    let outcome = store
        .fail_attempt(
            attempt,
            Unsuccessful::Failed,
            &json!({"message": "bad\0input", "internal": "HTTP 400: \0"}),
            RETRY,
            &Resolution::of_unknown("key:ops\0", "checked\0 the console"),
        )
        .await
        .unwrap();
    assert!(matches!(outcome, FailOutcome::Recorded(_)), "{outcome:?}");
    let attempts = store.job_attempts(job_id).await.unwrap();
    assert_eq!(attempts[0].state, AttemptState::Failed);
    assert_eq!(attempts[0].task_id.as_deref(), Some("task\u{FFFD}id"));
    assert_eq!(
        attempts[0].error.as_ref().unwrap()["message"],
        "bad\u{FFFD}input"
    );
}

/// The task id a provider answered is stored whatever the attempt's state: an attempt
/// rescued as unknown before its acknowledgement came keeps what proves what happened to it,
/// and the worker is told it no longer owns it.
async fn a_task_id_is_stored_whatever_the_attempts_state(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let (job_id, attempt) = unknown_attempt(&*store, "late-ack").await;
    assert_eq!(
        store
            .acknowledge_attempt(attempt, Some("task-7"), None)
            .await
            .unwrap(),
        Acknowledged::NotStarting(AttemptState::Unknown)
    );
    let attempts = store.job_attempts(job_id).await.unwrap();
    assert_eq!(attempts[0].task_id.as_deref(), Some("task-7"));
    assert_eq!(attempts[0].state, AttemptState::Unknown);
}

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

/// The fence before a send: the worker owns its `starting` attempt only with enough lease
/// left and its job not cancelled; a rescuer takes an attempt only while its lease is still
/// expired, so a renewal that came first keeps it.
async fn the_send_fence_and_the_rescuer_respect_the_lease(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "fence").await;
    let mut start = start_for(job_id, 0, "a", false);
    start.lease = Duration::from_millis(300);
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
    tokio::time::sleep(Duration::from_millis(400)).await;
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

/// Only a failure the provider answered under the attempt's key spends it; the others keep
/// it for the next attempt.
async fn a_failure_records_whether_it_spent_the_upstream_key(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "keys").await;
    for (n, end) in [Unsuccessful::FailedKeyKept, Unsuccessful::Failed]
        .into_iter()
        .enumerate()
    {
        let attempt = started(&*store, &start_for(job_id, n as i32, "a", false)).await;
        store
            .fail_attempt(
                attempt,
                end,
                &json!({"message": "no"}),
                RETRY,
                &Resolution::worker(),
            )
            .await
            .unwrap();
    }
    let attempts = store.job_attempts(job_id).await.unwrap();
    assert!(
        !attempts[0].key_spent && attempts[1].key_spent,
        "{attempts:?}"
    );
    let key = onejob::worker::plan::upstream_key(job_id, &attempts, "a");
    assert_eq!(key, format!("onejob:{job_id}:2"));
}

/// A pending job left without attempt budget (its kind's max_attempts lowered) is settled
/// failed with an `exhausted` event; one with budget, or one still running, is not.
async fn a_pending_job_without_budget_is_settled_failed(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "exhausted").await;
    let attempt = started(&*store, &start_for(job_id, 0, "a", false)).await;
    assert!(
        !store.settle_exhausted(job_id, 1).await.unwrap(),
        "still running"
    );
    store
        .fail_attempt(
            attempt,
            Unsuccessful::Failed,
            &json!({"message": "no"}),
            RETRY,
            &Resolution::worker(),
        )
        .await
        .unwrap();
    assert!(
        !store.settle_exhausted(job_id, 3).await.unwrap(),
        "budget left"
    );
    assert!(store.settle_exhausted(job_id, 1).await.unwrap());
    let job = store.job_for_dispatch(job_id).await.unwrap().unwrap();
    assert_eq!(job.state, onejob_domain::JobState::Failed);
    let reason = job.error.unwrap()["last_error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(reason.contains("max_attempts"), "{reason}");
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_events WHERE kind = 'exhausted'")
            .await,
        1
    );
    assert!(
        !store.settle_exhausted(job_id, 1).await.unwrap(),
        "settled once"
    );
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
