//! Attempts: how an attempt ends and what that does to its job — completion (one winner,
//! written once, late results discarded), failure (retry budget, backoff, the upstream key),
//! outcomes becoming unknown (worker, rescuer, a winner present), settling exhausted jobs,
//! the reconciler's claims on unknown attempts, and task ids learned late.

use std::{collections::HashSet, sync::Arc, time::Duration};

use futures::future::join_all;

use onejob::store::{
    Acknowledged, Completion, FailOutcome, Resolution, RetryPolicy, StartOutcome, StartRefusal,
    Store, UnknownBy, Unsuccessful,
};
use onejob_domain::{AttemptState, EventKind, JobState};
use serde_json::json;
use uuid::Uuid;

use crate::support::{
    Backend, RETRY, TestDatabase, alice, created, every_backend_tests, fail, new_job, start_for,
    started, unknown_attempt,
};

every_backend_tests!(
    a_result_needs_a_winning_attempt_of_the_same_job,
    racing_completions_have_exactly_one_winner,
    a_result_is_written_once_in_the_database,
    an_only_attempts_answers_sent_together_win_once,
    a_failed_attempt_frees_the_job_for_the_next_within_max_attempts,
    a_late_result_never_wins_over_a_resolution_racing_it,
    the_winner_discards_its_unknown_siblings,
    nul_characters_from_providers_and_operators_are_recorded,
    a_task_id_is_stored_whatever_the_attempts_state,
    a_failure_records_whether_it_spent_the_upstream_key,
    a_pending_job_without_budget_is_settled_failed,
    a_resolution_of_unknown_ends_only_unknown_attempts,
    a_not_sent_attempt_ends_only_while_starting,
    a_failure_with_backoff_makes_the_job_due_later,
    a_failure_beside_an_open_attempt_keeps_the_job_running,
    a_failure_of_a_cancelled_jobs_attempt_ends_it_cancelled,
    the_worker_makes_its_live_attempt_unknown_once,
    a_rescuer_acts_only_past_the_lease_or_the_deadlines_grace,
    an_attempt_whose_job_has_a_winner_is_discarded_not_unknown,
    an_attempt_of_a_cancelled_job_is_discarded_not_unknown,
    claims_take_at_most_the_limit_of_due_unknown_attempts,
    the_reconcile_backoff_doubles_up_to_its_maximum,
    a_claim_holds_the_attempt_for_its_lease,
    racing_claimers_never_claim_one_attempt_twice,
    a_stored_task_id_is_kept,
);

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
        // (The state stays: a change of state meets the state machine's own trigger.)
        "UPDATE jobs SET completed_by = NULL",
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

