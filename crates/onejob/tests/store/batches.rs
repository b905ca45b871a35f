//! Batches: state changes the store makes for many jobs at once behave, job by job, exactly
//! as the single ones. First attempts started in a batch (`start_first_attempts`) pass the
//! same guard as `start_attempt`: the right jobs, one attempt each however many starters
//! race, a job another starter holds or took first left to it. Acknowledgements and
//! completions made at the same moment share transactions (group commit), and still answer
//! each one as if it were alone: one winner per job when two attempts of it finish in one
//! group, the loser discarded with its `race_lost`; a change that fails fails alone.

use std::{sync::Arc, time::Duration};

use futures::future::join_all;

use onejob::store::{
    Acknowledged, Completion, FirstAttempts, FirstStart, Intake, Resolution, StartAtIntake,
    StartOutcome, Store,
};
use onejob_domain::{AttemptState, EventKind, JobState};
use serde_json::json;
use uuid::Uuid;

use crate::support::{
    Backend, TestDatabase, alice, created, every_backend_tests, fail, new_job_of, start_for,
    started,
};

every_backend_tests!(
    a_batch_starts_the_first_attempt_of_each_due_new_job,
    a_batch_takes_the_oldest_due_jobs_up_to_its_limit,
    racing_batches_and_single_starts_make_one_attempt_per_job,
    a_job_another_starter_took_first_is_left_to_it,
    two_attempts_of_a_job_finishing_together_have_one_winner,
    acknowledgements_made_together_answer_each_as_alone,
    an_acknowledgement_without_a_task_id_writes_its_attempt_once,
    one_by_one_claims_see_what_batches_leave,
    a_job_started_at_intake_is_committed_with_its_first_attempt_and_never_due,
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

/// `count` jobs, each with a running primary attempt on `a` and a hedge on `b` beside it.
async fn hedged_jobs(store: &dyn Store, count: usize) -> Vec<(Uuid, Uuid, Uuid)> {
    let mut jobs = Vec::new();
    for i in 0..count {
        let job_id = created(store, &format!("hedged-{i}")).await;
        let primary = started(store, &start_for(job_id, 0, "a", false)).await;
        let acknowledged = store
            .acknowledge_attempt(primary, None, Some(Duration::ZERO))
            .await
            .unwrap();
        assert_eq!(acknowledged, Acknowledged::Running);
        let hedge = started(store, &start_for(job_id, 1, "b", true)).await;
        jobs.push((job_id, primary, hedge));
    }
    jobs
}

async fn two_attempts_of_a_job_finishing_together_have_one_winner(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let jobs = hedged_jobs(&*store, 12).await;
    // Every attempt of every job offers its output at once, on one store: the completions
    // share transactions, two of one job often in the same one.
    let offers = jobs.iter().flat_map(|&(job_id, primary, hedge)| {
        [primary, hedge].map(|attempt| {
            let store = store.clone();
            tokio::spawn(async move {
                let output = json!({ "text": format!("from {attempt}") });
                let completion = store
                    .complete_attempt(attempt, &output, &Resolution::worker())
                    .await
                    .expect("a lost race is an answer, not an error");
                (job_id, attempt, completion)
            })
        })
    });
    let results: Vec<(Uuid, Uuid, Completion)> = join_all(offers)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    for &(job_id, primary, hedge) in &jobs {
        let mine: Vec<&(Uuid, Uuid, Completion)> =
            results.iter().filter(|(job, ..)| *job == job_id).collect();
        let winners: Vec<Uuid> = mine
            .iter()
            .filter(|(.., c)| *c == Completion::Won)
            .map(|(_, attempt, _)| *attempt)
            .collect();
        assert_eq!(winners.len(), 1, "{mine:?}");
        let winner = winners[0];
        let loser = if winner == primary { hedge } else { primary };
        let lost = mine
            .iter()
            .find(|(_, attempt, _)| *attempt == loser)
            .unwrap();
        assert_eq!(
            lost.2,
            Completion::Discarded {
                winner: Some(winner),
                job_state: JobState::Succeeded
            }
        );
        let job = store.job_for_dispatch(job_id).await.unwrap().unwrap();
        assert_eq!(job.completed_by, Some(winner));
        assert_eq!(
            job.result,
            Some(json!({ "text": format!("from {winner}") }))
        );
        let events = store
            .events(&alice(), job_id, None, 50)
            .await
            .unwrap()
            .unwrap();
        let won: Vec<Option<Uuid>> = events
            .iter()
            .filter(|e| e.kind == EventKind::Won)
            .map(|e| e.attempt_id)
            .collect();
        let race_lost: Vec<Option<Uuid>> = events
            .iter()
            .filter(|e| e.kind == EventKind::RaceLost)
            .map(|e| e.attempt_id)
            .collect();
        assert_eq!(won, vec![Some(winner)]);
        assert_eq!(race_lost, vec![Some(loser)]);
    }
    if backend.is_postgres() {
        // The completions did share transactions: fewer writers than attempts ended.
        let transactions = db
            .scalar(
                "SELECT COUNT(DISTINCT xmin::text) FROM attempts \
                 WHERE state IN ('succeeded', 'discarded')",
            )
            .await;
        assert!(
            transactions < 24,
            "{transactions} transactions for 24 completions"
        );
    }
}

async fn acknowledgements_made_together_answer_each_as_alone(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let mut attempts = Vec::new();
    for i in 0..12 {
        let job_id = created(&*store, &format!("ack-{i}")).await;
        attempts.push(started(&*store, &start_for(job_id, 0, "a", false)).await);
    }
    // One of them was already made unknown, and one names no attempt at all.
    store
        .mark_unknown(
            attempts[3],
            &json!({"reason": "deadline"}),
            onejob::store::UnknownBy::Worker,
        )
        .await
        .unwrap();
    let missing = Uuid::now_v7();
    let acks = attempts.iter().copied().chain([missing]).map(|attempt| {
        let store = store.clone();
        tokio::spawn(async move {
            let task = format!("task-{attempt}");
            (
                attempt,
                store.acknowledge_attempt(attempt, Some(&task), None).await,
            )
        })
    });
    for (attempt, acknowledged) in join_all(acks).await.into_iter().map(Result::unwrap) {
        if attempt == missing {
            assert!(
                acknowledged.is_err(),
                "an acknowledgement of no attempt fails alone"
            );
            continue;
        }
        let expected = if attempt == attempts[3] {
            Acknowledged::NotStarting(AttemptState::Unknown)
        } else {
            Acknowledged::Running
        };
        assert_eq!(acknowledged.unwrap(), expected);
    }
    for &attempt in &attempts {
        let job = store
            .job_attempts(job_of(&*store, attempt).await)
            .await
            .unwrap();
        // Stored whatever the attempt's state, as a lone acknowledgement stores it.
        assert_eq!(job[0].task_id, Some(format!("task-{attempt}")));
    }
}

/// An acknowledgement without a task id (a synchronous request's, recorded once it has
/// been in flight a while, so the one of nearly every call to a slow provider) writes its
/// attempt's row once, to make it `running`: alone or with others, with or without task
/// ids beside it, it reads the attempt's state instead of rewriting the row with the task
/// id it already has (a second row version, for nothing). Counted by a trigger made for
/// the test (on PostgreSQL and SQLite).
async fn an_acknowledgement_without_a_task_id_writes_its_attempt_once(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let count: &[&str] = match backend {
        Backend::Sqlite => &[
            "CREATE TABLE attempt_writes (attempt_id TEXT NOT NULL)",
            "CREATE TRIGGER count_attempt_writes AFTER UPDATE ON attempts \
             BEGIN INSERT INTO attempt_writes VALUES (NEW.id); END",
        ],
        Backend::Postgres => &[
            "CREATE TABLE attempt_writes (attempt_id uuid NOT NULL)",
            "CREATE FUNCTION count_attempt_writes() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN INSERT INTO attempt_writes VALUES (NEW.id); RETURN NULL; END $$",
            "CREATE TRIGGER count_attempt_writes AFTER UPDATE ON attempts \
             FOR EACH ROW EXECUTE FUNCTION count_attempt_writes()",
        ],
        // A trigger on a shard cannot write to another table of the cluster: the rows are
        // checked, not counted.
        Backend::Citus => &[],
    };
    let mut attempts = Vec::new();
    for i in 0..13 {
        let job_id = created(&*store, &format!("ack-once-{i}")).await;
        attempts.push(started(&*store, &start_for(job_id, 0, "a", false)).await);
    }
    for &sql in count {
        db.exec(sql).await.unwrap();
    }
    // One alone, then twelve at once: every other one with a task id.
    let task = |at: usize| (at % 2 == 1).then(|| format!("task-{at}"));
    assert_eq!(
        store
            .acknowledge_attempt(attempts[0], None, None)
            .await
            .unwrap(),
        Acknowledged::Running
    );
    let acks = attempts
        .iter()
        .copied()
        .enumerate()
        .skip(1)
        .map(|(at, attempt)| {
            let store = store.clone();
            tokio::spawn(async move {
                let task = task(at);
                store
                    .acknowledge_attempt(attempt, task.as_deref(), None)
                    .await
            })
        });
    for acknowledged in join_all(acks).await.into_iter().map(Result::unwrap) {
        assert_eq!(acknowledged.unwrap(), Acknowledged::Running);
    }
    for (at, &attempt) in attempts.iter().enumerate() {
        let job = store
            .job_attempts(job_of(&*store, attempt).await)
            .await
            .unwrap();
        assert_eq!(job[0].state, AttemptState::Running);
        assert_eq!(job[0].task_id, task(at));
    }
    if backend == Backend::Citus {
        return;
    }
    let without = attempts.iter().step_by(2).count() as i64;
    let with = attempts.len() as i64 - without;
    let writes = db.scalar("SELECT count(*) FROM attempt_writes").await;
    let most = without + 2 * with;
    assert!(
        writes <= most,
        "{writes} writes of attempt rows for {without} acknowledgements without a task id and \
         {with} with one: at most {most} (one each, and one more for a task id)"
    );
}

/// A write the database refuses for one attempt of a group (a trigger made for the test
/// refuses any update of an attempt on provider `refused`) fails that acknowledgement alone:
/// on PostgreSQL the group's one-statement acknowledgement fails as a whole, and every
/// acknowledgement of the group is then made the general way, where the refused one fails
/// and the others run. Not on Citus, which makes no acknowledgement at once.
mod refused {
    use super::*;

    onejob_fixtures::every_backend_tests!(a_refused_acknowledgement_fails_alone_in_its_group);

    async fn a_refused_acknowledgement_fails_alone_in_its_group(backend: Backend) {
        let db = TestDatabase::create(backend).await;
        let store = db.open_store().await;
        let mut attempts = Vec::new();
        for i in 0..12 {
            let job_id = created(&*store, &format!("refused-{i}")).await;
            let provider = if i == 5 { "refused" } else { "a" };
            attempts.push(started(&*store, &start_for(job_id, 0, provider, false)).await);
        }
        let refuse: &[&str] = match backend {
            Backend::Sqlite => &["CREATE TRIGGER refuse_one BEFORE UPDATE ON attempts \
                 WHEN OLD.provider = 'refused' \
                 BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"],
            _ => &[
                "CREATE FUNCTION refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN RAISE EXCEPTION 'refused by the test'; END $$",
                "CREATE TRIGGER refuse_one BEFORE UPDATE ON attempts FOR EACH ROW \
                 WHEN (OLD.provider = 'refused') EXECUTE FUNCTION refuse_one()",
            ],
        };
        for &sql in refuse {
            db.exec(sql).await.unwrap();
        }
        let acks = attempts.iter().copied().map(|attempt| {
            let store = store.clone();
            tokio::spawn(async move { store.acknowledge_attempt(attempt, None, None).await })
        });
        for (at, acknowledged) in join_all(acks)
            .await
            .into_iter()
            .map(Result::unwrap)
            .enumerate()
        {
            if at == 5 {
                assert!(acknowledged.is_err(), "{backend:?}: the refused one fails");
            } else {
                assert_eq!(
                    acknowledged.unwrap(),
                    Acknowledged::Running,
                    "{backend:?}: attempt {at}"
                );
            }
        }
        for (at, &attempt) in attempts.iter().enumerate() {
            let job = store
                .job_attempts(job_of(&*store, attempt).await)
                .await
                .unwrap();
            let expected = if at == 5 {
                AttemptState::Starting
            } else {
                AttemptState::Running
            };
            assert_eq!(job[0].state, expected, "{backend:?}: attempt {at}");
        }
    }
}

/// The job of an attempt.
async fn job_of(store: &dyn Store, attempt: Uuid) -> Uuid {
    store
        .list_attempts(
            &onejob::store::Scope {
                tenant: "acme".into(),
                user: None,
            },
            None,
            100,
        )
        .await
        .unwrap()
        .into_iter()
        .find(|a| a.id == attempt)
        .unwrap()
        .job_id
}

async fn one_by_one_claims_see_what_batches_leave(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let retried = created(&*store, "retried").await;
    let attempt = started(&*store, &start_for(retried, 0, "a", false)).await;
    fail(&*store, attempt).await;
    let new = created(&*store, "new").await;
    let other = match store
        .create_or_replay(new_job_of(alice(), "image", "other-kind", "x"))
        .await
        .unwrap()
    {
        onejob::store::Intake::Created(job) => job.id,
        other => panic!("{other:?}"),
    };
    let kinds = vec!["chat.completion".to_owned()];
    // The retry and the new job of a kind no batch starts; not the new chat job.
    assert_eq!(
        store.due_others(10, &kinds).await.unwrap(),
        vec![retried, other]
    );
    assert_eq!(store.due_others(1, &kinds).await.unwrap(), vec![retried]);
    // Without kinds it is every due job.
    assert_eq!(
        store.due_others(10, &[]).await.unwrap(),
        store.due_jobs(10).await.unwrap()
    );
    assert_eq!(store.due_jobs(10).await.unwrap(), vec![retried, new, other]);
}

/// A submission that asks intake to start its first attempt (the gateway's hand-off to its
/// own worker) creates the job `running` with attempt number 1 `starting`, leased to that
/// worker, its events `created` then `attempt_started`, in the transaction that creates it:
/// no batch of first attempts, no one-by-one claim and no other starter can start it again,
/// and the attempt the submission describes is the one stored. A replay of its key starts
/// nothing; a submission without a start still waits for dispatch.
async fn a_job_started_at_intake_is_committed_with_its_first_attempt_and_never_due(
    backend: Backend,
) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let other = db.open_store().await;
    let start = StartAtIntake {
        attempt_id: Uuid::now_v7(),
        provider: "a".into(),
        worker: "this-node".into(),
        lease: Duration::from_secs(30),
        timeout: Duration::from_secs(60),
    };
    let mut submission = new_job_of(alice(), "chat.completion", "handed", "x");
    submission.start = Some(start.clone());
    let Intake::Created(job) = store.create_or_replay(submission.clone()).await.unwrap() else {
        panic!("the key was free");
    };
    assert_eq!((job.state, job.attempts), (JobState::Running, 1));
    let described = submission
        .started_attempt(&job)
        .expect("the job was created with its attempt");
    let attempts = store.job_attempts(job.id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    let stored = &attempts[0];
    assert_eq!(stored.id, start.attempt_id);
    assert_eq!(described.id, stored.id);
    assert_eq!(stored.number, 1);
    assert_eq!(stored.state, AttemptState::Starting);
    assert_eq!(stored.worker.as_deref(), Some("this-node"));
    assert_eq!(stored.provider, "a");
    assert_eq!(stored.upstream_key, described.upstream_key);
    assert!(stored.lease_expires_at >= described.lease_expires_at);
    let events = store
        .events(&alice(), job.id, None, 100)
        .await
        .unwrap()
        .unwrap();
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::Created, EventKind::AttemptStarted]);
    assert_eq!(events[1].attempt_id, Some(start.attempt_id));

    // Nobody else can start it: it is not due, and its attempt is starting.
    for store in [&store, &other] {
        assert!(
            store
                .start_first_attempts(&batch(10))
                .await
                .unwrap()
                .is_empty()
        );
        assert!(!store.due_jobs(10).await.unwrap().contains(&job.id));
        assert!(matches!(
            store
                .start_attempt(&start_for(job.id, 1, "b", false))
                .await
                .unwrap(),
            StartOutcome::Refused(_)
        ));
    }
    // It is this worker's to send.
    assert!(
        store
            .owns_attempt(start.attempt_id, "this-node", Duration::from_secs(1))
            .await
            .unwrap()
    );

    // A replay of the key starts nothing more.
    let mut again = new_job_of(alice(), "chat.completion", "handed", "x");
    again.start = Some(StartAtIntake {
        attempt_id: Uuid::now_v7(),
        ..start.clone()
    });
    let Intake::Replayed(replayed) = other.create_or_replay(again.clone()).await.unwrap() else {
        panic!("the key names the job");
    };
    assert_eq!(again.started_attempt(&replayed), None);
    assert_eq!(store.job_attempts(job.id).await.unwrap().len(), 1);

    // Without a start, a new job waits for dispatch as before.
    let waiting = created(&*store, "not-handed").await;
    let job = store.job_for_dispatch(waiting).await.unwrap().unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Pending, 0));
    assert!(store.due_jobs(10).await.unwrap().contains(&waiting));
}
