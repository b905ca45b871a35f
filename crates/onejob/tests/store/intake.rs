//! Intake: `create_or_replay` (creation, replay, conflict, one job per owner and key under
//! races), the job lookups by id and by key, the append-only event log and its paging, and
//! the store's identity (`backend`, `ping`).

use std::sync::Arc;

use futures::future::join_all;

use onejob::store::{Intake, NewEvent, Store};
use onejob_domain::{EventKind, IdempotencyKey, Principal};
use serde_json::json;
use uuid::Uuid;

use crate::support::{
    Backend, RETRY, TestDatabase, alice, created, every_backend_tests, fail, new_job, new_job_of,
    start_for, started,
};

every_backend_tests!(
    racing_submissions_on_many_connections_create_one_job_per_key,
    overlapping_batches_in_opposite_orders_never_deadlock,
    a_different_fingerprint_conflicts_and_writes_nothing,
    the_unique_constraint_refuses_a_second_row_for_a_key,
    a_jobs_intent_cannot_be_changed_in_the_database,
    the_event_log_is_append_only,
    a_replay_answers_the_same_job_and_logs_it,
    a_different_kind_under_a_key_conflicts,
    one_key_names_one_job_per_owner,
    a_job_is_found_only_by_its_owner,
    an_appended_event_is_read_back_as_written,
    the_event_log_pages_oldest_first_by_id,
    the_store_names_its_backend_and_answers_a_ping,
    a_replay_of_a_settled_job_is_answered_from_memory,
    a_replay_of_a_job_that_can_still_change_reads_it_again,
    replays_stop_answering_from_memory_while_their_events_cannot_be_written,
    an_event_naming_a_deleted_job_never_fails_the_others_of_its_batch,
    a_runs_steps_are_one_job_each_and_read_back_in_step_order,
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

/// A second submission of the same intent answers the job created first (not a copy) and
/// appends a `replayed` event each time.
async fn a_replay_answers_the_same_job_and_logs_it(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let Intake::Created(original) = store.create_or_replay(new_job("k", "a fox")).await.unwrap()
    else {
        panic!("first submission creates");
    };
    for _ in 0..2 {
        match store.create_or_replay(new_job("k", "a fox")).await.unwrap() {
            Intake::Replayed(job) => assert_eq!(job, original),
            other => panic!("expected a replay, got {other:?}"),
        }
    }
    // PostgreSQL writes `replayed` events after answering (store/postgres/relaxed.rs):
    // they appear soon, not necessarily by the time the replay is answered.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let kinds: Vec<EventKind> = store
            .events(&alice(), original.id, None, 100)
            .await
            .unwrap()
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .collect();
        if kinds == [EventKind::Created, EventKind::Replayed, EventKind::Replayed] {
            break;
        }
        assert!(
            kinds.len() < 3 && tokio::time::Instant::now() < deadline,
            "{kinds:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(db.scalar("SELECT COUNT(*) FROM jobs").await, 1);
}

/// The same params under another kind is another intent: a conflict, nothing written.
async fn a_different_kind_under_a_key_conflicts(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let Intake::Created(original) = store.create_or_replay(new_job("k", "a fox")).await.unwrap()
    else {
        panic!("first submission creates");
    };
    let other_kind = new_job_of(alice(), "image.generate", "k", "a fox");
    match store.create_or_replay(other_kind).await.unwrap() {
        Intake::Conflict(existing) => assert_eq!(existing, original),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(db.scalar("SELECT COUNT(*) FROM job_events").await, 1);
}

/// A key is scoped to its owner: another user of the tenant, and another tenant, each get
/// their own job under it, and each finds only their own by key.
async fn one_key_names_one_job_per_owner(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let owners = [
        alice(),
        Principal::new("acme", "bob"),
        Principal::new("globex", "alice"),
    ];
    let mut ids = Vec::new();
    for owner in &owners {
        match store
            .create_or_replay(new_job_of(owner.clone(), "chat.completion", "k", "a fox"))
            .await
            .unwrap()
        {
            Intake::Created(job) => {
                assert_eq!(&job.owner, owner);
                ids.push(job.id);
            }
            other => panic!("{owner:?}: expected a new job, got {other:?}"),
        }
    }
    let key_hash = IdempotencyKey::parse("k").unwrap().hash();
    for (owner, id) in owners.iter().zip(&ids) {
        let found = store.job_by_key(owner, &key_hash).await.unwrap().unwrap();
        assert_eq!(found.id, *id, "{owner:?}");
    }
    let unused = IdempotencyKey::parse("never-used").unwrap().hash();
    assert_eq!(store.job_by_key(&alice(), &unused).await.unwrap(), None);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM jobs").await, 3);
}

/// `job`, `job_by_key`, `events` and `attempts` answer `None` for another owner's job (or
/// none at all); `job_for_dispatch` finds it whoever owns it.
async fn a_job_is_found_only_by_its_owner(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "mine").await;
    let key_hash = IdempotencyKey::parse("mine").unwrap().hash();
    let mine = store.job(&alice(), job_id).await.unwrap().unwrap();
    assert_eq!(mine.id, job_id);
    assert_eq!(mine.params, json!({"prompt": "mine"}));
    assert_eq!(
        store.job_by_key(&alice(), &key_hash).await.unwrap(),
        Some(mine.clone())
    );
    for stranger in [
        Principal::new("acme", "bob"),
        Principal::new("globex", "alice"),
    ] {
        assert_eq!(store.job(&stranger, job_id).await.unwrap(), None);
        assert_eq!(store.job_by_key(&stranger, &key_hash).await.unwrap(), None);
        assert_eq!(
            store.events(&stranger, job_id, None, 10).await.unwrap(),
            None
        );
        assert_eq!(store.attempts(&stranger, job_id).await.unwrap(), None);
    }
    let nobody = Uuid::now_v7();
    assert_eq!(store.job(&alice(), nobody).await.unwrap(), None);
    assert_eq!(
        store.events(&alice(), nobody, None, 10).await.unwrap(),
        None
    );
    assert_eq!(store.job_for_dispatch(nobody).await.unwrap(), None);
    assert_eq!(store.job_for_dispatch(job_id).await.unwrap(), Some(mine));
}

/// `append_event` keeps the kind, attempt, actor and detail, after the events before it.
async fn an_appended_event_is_read_back_as_written(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "appended").await;
    let attempt_id = Uuid::now_v7();
    store
        .append_event(NewEvent {
            tenant: None,
            job_id,
            attempt_id: Some(attempt_id),
            kind: EventKind::Resent,
            actor: Some("key:ops".into()),
            detail: json!({"note": "sent again", "n": 2}),
        })
        .await
        .unwrap();
    store
        .append_event(NewEvent {
            tenant: None,
            job_id,
            attempt_id: None,
            kind: EventKind::KeyConflict,
            actor: None,
            detail: json!({}),
        })
        .await
        .unwrap();
    let events = store
        .events(&alice(), job_id, None, 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(events.windows(2).all(|w| w[0].id < w[1].id), "{events:?}");
    let resent = &events[1];
    assert_eq!(resent.job_id, job_id);
    assert_eq!(resent.kind, EventKind::Resent);
    assert_eq!(resent.attempt_id, Some(attempt_id));
    assert_eq!(resent.actor.as_deref(), Some("key:ops"));
    assert_eq!(resent.detail, json!({"note": "sent again", "n": 2}));
    let conflict = &events[2];
    assert_eq!(
        (
            conflict.kind,
            conflict.attempt_id,
            conflict.actor.as_deref()
        ),
        (EventKind::KeyConflict, None, None)
    );
}

/// A job's log is read in pages: the events after `after`, at most `limit`, oldest first;
/// past the last event the page is empty (not `None`).
async fn the_event_log_pages_oldest_first_by_id(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "paged").await;
    // Another job's events interleave in the global log and must not show up.
    let other = created(&*store, "other").await;
    for n in 0..4 {
        for job in [job_id, other] {
            store
                .append_event(NewEvent {
                    tenant: None,
                    job_id: job,
                    attempt_id: None,
                    kind: EventKind::Resent,
                    actor: None,
                    detail: json!({ "n": n }),
                })
                .await
                .unwrap();
        }
    }
    let all = store
        .events(&alice(), job_id, None, 100)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(all.len(), 5);
    assert!(all.iter().all(|e| e.job_id == job_id));
    let mut paged = Vec::new();
    let mut after = None;
    let mut pages = 0;
    loop {
        let page = store
            .events(&alice(), job_id, after, 2)
            .await
            .unwrap()
            .unwrap();
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        after = Some(last.id);
        paged.extend(page);
        pages += 1;
    }
    assert_eq!(pages, 3);
    assert_eq!(paged, all);
    assert_eq!(
        store
            .events(&alice(), job_id, Some(all[4].id), 10)
            .await
            .unwrap(),
        Some(Vec::new())
    );
}

/// `backend` names the database; `ping` answers.
async fn the_store_names_its_backend_and_answers_a_ping(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let expected = match backend {
        Backend::Postgres | Backend::Citus => "postgres",
        Backend::Sqlite => "sqlite",
    };
    assert_eq!(store.backend(), expected);
    store.ping().await.unwrap();
    // Migrating an up-to-date database again changes nothing.
    store.migrate().await.unwrap();
    store.ping().await.unwrap();
}

/// The job a submission of `job` answered, and whether it was a replay.
async fn replayed(store: &dyn Store, job: onejob::store::NewJob) -> onejob::store::JobRecord {
    match store.create_or_replay(job).await.unwrap() {
        Intake::Replayed(job) => job,
        other => panic!("expected a replay, got {other:?}"),
    }
}

async fn a_replay_of_a_settled_job_is_answered_from_memory(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "settled").await;
    let owner = alice();
    store.cancel_job(&owner, job_id, "test").await.unwrap();
    // The first replay reads the cancelled job; it can no longer change, so it is kept.
    let first = replayed(&*store, new_job("settled", "settled")).await;
    assert_eq!(first.state, onejob_domain::JobState::Cancelled);
    // Proof that the next replays do not read the row: a change made behind the store's back
    // (nothing in onejob changes a cancelled job) is not seen by them.
    db.exec("UPDATE jobs SET version = version + 100")
        .await
        .unwrap();
    for _ in 0..3 {
        assert_eq!(
            replayed(&*store, new_job("settled", "settled")).await,
            first
        );
    }
    // Still every replay is logged, and another intent under the key is still a conflict.
    let logged = || async {
        store
            .events(&owner, job_id, None, 100)
            .await
            .unwrap()
            .unwrap()
            .iter()
            .filter(|e| e.kind == EventKind::Replayed)
            .count()
    };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while logged().await < 4 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "replays logged: {}",
            logged().await
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    match store
        .create_or_replay(new_job("settled", "another intent"))
        .await
        .unwrap()
    {
        Intake::Conflict(job) => assert_eq!(job.id, job_id),
        other => panic!("expected a conflict, got {other:?}"),
    }
    // Another store (another node) has kept nothing: it reads the row.
    let other = db.open_store().await;
    let read = replayed(&*other, new_job("settled", "settled")).await;
    assert_eq!(read.version, first.version + 100);
}