/// The same attempt's answer offered many times at once (a recording resent, the upstream
/// answering twice), through two processes, by callers that know its job and callers that
/// do not, so that offers of it share a group commit and race across groups: each is
/// answered `Won`, the job's result is one of them, written once, with one `won` event and
/// no lost race. (On PostgreSQL the completion of a job's only attempt is one statement for
/// a whole group, `postgres/completion.rs`; a second offer of it there must not write a
/// second event or result.)
async fn an_only_attempts_answers_sent_together_win_once(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let stores: [Arc<dyn Store>; 2] = [db.open_store().await, db.open_store().await];
    for round in 0..10 {
        let job_id = created(&*stores[0], &format!("again-{round}")).await;
        let attempt = started(&*stores[0], &start_for(job_id, 0, "a", false)).await;
        let offers = (0..8).map(|i| {
            let store = stores[i % 2].clone();
            tokio::spawn(async move {
                let output = json!({ "text": format!("answer {i}") });
                let by = Resolution::worker();
                if i % 3 == 0 {
                    store.complete_attempt(attempt, &output, &by).await
                } else {
                    let job = (job_id, "acme");
                    store.complete_attempt_of(job, attempt, &output, &by).await
                }
            })
        });
        for completion in join_all(offers).await {
            assert_eq!(
                completion.unwrap().unwrap(),
                Completion::Won,
                "round {round}"
            );
        }
        let job = stores[0].job_for_dispatch(job_id).await.unwrap().unwrap();
        assert_eq!(job.state, JobState::Succeeded, "round {round}");
        assert_eq!(job.completed_by, Some(attempt), "round {round}");
        let text = job.result.as_ref().expect("a result")["text"].clone();
        assert!(
            text.as_str().is_some_and(|t| t.starts_with("answer ")),
            "{text}"
        );
        let attempts = stores[0].job_attempts(job_id).await.unwrap();
        assert_eq!(attempts.len(), 1);
        assert_eq!(attempts[0].state, AttemptState::Succeeded, "round {round}");
        let events = stores[0]
            .events(&alice(), job_id, None, 1_000)
            .await
            .unwrap()
            .unwrap();
        let won = events.iter().filter(|e| e.kind == EventKind::Won).count();
        assert_eq!(won, 1, "round {round}: {events:?}");
    }
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_events WHERE kind = 'race_lost'")
            .await,
        0
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

/// The reconciler and operators end only `unknown` attempts: a running attempt is
/// `NotUnknown` to a completion and `NotOpen` to a failure, and nothing changes.
async fn a_resolution_of_unknown_ends_only_unknown_attempts(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "running").await;
    let attempt = started(&*store, &start_for(job_id, 0, "a", false)).await;
    store
        .acknowledge_attempt(attempt, None, None)
        .await
        .unwrap();
    let by = Resolution::of_unknown("reconciler", "provider status");
    assert_eq!(
        store
            .complete_attempt(attempt, &json!({"text": "proof"}), &by)
            .await
            .unwrap(),
        Completion::NotUnknown(AttemptState::Running)
    );
    assert_eq!(
        store
            .fail_attempt(
                attempt,
                Unsuccessful::Failed,
                &json!({"message": "no"}),
                RETRY,
                &by,
            )
            .await
            .unwrap(),
        FailOutcome::NotOpen(AttemptState::Running)
    );
    let job = store.job_for_dispatch(job_id).await.unwrap().unwrap();
    assert_eq!((job.state, job.result), (JobState::Running, None));
    assert_eq!(
        store.job_attempts(job_id).await.unwrap()[0].state,
        AttemptState::Running
    );
    // Once unknown, the same resolution settles it, and its event names the actor.
    assert!(
        store
            .mark_unknown(attempt, &json!({"reason": "deadline"}), UnknownBy::Worker)
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .complete_attempt(attempt, &json!({"text": "proof"}), &by)
            .await
            .unwrap(),
        Completion::Won
    );
    let events = store
        .recent_events(
            &onejob::store::Scope {
                tenant: "acme".into(),
                user: None,
            },
            Some(EventKind::Won),
            10,
        )
        .await
        .unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].actor.as_deref(), Some("reconciler"));
    // An ended attempt is open to nobody.
    assert_eq!(
        fail(&*store, attempt).await,
        FailOutcome::NotOpen(AttemptState::Succeeded)
    );
}

/// A worker ending an attempt it never sent acts only while it is still `starting`.
async fn a_not_sent_attempt_ends_only_while_starting(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let (job_id, attempt) = unknown_attempt(&*store, "not-sent").await;
    let not_sent = Resolution::not_sent("the fence refused the send");
    assert_eq!(
        store
            .fail_attempt(
                attempt,
                Unsuccessful::FailedKeyKept,
                &json!({"message": "not sent"}),
                RETRY,
                &not_sent,
            )
            .await
            .unwrap(),
        FailOutcome::NotOpen(AttemptState::Unknown)
    );
    let fresh = created(&*store, "fresh").await;
    let starting = started(&*store, &start_for(fresh, 0, "a", false)).await;
    assert_eq!(
        store
            .fail_attempt(
                starting,
                Unsuccessful::FailedKeyKept,
                &json!({"message": "not sent"}),
                RETRY,
                &not_sent,
            )
            .await
            .unwrap(),
        FailOutcome::Recorded(JobState::Pending)
    );
    assert_eq!(
        store.job_attempts(job_id).await.unwrap()[0].state,
        AttemptState::Unknown
    );
}

