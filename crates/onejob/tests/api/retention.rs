//! Retention (`[retention] finished_after`): finished jobs are deleted with their attempts
//! and events, in batches, on both stores; their keys then name nothing; nothing unfinished
//! or recent goes; the event log refuses every other delete.

use std::time::Duration;

use onejob_fake::{Behaviour, Rule};
use serde_json::Value;

use crate::helpers::{
    Backend, Fakes, TestApp, TestDatabase, chat, create_key, json, postgres_and_sqlite_tests,
};

postgres_and_sqlite_tests!(
    finished_jobs_go_with_their_attempts_and_events_and_their_keys_are_free_again,
    nothing_recent_or_unfinished_is_pruned,
    replays_of_a_job_being_pruned_never_fail_nor_point_at_nothing,
);

const WITHIN: Duration = Duration::from_secs(30);

fn id_of(job: &Value) -> String {
    job["id"].as_str().unwrap().to_owned()
}

async fn finished_jobs_go_with_their_attempts_and_events_and_their_keys_are_free_again(
    backend: Backend,
) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(Rule {
        matches: Some("forever".into()),
        times: None,
        behaviour: Behaviour {
            hang_after_ack: true,
            ..Default::default()
        },
    });
    let app = TestApp::running_uncertified(&db, &fakes, |config| {
        config.retention.finished_after = Some(Duration::from_secs(1));
        config.retention.every = Some(Duration::from_millis(200));
        // Several batches per pass.
        config.retention.batch = Some(2);
    })
    .await;
    let running = id_of(&app.create("still-running", &chat("forever")).await);
    let mut ids = Vec::new();
    for n in 0..5 {
        let id = id_of(
            &app.create(&format!("done-{n}"), &chat(&format!("done {n}")))
                .await,
        );
        app.wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
            .await;
        ids.push(id);
    }
    let deadline = tokio::time::Instant::now() + WITHIN;
    for id in &ids {
        loop {
            let status = app
                .get(&format!("/v1/jobs/{id}"))
                .send()
                .await
                .unwrap()
                .status();
            if status == 404 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{id} was not pruned"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Their attempts and events went with them; the running job and its rows stay.
    assert_eq!(db.scalar("SELECT COUNT(*) FROM jobs").await, 1);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM attempts").await, 1);
    assert!(db.scalar("SELECT COUNT(*) FROM job_events").await >= 2);
    assert_eq!(app.job(&running).await["state"], "running");
    // A pruned job's key names nothing: the same submission is a new job.
    let (status, again) = json(app.submit("done-0", &chat("done 0")).send().await.unwrap()).await;
    assert_eq!(status, 201, "{again}");
    assert_ne!(id_of(&again), ids[0]);
    app.wait_job(&id_of(&again), WITHIN, |j| j["state"] == "succeeded")
        .await;
    // Counted.
    let metrics = app
        .get("/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let jobs: f64 = metrics
        .lines()
        .find(|l| l.starts_with("onejob_retention_deleted_total{what=\"jobs\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .expect("the retention counter");
    assert!(jobs >= 5.0, "{jobs}");
    // Everything else still may not delete from the event log.
    let error = db.exec("DELETE FROM job_events").await.unwrap_err();
    assert!(error.contains("append-only"), "{error}");
}

async fn nothing_recent_or_unfinished_is_pruned(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running_uncertified(&db, &fakes, |_| {}).await;
    let id = id_of(&app.create("fresh", &chat("fresh")).await);
    app.wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    let pruned = app
        .store
        .prune_finished(Duration::from_secs(3_600), 100)
        .await
        .unwrap();
    assert_eq!(pruned.jobs, 0, "finished a moment ago");
    let pruned = app.store.prune_finished(Duration::ZERO, 100).await.unwrap();
    assert_eq!((pruned.jobs, pruned.attempts), (1, 1), "{pruned:?}");
    assert!(pruned.events >= 3, "{pruned:?}");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM jobs").await, 0);
}

/// Nodes take turns: while another pass holds the retention lock, a store deletes nothing
/// and says it was busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_passes_take_turns() {
    let db = TestDatabase::create(Backend::Postgres).await;
    let store = db.open_store().await;
    let other = onejob::store::postgres::PgStore::connect(&db.url, &Default::default())
        .await
        .unwrap();
    let mut tx = other.pool().begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(122519938559842)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let pruned = store.prune_finished(Duration::ZERO, 10).await.unwrap();
    assert!(pruned.busy, "{pruned:?}");
    tx.rollback().await.unwrap();
    assert!(!store.prune_finished(Duration::ZERO, 10).await.unwrap().busy);
}

/// Settled jobs kept hot by replays meet retention (2 s). Once a job is seen deleted, no
/// replay names it any more (a cache answering for a deleted job gave ids that answer 404),
/// its key reused with new params is a new job (the `key_conflict` event named the deleted
/// job: a 500), and another tenant replaying its own running job throughout never sees a
/// failure (one event naming a deleted job failed its whole batch, on SQLite every caller in
/// it).
async fn replays_of_a_job_being_pruned_never_fail_nor_point_at_nothing(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(Rule {
        matches: Some("forever".into()),
        times: None,
        behaviour: Behaviour {
            hang_after_ack: true,
            ..Default::default()
        },
    });
    let app = TestApp::running_uncertified(&db, &fakes, |config| {
        config.retention.finished_after = Some(Duration::from_secs(2));
        config.retention.every = Some(Duration::from_millis(100));
    })
    .await;
    let globex = create_key(&*app.store, "globex", "bob", false).await;
    let running = app
        .submit_as(&globex, "still-running", &chat("forever"))
        .send()
        .await
        .unwrap();
    assert_eq!(running.status(), 201);
    let hot_a = id_of(&app.create("hot-a", &chat("hot a")).await);
    let hot_b = id_of(&app.create("hot-b", &chat("hot b")).await);
    for (id, key, prompt) in [(&hot_a, "hot-a", "hot a"), (&hot_b, "hot-b", "hot b")] {
        app.wait_job(id, WITHIN, |j| j["state"] == "succeeded")
            .await;
        let (status, _) = json(app.submit(key, &chat(prompt)).send().await.unwrap()).await;
        assert_eq!(status, 200);
    }

    // Replays of hot-a and of globex's running job, side by side, until told to stop.
    let stop = tokio_util::sync::CancellationToken::new();
    let replays = |token: Option<String>, key: &'static str, prompt: &'static str| {
        let (app, stop) = (&app, stop.clone());
        async move {
            let mut answers = Vec::new();
            while !stop.is_cancelled() {
                let sent = tokio::time::Instant::now();
                let request = match &token {
                    Some(token) => app.submit_as(token, key, &chat(prompt)),
                    None => app.submit(key, &chat(prompt)),
                };
                let (status, job) = json(request.send().await.unwrap()).await;
                answers.push((sent, status, job));
            }
            answers
        }
    };
    let watch = async {
        // Until both hot jobs are seen deleted, then a few hundred ms more of replays.
        let deadline = tokio::time::Instant::now() + WITHIN;
        for id in [&hot_a, &hot_b] {
            loop {
                let status = app
                    .get(&format!("/v1/jobs/{id}"))
                    .send()
                    .await
                    .unwrap()
                    .status();
                if status == 404 {
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{id} was never pruned"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let deleted_seen = tokio::time::Instant::now();
        // hot-b reused with new params after its job's delete: a new job.
        let (status, job) = json(
            app.submit("hot-b", &chat("hot b, changed"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 201, "{job}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop.cancel();
        deleted_seen
    };
    let (deleted_seen, hot_replays, other_replays) = futures::join!(
        watch,
        replays(None, "hot-a", "hot a"),
        replays(Some(globex.clone()), "still-running", "forever"),
    );
    for (_, status, body) in &other_replays {
        assert_eq!(*status, 200, "another tenant's replay: {body}");
    }
    assert!(other_replays.len() > 10, "{}", other_replays.len());
    for (sent, status, job) in &hot_replays {
        assert!(*status == 200 || *status == 201, "{status}: {job}");
        if *sent > deleted_seen {
            assert_ne!(
                id_of(job),
                hot_a,
                "a replay sent after the job was seen deleted names it"
            );
        }
    }
    assert!(
        hot_replays.iter().any(|(at, _, _)| *at > deleted_seen),
        "no replay came after the delete"
    );
}