async fn a_replay_of_a_job_that_can_still_change_reads_it_again(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let owner = alice();
    // Pending, then cancelled: the second replay sees the cancellation.
    let pending = created(&*store, "pending").await;
    let before = replayed(&*store, new_job("pending", "pending")).await;
    assert_eq!(before.state, onejob_domain::JobState::Pending);
    store.cancel_job(&owner, pending, "test").await.unwrap();
    let after = replayed(&*store, new_job("pending", "pending")).await;
    assert_eq!(after.state, onejob_domain::JobState::Cancelled);
    // Failed can be recovered: a replay of a failed job is never answered from memory.
    let job_id = created(&*store, "failed").await;
    let mut number = 0;
    loop {
        let attempt = started(&*store, &start_for(job_id, number, "a", false)).await;
        number += 1;
        fail(&*store, attempt).await;
        if number == RETRY.max_attempts as i32 {
            break;
        }
    }
    let failed = replayed(&*store, new_job("failed", "failed")).await;
    assert_eq!(failed.state, onejob_domain::JobState::Failed);
    store.recover_job(&owner, job_id, "test").await.unwrap();
    let recovered = replayed(&*store, new_job("failed", "failed")).await;
    assert_eq!(recovered.state, onejob_domain::JobState::Pending);
}

/// Holds the database's lock on writing events until dropped (committed): SQLite's write
/// lock (`BEGIN IMMEDIATE`), PostgreSQL's `EXCLUSIVE` lock on `job_events` (reads go on).
enum WritesBlocked {
    Postgres(sqlx::PgConnection),
    Sqlite(sqlx::SqliteConnection),
}