/// While the budget lasts a failed job goes back to `pending`, due after the backoff.
async fn a_failure_with_backoff_makes_the_job_due_later(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "backoff").await;
    let attempt = started(&*store, &start_for(job_id, 0, "a", false)).await;
    let retry = RetryPolicy {
        max_attempts: 3,
        backoff: Duration::from_secs(3_600),
    };
    assert_eq!(
        store
            .fail_attempt(
                attempt,
                Unsuccessful::Failed,
                &json!({"message": "no"}),
                retry,
                &Resolution::worker(),
            )
            .await
            .unwrap(),
        FailOutcome::Recorded(JobState::Pending)
    );
    assert!(!store.due_jobs(10).await.unwrap().contains(&job_id));
    let wait = store.next_due_in().await.unwrap().expect("a job waits");
    assert!(
        wait > Duration::from_secs(3_000) && wait <= Duration::from_secs(3_600),
        "{wait:?}"
    );
    let job = store.job_for_dispatch(job_id).await.unwrap().unwrap();
    assert_eq!((job.state, job.error), (JobState::Pending, None));
}

/// A failed attempt beside a still open one leaves the job `running`.
async fn a_failure_beside_an_open_attempt_keeps_the_job_running(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "hedged").await;
    let primary = started(&*store, &start_for(job_id, 0, "a", false)).await;
    store
        .acknowledge_attempt(primary, None, Some(Duration::ZERO))
        .await
        .unwrap();
    let hedge = started(&*store, &start_for(job_id, 1, "b", true)).await;
    assert_eq!(
        fail(&*store, primary).await,
        FailOutcome::Recorded(JobState::Running)
    );
    assert_eq!(
        store
            .complete_attempt(hedge, &json!({"text": "hedge"}), &Resolution::worker())
            .await
            .unwrap(),
        Completion::Won
    );
    let job = store.job_for_dispatch(job_id).await.unwrap().unwrap();
    assert_eq!(
        (job.state, job.completed_by),
        (JobState::Succeeded, Some(hedge))
    );
}

/// Whatever the provider said, an attempt of a cancelled job ends `cancelled`, and the job
/// stays cancelled.
async fn a_failure_of_a_cancelled_jobs_attempt_ends_it_cancelled(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "cancelled").await;
    let attempt = started(&*store, &start_for(job_id, 0, "a", false)).await;
    store
        .acknowledge_attempt(attempt, None, None)
        .await
        .unwrap();
    store
        .cancel_job(&alice(), job_id, "key:alice")
        .await
        .unwrap();
    let outcome = fail(&*store, attempt).await;
    assert_eq!(outcome, FailOutcome::Recorded(JobState::Cancelled));
    assert_eq!(
        store.job_attempts(job_id).await.unwrap()[0].state,
        AttemptState::Cancelled
    );
}

/// The worker's `mark_unknown` makes its live attempt (and the job) `unknown` with the
/// reason as the attempt's error and an `attempt_unknown` event; a second call finds
/// nothing live and changes nothing.
async fn the_worker_makes_its_live_attempt_unknown_once(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "unknown").await;
    let attempt = started(&*store, &start_for(job_id, 0, "a", false)).await;
    store
        .acknowledge_attempt(attempt, Some("task-1"), None)
        .await
        .unwrap();
    let why = json!({"reason": "deadline", "internal": {"elapsed": "30s"}});
    assert!(
        store
            .mark_unknown(attempt, &why, UnknownBy::Worker)
            .await
            .unwrap()
    );
    let row = &store.job_attempts(job_id).await.unwrap()[0];
    assert_eq!(row.state, AttemptState::Unknown);
    assert_eq!(row.error.as_ref(), Some(&why));
    assert!(row.unknown_since.is_some());
    let job = store.job_for_dispatch(job_id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Unknown);
    assert_eq!(store.count_unknown().await.unwrap(), 1);
    assert!(
        !store
            .mark_unknown(attempt, &json!({"reason": "again"}), UnknownBy::Worker)
            .await
            .unwrap()
    );
    let events = store
        .events(&alice(), job_id, None, 100)
        .await
        .unwrap()
        .unwrap();
    let unknown: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::AttemptUnknown)
        .collect();
    assert_eq!(unknown.len(), 1, "{events:?}");
    assert_eq!(unknown[0].attempt_id, Some(attempt));
    assert_eq!(unknown[0].detail, why);
}

