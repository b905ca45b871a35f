//! The store conformance suite: the same checks against the PostgreSQL and SQLite stores,
//! straight through the [`Store`] trait and raw SQL. These prove that the database, not the
//! application, enforces the invariants.

use std::sync::Arc;

use futures::future::join_all;
use onejob::store::{Intake, NewJob, Store};
use onejob_domain::{Fingerprint, IdempotencyKey, Principal};
use serde_json::json;
use uuid::Uuid;

use crate::helpers::{Backend, TestDatabase, backend_tests};

backend_tests!(
    racing_submissions_on_many_connections_create_one_job_per_key,
    a_different_fingerprint_conflicts_and_writes_nothing,
    the_unique_constraint_refuses_a_second_row_for_a_key,
    a_jobs_intent_cannot_be_changed_in_the_database,
    the_event_log_is_append_only,
    a_result_needs_a_winning_attempt_of_the_same_job,
);

fn new_job(key: &str, prompt: &str) -> NewJob {
    let params = json!({ "prompt": prompt });
    NewJob {
        id: Uuid::now_v7(),
        owner: Principal::new("acme", "alice"),
        key_hash: IdempotencyKey::parse(key).unwrap().hash(),
        kind: "chat.completion".into(),
        fingerprint: Fingerprint::of("chat.completion", &params, None),
        params,
        actor: "test".into(),
    }
}

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