impl WritesBlocked {
    async fn on(db: &TestDatabase) -> WritesBlocked {
        use sqlx::{Connection, Executor};
        match db.backend {
            Backend::Postgres | Backend::Citus => {
                let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
                conn.execute("BEGIN").await.unwrap();
                conn.execute("LOCK TABLE job_events IN EXCLUSIVE MODE")
                    .await
                    .unwrap();
                WritesBlocked::Postgres(conn)
            }
            Backend::Sqlite => {
                let mut conn = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
                conn.execute("BEGIN IMMEDIATE").await.unwrap();
                WritesBlocked::Sqlite(conn)
            }
        }
    }

    async fn release(self) {
        use sqlx::Executor;
        match self {
            WritesBlocked::Postgres(mut conn) => conn.execute("COMMIT").await.map(drop),
            WritesBlocked::Sqlite(mut conn) => conn.execute("COMMIT").await.map(drop),
        }
        .unwrap();
    }
}

/// While the database takes no writes, replays of a kept settled job are answered from
/// memory only as long as their `replayed` events find room in the bounded queue (10,000,
/// plus one batch being written); the rest wait, and once writes resume every replay is
/// answered and every event written: nothing dropped, memory bounded. Before, the queue had
/// no bound and every replay was answered at once while its event piled up in memory.
async fn replays_stop_answering_from_memory_while_their_events_cannot_be_written(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "kept").await;
    store.cancel_job(&alice(), job_id, "test").await.unwrap();
    replayed(&*store, new_job("kept", "kept")).await;
    // The replay's event is written before the writes are blocked.
    let logged = "SELECT COUNT(*) FROM job_events WHERE kind = 'replayed'";
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while db.scalar(logged).await < 1 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let blocked = WritesBlocked::on(&db).await;
    let replays = 12_000;
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tasks: Vec<_> = (0..replays)
        .map(|_| {
            let (store, answered) = (store.clone(), answered.clone());
            tokio::spawn(async move {
                let intake = store.create_or_replay(new_job("kept", "kept")).await;
                answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                intake
            })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let while_blocked = answered.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        while_blocked <= 10_000 + 1_024,
        "{while_blocked} replays answered while none of their events could be written"
    );
    blocked.release().await;
    for intake in join_all(tasks).await {
        assert!(matches!(intake.unwrap().unwrap(), Intake::Replayed(_)));
    }
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let count = db.scalar(logged).await;
        if count == replays as i64 + 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{count} of {} replayed events written",
            replays + 1
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Replayed events are written in batches. One that names a job deleted meanwhile (here,
/// replays answered from memory by a node that does not know another node prunes) must not
/// fail the others of its batch: every replay of another job is answered and logged. Before,
/// the whole batch failed: on PostgreSQL its events were dropped, on SQLite every replay
/// waiting on it got the error.
async fn an_event_naming_a_deleted_job_never_fails_the_others_of_its_batch(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let pruner = db.open_store().await;
    let gone = created(&*store, "gone").await;
    store.cancel_job(&alice(), gone, "test").await.unwrap();
    replayed(&*store, new_job("gone", "gone")).await;
    let pending = created(&*store, "pending").await;
    let pruned = pruner
        .prune_finished(std::time::Duration::ZERO, 100)
        .await
        .unwrap();
    assert_eq!(pruned.jobs, 1);
    let copies = 200;
    let replays = (0..copies * 2).map(|n| {
        let store = store.clone();
        let key = if n % 2 == 0 { "gone" } else { "pending" };
        tokio::spawn(async move { (key, store.create_or_replay(new_job(key, key)).await) })
    });
    for replay in join_all(replays).await {
        let (key, intake) = replay.unwrap();
        if key == "pending" {
            match intake {
                Ok(Intake::Replayed(job)) => assert_eq!(job.id, pending),
                other => panic!("a replay of the pending job: {other:?}"),
            }
        }
    }
    let logged = || async {
        store
            .events(&alice(), pending, None, 1_000)
            .await
            .unwrap()
            .unwrap()
            .iter()
            .filter(|e| e.kind == EventKind::Replayed)
            .count()
    };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while logged().await < copies {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of the pending job's {copies} replays logged",
            logged().await
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(db.scalar("SELECT COUNT(*) FROM jobs").await, 1);
}

/// An agent run's later steps (`NewJob::run`, under keys derived from the run's key and the
/// step): racing submissions of two steps on two pools make one job per step (the key's
/// unique index decides), `run_steps` reads them back in step order with their run, only
/// the owner's, and a step's run and step never change in the database.
async fn a_runs_steps_are_one_job_each_and_read_back_in_step_order(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let stores: [Arc<dyn Store>; 2] = [db.open_store().await, db.open_store().await];
    let run_key = IdempotencyKey::parse("agent-run").unwrap().hash();
    stores[0]
        .create_or_replay(new_job("agent-run", "step one"))
        .await
        .unwrap();
    let step = |n: i32| {
        let mut job = new_job("agent-run", &format!("step {n}"));
        job.key_hash = run_key.step(n.unsigned_abs());
        job.run = Some(onejob::store::RunStep {
            key: run_key,
            step: n,
        });
        job
    };
    let submissions = (0..16).map(|i| {
        let store = stores[i % 2].clone();
        let job = step(if i % 4 < 2 { 5 } else { 3 });
        tokio::spawn(async move { store.create_or_replay(job).await })
    });
    let mut ids = std::collections::HashMap::<i32, std::collections::HashSet<Uuid>>::new();
    for outcome in join_all(submissions).await {
        let job = match outcome.unwrap().expect("store call") {
            Intake::Created(job) | Intake::Replayed(job) => job,
            Intake::Conflict(job) => panic!("same intent reported as a conflict: {job:?}"),
        };
        let run = job.run.expect("a step keeps its run");
        assert_eq!(run.key, run_key);
        ids.entry(run.step).or_default().insert(job.id);
    }
    assert!(
        ids.values().all(|ids| ids.len() == 1),
        "one job per step: {ids:?}"
    );
    let steps = stores[1].run_steps(&alice(), &run_key).await.unwrap();
    let order: Vec<i32> = steps.iter().map(|s| s.run.unwrap().step).collect();
    assert_eq!(order, [3, 5]);
    assert_eq!(steps[0].params, json!({"prompt": "step 3"}));
    let mallory = Principal::new("acme", "mallory");
    assert!(
        stores[0]
            .run_steps(&mallory, &run_key)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM jobs").await, 3);
    for statement in ["UPDATE jobs SET step = 4", "UPDATE jobs SET run_key = NULL"] {
        let error = db.exec(statement).await.expect_err(statement);
        assert!(error.contains("never changes"), "{statement}: {error}");
    }
}