/// A rescuer makes a live attempt unknown only while its lease is expired, or its deadline
/// passed more than `grace` ago; the worker itself needs neither.
async fn a_rescuer_acts_only_past_the_lease_or_the_deadlines_grace(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let hour = Duration::from_secs(3_600);
    let why = json!({"reason": "lease expired"});
    let rescuer = |grace| UnknownBy::Rescuer { grace };
    // Leased and within its deadline: not the rescuer's.
    let healthy = created(&*store, "healthy").await;
    let mut start = start_for(healthy, 0, "a", false);
    (start.lease, start.timeout) = (hour, hour);
    let healthy = started(&*store, &start).await;
    // Lease run out, deadline far.
    let lapsed = created(&*store, "lapsed").await;
    let mut start = start_for(lapsed, 0, "a", false);
    (start.lease, start.timeout) = (Duration::ZERO, hour);
    let lapsed = started(&*store, &start).await;
    // Leased, deadline passed.
    let overdue = created(&*store, "overdue").await;
    let mut start = start_for(overdue, 0, "a", false);
    (start.lease, start.timeout) = (hour, Duration::ZERO);
    let overdue = started(&*store, &start).await;
    // Past the instants just written, on the database's clock (SQLite counts milliseconds).
    tokio::time::sleep(Duration::from_millis(50)).await;

    assert!(
        !store
            .mark_unknown(healthy, &why, rescuer(Duration::ZERO))
            .await
            .unwrap()
    );
    assert!(
        !store
            .mark_unknown(overdue, &why, rescuer(hour))
            .await
            .unwrap(),
        "within the deadline's grace"
    );
    assert!(
        store
            .mark_unknown(overdue, &why, rescuer(Duration::ZERO))
            .await
            .unwrap()
    );
    assert!(
        store
            .mark_unknown(lapsed, &why, rescuer(hour))
            .await
            .unwrap()
    );
    assert!(
        store
            .mark_unknown(healthy, &why, UnknownBy::Worker)
            .await
            .unwrap(),
        "the worker needs no expired lease"
    );
    assert_eq!(store.count_unknown().await.unwrap(), 3);
}

/// An attempt whose job already has a winner is `discarded` (with an `attempt_resolved`
/// event) instead of becoming unknown: nothing is left to reconcile.
async fn an_attempt_whose_job_has_a_winner_is_discarded_not_unknown(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "won").await;
    let primary = started(&*store, &start_for(job_id, 0, "a", false)).await;
    store
        .acknowledge_attempt(primary, None, Some(Duration::ZERO))
        .await
        .unwrap();
    let hedge = started(&*store, &start_for(job_id, 1, "b", true)).await;
    assert_eq!(
        store
            .complete_attempt(hedge, &json!({"text": "hedge"}), &Resolution::worker())
            .await
            .unwrap(),
        Completion::Won
    );
    assert!(
        !store
            .mark_unknown(primary, &json!({"reason": "deadline"}), UnknownBy::Worker)
            .await
            .unwrap()
    );
    assert_eq!(
        store.job_attempts(job_id).await.unwrap()[0].state,
        AttemptState::Discarded
    );
    assert_eq!(store.count_unknown().await.unwrap(), 0);
    let resolved = store
        .events(&alice(), job_id, None, 100)
        .await
        .unwrap()
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == EventKind::AttemptResolved && e.attempt_id == Some(primary))
        .collect::<Vec<_>>();
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    assert_eq!(resolved[0].detail["outcome"], "discarded");
    let job = store.job_for_dispatch(job_id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Succeeded);
}

