//! Attempts through HTTP against the fake provider as a real server: the four fragile
//! points (double click, reused key, timeout, out-of-order race), failover after a fake
//! success, and side effects equal to attempts.

use std::time::Duration;

use futures::future::join_all;
use onejob_fake::{Behaviour, Outcome, Rule};
use serde_json::{Value, json};

use crate::helpers::{
    Backend, Fakes, TestApp, TestDatabase, chat, json, postgres_and_sqlite_tests,
};

postgres_and_sqlite_tests!(
    a_double_click_is_one_job_and_one_side_effect,
    a_mismatched_key_runs_nothing,
    a_timeout_is_unknown_and_blocks_further_attempts,
    a_hang_before_acknowledgement_is_unknown_too,
    the_first_to_return_wins_even_against_the_primary,
    success_without_artifact_fails_over_to_one_result,
    a_definite_failure_on_every_provider_fails_the_job,
    side_effects_equal_attempts,
);

const WITHIN: Duration = Duration::from_secs(15);

fn state_is(state: &'static str) -> impl Fn(&Value) -> bool {
    move |job| job["state"] == state
}

fn rule(matches: &str, behaviour: Behaviour) -> Rule {
    Rule {
        matches: Some(matches.into()),
        times: None,
        behaviour,
    }
}

async fn a_double_click_is_one_job_and_one_side_effect(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |_| {}).await;
    let body = chat("Charge order 42.");
    let answers = join_all((0..20).map(|_| app.submit("order-42:charge", &body).send())).await;
    let mut id = None;
    for answer in answers {
        let (status, job) = json(answer.unwrap()).await;
        assert!(status == 200 || status == 201, "{job}");
        assert!(id.is_none() || id.as_ref() == Some(&job["id"]));
        id = Some(job["id"].clone());
    }
    let id = id.unwrap();
    let job = app
        .wait_job(id.as_str().unwrap(), WITHIN, state_is("succeeded"))
        .await;
    assert_eq!(
        job["result"],
        json!({"text": "fake answer: Charge order 42."})
    );
    // Replays after completion still run nothing.
    assert_eq!(
        app.submit("order-42:charge", &body)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fakes.total(), 1, "one intent, one upstream side effect");
    assert_eq!(app.attempts(id.as_str().unwrap()).await.len(), 1);
}

async fn a_mismatched_key_runs_nothing(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |_| {}).await;
    let job = app.create("k", &chat("original prompt")).await;
    app.wait_job(job["id"].as_str().unwrap(), WITHIN, state_is("succeeded"))
        .await;
    let (status, _) = json(
        app.submit("k", &chat("changed prompt"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 422);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let seen = fakes.primary.submissions();
    assert_eq!(fakes.total(), 1);
    assert!(
        seen.requests
            .iter()
            .all(|r| !r.input.to_string().contains("changed prompt")),
        "the refused intent never reached a provider"
    );
}

async fn a_timeout_is_unknown_and_blocks_further_attempts(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "slow fox",
        Behaviour {
            hang_after_ack: true,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |config| {
        config.kinds[0].attempt_timeout = Duration::from_millis(400);
    })
    .await;
    let job = app.create("slow", &chat("slow fox")).await;
    let id = job["id"].as_str().unwrap();
    let job = app.wait_job(id, WITHIN, state_is("unknown")).await;
    assert!(
        job.get("result").is_none() && job.get("error").is_none(),
        "{job}"
    );
    // Several poll cycles later: still one attempt, unknown, one side effect; no failover.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let attempts = app.attempts(id).await;
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0]["state"], "unknown");
    assert!(
        attempts[0]["task_id"].is_string(),
        "the task id was stored when it came back"
    );
    assert_eq!(app.job(id).await["state"], "unknown");
    assert_eq!(fakes.total(), 1);
    let kinds: Vec<Value> = app
        .events(id)
        .await
        .into_iter()
        .map(|e| e["kind"].clone())
        .collect();
    assert!(kinds.contains(&json!("attempt_unknown")), "{kinds:?}");
    assert!(
        !kinds.contains(&json!("attempt_resolved")),
        "a timeout is not a failure"
    );
}