/// Likewise for a cancelled job: its live attempt is discarded, and the job stays cancelled.
async fn an_attempt_of_a_cancelled_job_is_discarded_not_unknown(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "cancelled").await;
    let attempt = started(&*store, &start_for(job_id, 0, "a", false)).await;
    store
        .cancel_job(&alice(), job_id, "key:alice")
        .await
        .unwrap();
    assert!(
        !store
            .mark_unknown(attempt, &json!({"reason": "shutdown"}), UnknownBy::Worker)
            .await
            .unwrap()
    );
    assert_eq!(
        store.job_attempts(job_id).await.unwrap()[0].state,
        AttemptState::Discarded
    );
    let job = store.job_for_dispatch(job_id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Cancelled);
    assert_eq!(store.count_unknown().await.unwrap(), 0);
}

/// `claim_unknown` answers at most `limit` unknown attempts, and only those due: a claimed
/// attempt waits out its lease, live attempts are never claimed.
async fn claims_take_at_most_the_limit_of_due_unknown_attempts(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let mut unknown = HashSet::new();
    for n in 0..5 {
        unknown.insert(unknown_attempt(&*store, &format!("unknown-{n}")).await.1);
    }
    let live_job = created(&*store, "live").await;
    started(&*store, &start_for(live_job, 0, "a", false)).await;
    let hour = Duration::from_secs(3_600);
    let first = store.claim_unknown(3, hour).await.unwrap();
    assert_eq!(first.len(), 3, "{first:?}");
    let second = store.claim_unknown(3, hour).await.unwrap();
    assert_eq!(second.len(), 2, "{second:?}");
    assert!(store.claim_unknown(3, hour).await.unwrap().is_empty());
    let claimed: HashSet<Uuid> = first.iter().chain(&second).map(|a| a.id).collect();
    assert_eq!(claimed, unknown);
    assert!(
        first
            .iter()
            .chain(&second)
            .all(|a| a.state == AttemptState::Unknown && a.reconcile_checks == 1)
    );
    // Without a lease a claimed attempt is due again at once.
    db.reconcile_now().await;
    let again = store.claim_unknown(10, Duration::ZERO).await.unwrap();
    assert_eq!(again.len(), 5);
    assert!(again.iter().all(|a| a.reconcile_checks == 2));
    assert_eq!(store.claim_unknown(0, hour).await.unwrap(), vec![]);
}

/// A check that proved nothing sets the attempt's next check after a backoff doubling with
/// every check, never further than `max_backoff` (read on the database's clock).
async fn the_reconcile_backoff_doubles_up_to_its_maximum(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    unknown_attempt(&*store, "backoff").await;
    let hour = Duration::from_secs(3_600);
    let backoff = Duration::from_secs(100);
    let max_backoff = Duration::from_secs(300);
    for expected in [100, 200, 300, 300] {
        let claimed = store.claim_unknown(10, hour).await.unwrap();
        assert_eq!(claimed.len(), 1);
        let attempt = &claimed[0];
        assert!(
            store
                .recheck_unknown_later(attempt.id, attempt.reconcile_checks, backoff, max_backoff)
                .await
                .unwrap()
        );
        let wait = db.reconcile_in().await;
        assert!(
            (expected - 2..=expected).contains(&wait),
            "expected about {expected} s, got {wait}"
        );
        assert!(
            store.claim_unknown(10, hour).await.unwrap().is_empty(),
            "not due before its backoff"
        );
        db.reconcile_now().await;
    }
}

/// A claim is a lease: while it holds, no claimer gets the attempt again (a re-send in flight
/// is never joined by another). Once it ran out and another claimer took the attempt, the
/// first claimer's "check again later" no longer applies: the new lease stands.
async fn a_claim_holds_the_attempt_for_its_lease(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let stores: [Arc<dyn Store>; 2] = [db.open_store().await, db.open_store().await];
    let (_, attempt) = unknown_attempt(&*stores[0], "leased").await;
    let lease = Duration::from_secs(600);
    let first = stores[0].claim_unknown(10, lease).await.unwrap();
    assert_eq!(first.len(), 1);
    for store in &stores {
        assert!(
            store.claim_unknown(10, lease).await.unwrap().is_empty(),
            "claimed again within its lease"
        );
    }
    // The lease runs out (as if the first claimer hung or died); the other claims it.
    db.reconcile_now().await;
    let second = stores[1].claim_unknown(10, lease).await.unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].reconcile_checks, first[0].reconcile_checks + 1);
    let short = Duration::from_millis(1);
    assert!(
        !stores[0]
            .recheck_unknown_later(attempt, first[0].reconcile_checks, short, short)
            .await
            .unwrap(),
        "a stale claim shortened another's lease"
    );
    let wait = db.reconcile_in().await;
    assert!(
        wait > 500,
        "the second claim's lease was cut short: {wait} s left"
    );
}

/// Reconcilers on many connections side by side never claim one attempt twice, and
/// between them claim every due one.
async fn racing_claimers_never_claim_one_attempt_twice(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let stores: [Arc<dyn Store>; 2] = [db.open_store().await, db.open_store().await];
    let mut unknown = HashSet::new();
    for n in 0..40 {
        unknown.insert(
            unknown_attempt(&*stores[0], &format!("unknown-{n}"))
                .await
                .1,
        );
    }
    let hour = Duration::from_secs(3_600);
    let claims = (0..16).map(|i| {
        let store = stores[i % 2].clone();
        tokio::spawn(async move { store.claim_unknown(5, hour).await })
    });
    let mut claimed = Vec::new();
    for claim in join_all(claims).await {
        claimed.extend(claim.unwrap().expect("a claim").into_iter().map(|a| a.id));
    }
    let distinct: HashSet<Uuid> = claimed.iter().copied().collect();
    assert_eq!(distinct.len(), claimed.len(), "an attempt claimed twice");
    assert_eq!(distinct, unknown);
}

/// `set_task_id` stores a task id learned late in whatever state the attempt is, and never
/// replaces one already stored (by the acknowledgement or an earlier lookup).
async fn a_stored_task_id_is_kept(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let (job_id, attempt) = unknown_attempt(&*store, "late-task").await;
    store.set_task_id(attempt, "task-1").await.unwrap();
    store.set_task_id(attempt, "task-2").await.unwrap();
    assert_eq!(
        store.job_attempts(job_id).await.unwrap()[0]
            .task_id
            .as_deref(),
        Some("task-1")
    );
    // A failed attempt takes one too; an acknowledged one keeps the acknowledgement's.
    let other = created(&*store, "acknowledged").await;
    let acknowledged = started(&*store, &start_for(other, 0, "a", false)).await;
    store
        .acknowledge_attempt(acknowledged, Some("task-a"), None)
        .await
        .unwrap();
    store.set_task_id(acknowledged, "task-b").await.unwrap();
    fail(&*store, acknowledged).await;
    let second = started(&*store, &start_for(other, 1, "a", false)).await;
    store
        .fail_attempt(
            second,
            Unsuccessful::FailedKeyKept,
            &json!({"message": "no"}),
            RETRY,
            &Resolution::worker(),
        )
        .await
        .unwrap();
    store.set_task_id(second, "task-c").await.unwrap();
    let attempts = store.job_attempts(other).await.unwrap();
    assert_eq!(attempts[0].task_id.as_deref(), Some("task-a"));
    assert_eq!(attempts[1].state, AttemptState::Failed);
    assert_eq!(attempts[1].task_id.as_deref(), Some("task-c"));
}