async fn a_hang_before_acknowledgement_is_unknown_too(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    // It is never acknowledged and never finishes: no proof will come.
    fakes.primary.add_rule(rule(
        "mute fox",
        Behaviour {
            hang_before_ack: true,
            hang_after_ack: true,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |config| {
        config.kinds[0].attempt_timeout = Duration::from_millis(400);
    })
    .await;
    let job = app.create("mute", &chat("mute fox")).await;
    let id = job["id"].as_str().unwrap();
    app.wait_job(id, WITHIN, state_is("unknown")).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let attempts = app.attempts(id).await;
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["state"], "unknown");
    assert!(attempts[0].get("acknowledged_at").is_none());
    assert_eq!(fakes.total(), 1);
}

async fn the_first_to_return_wins_even_against_the_primary(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    // The primary is sent first and answers last; the hedge on the backup answers first.
    fakes.primary.add_rule(rule(
        "race",
        Behaviour {
            run_ms: 1500,
            output: Some(json!({"text": "primary, late"})),
            ..Default::default()
        },
    ));
    fakes.backup.add_rule(rule(
        "race",
        Behaviour {
            run_ms: 50,
            output: Some(json!({"text": "backup, early"})),
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |config| {
        config.kinds[0].hedge_after = Some(Duration::from_millis(200));
    })
    .await;
    let job = app.create("race", &chat("race")).await;
    let id = job["id"].as_str().unwrap();
    let job = app.wait_job(id, WITHIN, state_is("succeeded")).await;
    assert_eq!(job["result"], json!({"text": "backup, early"}));
    let attempts = app
        .wait_attempts(id, WITHIN, |a| a.len() == 2 && a[0]["state"] == "discarded")
        .await;
    assert_eq!(attempts[0]["provider"], "fake");
    assert_eq!(attempts[1]["provider"], "fake-backup");
    assert_eq!(attempts[1]["hedge"], true);
    assert_eq!(attempts[1]["state"], "succeeded");
    assert_eq!(job["completed_by"], attempts[1]["id"]);
    // The late result is discarded, not merged: the job still shows the winner's.
    assert_eq!(
        app.job(id).await["result"],
        json!({"text": "backup, early"})
    );
    let events = app.events(id).await;
    let race_lost: Vec<&Value> = events.iter().filter(|e| e["kind"] == "race_lost").collect();
    assert_eq!(race_lost.len(), 1, "{events:?}");
    let detail = &race_lost[0]["detail"];
    assert_eq!(race_lost[0]["attempt_id"], attempts[0]["id"]);
    assert!(detail["size"].as_u64().unwrap() > 0 && detail["sha256"].as_str().unwrap().len() == 64);
    assert!(
        !detail.to_string().contains("primary, late"),
        "only size and hash: {detail}"
    );
    assert_eq!(fakes.total(), 2);
}

async fn success_without_artifact_fails_over_to_one_result(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "empty",
        Behaviour {
            outcome: Outcome::MissingArtifact,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |_| {}).await;
    let job = app.create("empty", &chat("empty")).await;
    let id = job["id"].as_str().unwrap();
    let job = app.wait_job(id, WITHIN, state_is("succeeded")).await;
    let attempts = app.attempts(id).await;
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["state"], "failed");
    assert!(
        attempts[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no real artifact")
    );
    assert_eq!(attempts[1]["provider"], "fake-backup");
    assert_eq!(job["completed_by"], attempts[1]["id"]);
    assert_eq!(job["result"], json!({"text": "fake answer: empty"}));
    let kinds: Vec<Value> = app
        .events(id)
        .await
        .into_iter()
        .map(|e| e["kind"].clone())
        .collect();
    assert!(kinds.contains(&json!("failover")), "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "won").count(), 1);
}

async fn a_definite_failure_on_every_provider_fails_the_job(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let drifted = Behaviour {
        outcome: Outcome::DriftedKeys,
        ..Default::default()
    };
    fakes.primary.add_rule(rule("drift", drifted.clone()));
    fakes.backup.add_rule(rule(
        "drift",
        Behaviour {
            http_status: Some(400),
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |_| {}).await;
    let job = app.create("drift", &chat("drift")).await;
    let id = job["id"].as_str().unwrap();
    let job = app.wait_job(id, WITHIN, state_is("failed")).await;
    assert!(job.get("result").is_none());
    assert_eq!(job["error"]["attempts"], 3, "{job}");
    let attempts = app.attempts(id).await;
    let providers: Vec<&str> = attempts
        .iter()
        .map(|a| a["provider"].as_str().unwrap())
        .collect();
    assert_eq!(
        providers,
        ["fake", "fake-backup", "fake"],
        "failover wraps around"
    );
    assert!(attempts.iter().all(|a| a["state"] == "failed"));
    assert!(job.get("poll_after_ms").is_none());
}

async fn side_effects_equal_attempts(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "flaky",
        Behaviour {
            outcome: Outcome::Fail,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |_| {}).await;
    let mut ids = Vec::new();
    for i in 0..12 {
        let prompt = if i % 3 == 0 {
            format!("flaky {i}")
        } else {
            format!("steady {i}")
        };
        let job = app.create(&format!("mix-{i}"), &chat(&prompt)).await;
        ids.push(job["id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        app.wait_job(id, WITHIN, state_is("succeeded")).await;
    }
    let attempts = db.scalar("SELECT COUNT(*) FROM attempts").await;
    assert_eq!(attempts, 16, "12 jobs, 4 of which failed over once");
    assert_eq!(
        fakes.total() as i64,
        attempts,
        "every attempt is exactly one side effect"
    );
}
