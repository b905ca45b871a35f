//! Resolving the unknown by proof, operator resolution, cancel, controlled recovery, and
//! failover or hedging only to certified providers (both stores, through HTTP, against the
//! fake provider as a real server).

use std::time::Duration;

use onejob::config::{Adapter, Config, ProviderConfig};
use onejob_fake::{Behaviour, Outcome, Rule};
use serde_json::{Value, json};

use crate::helpers::{
    Backend, Fakes, TestApp, TestDatabase, chat, create_key, json, postgres_and_sqlite_tests,
};

postgres_and_sqlite_tests!(
    an_unknown_reconciled_as_succeeded_wins_with_one_side_effect,
    an_unknown_reconciled_as_failed_moves_to_the_next_certified_provider,
    a_submit_timed_out_before_its_task_id_is_found_by_its_idempotency_key,
    an_unreportable_unknown_stays_unknown_until_an_operator_resolves_it,
    an_operator_can_resolve_an_unknown_as_succeeded_with_a_valid_result,
    settle_unknown_after_settles_as_failed_and_says_so,
    cancel_asks_the_provider_to_cancel_the_running_task,
    cancel_drops_a_chat_request_in_flight_and_ends_it_cancelled,
    retry_recovers_a_failed_job_on_the_same_job,
    a_failed_jobs_error_names_the_retry_and_a_new_key,
    retry_refuses_every_state_but_failed,
    failover_is_refused_to_an_uncertified_provider_until_verified,
    a_changed_template_voids_the_certificate,
    a_failing_reverification_revokes_the_certificate,
    changed_provider_settings_void_the_certificate,
    a_hedge_goes_only_to_a_certified_provider,
);

const WITHIN: Duration = Duration::from_secs(20);

fn rule(matches: &str, behaviour: Behaviour) -> Rule {
    Rule {
        matches: Some(matches.into()),
        times: None,
        behaviour,
    }
}

fn once(matches: &str, behaviour: Behaviour) -> Rule {
    Rule {
        times: Some(1),
        ..rule(matches, behaviour)
    }
}

fn id_of(job: &Value) -> String {
    job["id"].as_str().unwrap().to_owned()
}

fn kinds_of(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect()
}

/// Routes `chat.completion` to an `openai-chat` provider (synchronous, no status to ask) on
/// the primary fake, failing over to the backup fake.
fn chat_api(fakes: &Fakes) -> impl FnOnce(&mut Config) + '_ {
    move |config| {
        let mut chat = ProviderConfig::new("chat-api", Adapter::OpenaiChat);
        chat.base_url = Some(format!("{}/v1", fakes.primary.base_url()));
        chat.model = Some("fake-model".into());
        config.providers.push(chat);
        config.kinds[0].providers = vec!["chat-api".into(), "fake-backup".into()];
        config.kinds[0].attempt_timeout = Duration::from_millis(400);
    }
}

async fn resolve(app: &TestApp, token: &str, attempt: &str, body: Value) -> (u16, Value) {
    json(
        app.client
            .post(app.url(&format!("/v1/attempts/{attempt}/resolve")))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

async fn post(app: &TestApp, path: &str) -> (u16, Value) {
    json(
        app.client
            .post(app.url(path))
            .bearer_auth(&app.token)
            .send()
            .await
            .unwrap(),
    )
    .await
}

async fn an_unknown_reconciled_as_succeeded_wins_with_one_side_effect(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    // The task outlives the attempt's deadline, then succeeds.
    fakes.primary.add_rule(rule(
        "slow",
        Behaviour {
            run_ms: 1200,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |c| {
        c.kinds[0].attempt_timeout = Duration::from_millis(300)
    })
    .await;
    let id = id_of(&app.create("slow", &chat("slow")).await);
    app.wait_attempts(&id, WITHIN, |a| a[0]["state"] == "unknown")
        .await;
    let job = app
        .wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    assert_eq!(job["result"], json!({"text": "fake answer: slow"}));
    let attempts = app.attempts(&id).await;
    assert_eq!(attempts.len(), 1, "proof resolved it: no second attempt");
    assert_eq!(attempts[0]["state"], "succeeded");
    let events = app.events(&id).await;
    let won = events.iter().find(|e| e["kind"] == "won").unwrap();
    assert_eq!(won["actor"], "reconciler");
    assert_eq!(fakes.total(), 1);
}

async fn an_unknown_reconciled_as_failed_moves_to_the_next_certified_provider(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "doomed",
        Behaviour {
            run_ms: 800,
            outcome: Outcome::Fail,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |c| {
        c.kinds[0].attempt_timeout = Duration::from_millis(300)
    })
    .await;
    let id = id_of(&app.create("doomed", &chat("doomed")).await);
    app.wait_attempts(&id, WITHIN, |a| a[0]["state"] == "unknown")
        .await;
    let job = app
        .wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    let attempts = app.attempts(&id).await;
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["state"], "failed");
    assert_eq!(attempts[1]["provider"], "fake-backup");
    assert_eq!(job["completed_by"], attempts[1]["id"]);
    let events = app.events(&id).await;
    let resolved = events
        .iter()
        .find(|e| e["kind"] == "attempt_resolved")
        .unwrap();
    assert_eq!(resolved["actor"], "reconciler");
    assert_eq!(fakes.total(), 2);
}

async fn a_submit_timed_out_before_its_task_id_is_found_by_its_idempotency_key(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    // The upstream takes the task but its answer to the submit never comes back.
    fakes.primary.add_rule(rule(
        "lost ack",
        Behaviour {
            hang_before_ack: true,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |c| {
        c.kinds[0].attempt_timeout = Duration::from_millis(300)
    })
    .await;
    let id = id_of(&app.create("lost-ack", &chat("lost ack")).await);
    let job = app
        .wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    let attempts = app.attempts(&id).await;
    assert_eq!(attempts.len(), 1);
    let seen = fakes.primary.submissions();
    assert_eq!(seen.total, 1);
    assert_eq!(
        attempts[0]["task_id"].as_str(),
        seen.requests[0].task_id.as_deref(),
        "the task id was learned by the forwarded idempotency key"
    );
    assert_eq!(job["result"], json!({"text": "fake answer: lost ack"}));
}

async fn an_unreportable_unknown_stays_unknown_until_an_operator_resolves_it(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "silent",
        Behaviour {
            hang_after_ack: true,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, chat_api(&fakes)).await;
    let body = json!({"kind": "chat.completion", "params": {"prompt": "silent"}});
    let id = id_of(&app.create("silent", &body).await);
    let attempts = app
        .wait_attempts(&id, WITHIN, |a| a[0]["state"] == "unknown")
        .await;
    let attempt = attempts[0]["id"].as_str().unwrap().to_owned();
    // The chat API cannot report status: several reconciliation rounds change nothing.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(app.attempts(&id).await.len(), 1);
    assert_eq!(app.job(&id).await["state"], "unknown");

    let operator = create_key(&*app.store, "acme", "ops", true).await;
    let foreign_operator = create_key(&*app.store, "globex", "ops", true).await;
    let (status, problem) = resolve(&app, &app.token, &attempt, json!({"outcome": "failed"})).await;
    assert_eq!(
        (status, problem["type"].as_str()),
        (403, Some("https://onejob.dev/problems/forbidden"))
    );
    let (status, _) = resolve(
        &app,
        &foreign_operator,
        &attempt,
        json!({"outcome": "failed"}),
    )
    .await;
    assert_eq!(status, 404, "another tenant's attempt is not there");
    let (status, problem) = resolve(
        &app,
        &operator,
        &attempt,
        json!({"outcome": "succeeded", "result": {"answer": "drifted"}}),
    )
    .await;
    assert_eq!(status, 400, "{problem}");
    assert_eq!(
        problem["type"],
        "https://onejob.dev/problems/result-invalid"
    );
    assert_eq!(
        app.attempts(&id).await[0]["state"],
        "unknown",
        "a refused resolution changes nothing"
    );

    let (status, answer) = resolve(
        &app,
        &operator,
        &attempt,
        json!({"outcome": "failed", "reason": "the vendor confirmed it never ran"}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["attempt"]["state"], "failed");
    let job = app
        .wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    let attempts = app.attempts(&id).await;
    assert_eq!(attempts[1]["provider"], "fake-backup");
    assert_eq!(job["completed_by"], attempts[1]["id"]);
    let events = app.events(&id).await;
    let resolved = events
        .iter()
        .find(|e| e["kind"] == "attempt_resolved")
        .unwrap();
    assert!(resolved["actor"].as_str().unwrap().starts_with("key:"));
    assert_eq!(
        resolved["detail"]["note"],
        "the vendor confirmed it never ran"
    );
    let (status, _) = resolve(&app, &operator, &attempt, json!({"outcome": "failed"})).await;
    assert_eq!(status, 409, "only unknown attempts are resolved");
}

async fn an_operator_can_resolve_an_unknown_as_succeeded_with_a_valid_result(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "silent",
        Behaviour {
            hang_after_ack: true,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, chat_api(&fakes)).await;
    let body = json!({"kind": "chat.completion", "params": {"prompt": "silent"}});
    let id = id_of(&app.create("silent", &body).await);
    let attempts = app
        .wait_attempts(&id, WITHIN, |a| a[0]["state"] == "unknown")
        .await;
    let attempt = attempts[0]["id"].as_str().unwrap();
    let operator = create_key(&*app.store, "acme", "ops", true).await;
    let (status, answer) = resolve(
        &app,
        &operator,
        attempt,
        json!({
            "outcome": "succeeded",
            "result": {"text": "found in the vendor's dashboard"},
            "reason": "ticket 4711: the vendor confirmed it ran",
        }),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outcome"], "won");
    let job = app.job(&id).await;
    assert_eq!(job["state"], "succeeded");
    assert_eq!(
        job["result"],
        json!({"text": "found in the vendor's dashboard"})
    );
    assert_eq!(job["completed_by"], attempt);
    assert_eq!(fakes.total(), 1);
    // Who decided, what, and why: the reason is kept for a success too.
    let events = app.events(&id).await;
    let won = events.iter().find(|e| e["kind"] == "won").unwrap();
    assert!(won["actor"].as_str().unwrap().starts_with("key:"), "{won}");
    assert_eq!(
        won["detail"]["note"],
        "ticket 4711: the vendor confirmed it ran"
    );
}

async fn settle_unknown_after_settles_as_failed_and_says_so(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "silent",
        Behaviour {
            hang_after_ack: true,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |config| {
        chat_api(&fakes)(config);
        config.kinds[0].settle_unknown_after = Some(Duration::from_millis(500));
    })
    .await;
    let body = json!({"kind": "chat.completion", "params": {"prompt": "silent"}});
    let id = id_of(&app.create("silent", &body).await);
    app.wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    let attempts = app.attempts(&id).await;
    assert_eq!(attempts[0]["state"], "failed");
    assert_eq!(attempts[0]["error"]["settled"], true);
    let events = app.events(&id).await;
    let kinds = kinds_of(&events);
    let unknown_at = kinds.iter().position(|k| k == "attempt_unknown").unwrap();
    let settled_at = kinds.iter().position(|k| k == "attempt_resolved").unwrap();
    assert!(unknown_at < settled_at, "{kinds:?}");
    assert_eq!(events[settled_at]["detail"]["note"], "settle_unknown_after");
}

async fn cancel_asks_the_provider_to_cancel_the_running_task(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "long",
        Behaviour {
            hang_after_ack: true,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |_| {}).await;
    let id = id_of(&app.create("long", &chat("long")).await);
    app.wait_attempts(&id, WITHIN, |a| a[0]["state"] == "running")
        .await;
    let (status, job) = post(&app, &format!("/v1/jobs/{id}/cancel")).await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["state"], "cancelled");
    assert!(job.get("poll_after_ms").is_none());
    let attempts = app
        .wait_attempts(&id, WITHIN, |a| a[0]["state"] == "cancelled")
        .await;
    assert_eq!(attempts.len(), 1);
    // The upstream cancel is sent beside the answer, so it may land a little after it.
    Fakes::wait_submissions(&fakes.primary, WITHIN, |seen| seen.cancels > 0).await;
    // The worker following the task learns of the cancel at its next lease heartbeat (a
    // third of the test's 2 s lease) and stops; it must not ask a second time, since the
    // cancelling node read the task id from the attempt and asked already. One lease gives
    // the heartbeat time to run.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        fakes.primary.submissions().cancels,
        1,
        "the upstream was asked to cancel"
    );
    // Cancelling again answers the same; cancelling a finished job is refused.
    let (status, again) = post(&app, &format!("/v1/jobs/{id}/cancel")).await;
    assert_eq!((status, again["state"].as_str()), (200, Some("cancelled")));
    let done = id_of(&app.create("done", &chat("done")).await);
    app.wait_job(&done, WITHIN, |j| j["state"] == "succeeded")
        .await;
    let (status, problem) = post(&app, &format!("/v1/jobs/{done}/cancel")).await;
    assert_eq!(status, 409);
    assert_eq!(problem["type"], "https://onejob.dev/problems/invalid-state");
    let kinds = kinds_of(&app.events(&id).await);
    assert!(kinds.contains(&"cancelled".to_owned()), "{kinds:?}");
}

async fn cancel_drops_a_chat_request_in_flight_and_ends_it_cancelled(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    // The answer would come long after the cancellation.
    fakes.primary.add_rule(rule(
        "late",
        Behaviour {
            run_ms: 8_000,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |config| {
        chat_api(&fakes)(config);
        config.kinds[0].attempt_timeout = Duration::from_secs(15);
    })
    .await;
    let body = json!({"kind": "chat.completion", "params": {"prompt": "late"}});
    let id = id_of(&app.create("late", &body).await);
    app.wait_attempts(&id, WITHIN, |a| a[0]["state"] == "running")
        .await;
    let (status, _) = post(&app, &format!("/v1/jobs/{id}/cancel")).await;
    assert_eq!(status, 200);
    // The worker learns of the cancellation at its next heartbeat and drops the request.
    let attempts = app
        .wait_attempts(&id, WITHIN, |a| a[0]["state"] == "cancelled")
        .await;
    assert_eq!(attempts.len(), 1);
    let job = app.job(&id).await;
    assert_eq!(job["state"], "cancelled");
    assert!(job.get("result").is_none(), "{job}");
    let events = app.events(&id).await;
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "attempt_resolved" && e["detail"]["outcome"] == "cancelled"),
        "{events:?}"
    );
    assert!(!events.iter().any(|e| e["kind"] == "race_lost"));
}

async fn retry_recovers_a_failed_job_on_the_same_job(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(once(
        "flaky",
        Behaviour {
            outcome: Outcome::Fail,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |c| c.kinds[0].max_attempts = 1).await;
    let id = id_of(&app.create("flaky", &chat("flaky")).await);
    let failed = app.wait_job(&id, WITHIN, |j| j["state"] == "failed").await;
    assert!(failed["error"].is_object());
    let (status, job) = post(&app, &format!("/v1/jobs/{id}/retry")).await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["id"], id.as_str(), "recovery is the same job");
    assert_eq!(job["state"], "pending");
    assert!(job.get("error").is_none());
    let job = app
        .wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    assert_eq!(job["attempts"], 2);
    let kinds = kinds_of(&app.events(&id).await);
    assert!(kinds.contains(&"recovered".to_owned()), "{kinds:?}");
    let keys = |fake: &onejob_fake::FakeServer| {
        fake.submissions()
            .requests
            .iter()
            .map(|r| r.idempotency_key.clone())
            .collect::<Vec<_>>()
    };
    // The recovery's attempt fails over to the (certified) backup.
    assert_eq!(keys(&fakes.primary), [Some(format!("onejob:{id}"))]);
    assert_eq!(
        keys(&fakes.backup).last().unwrap(),
        &Some(format!("onejob:{id}"))
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM jobs").await, 1);
}

/// A failed job is no dead end: its `error` says how to run it again (the retry path, with
/// its own id) and that a different request needs a new key, in the view read by id, in
/// the replay of its key, and that path works as written.
async fn a_failed_jobs_error_names_the_retry_and_a_new_key(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(once(
        "refused",
        Behaviour {
            http_status: Some(400),
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |c| c.kinds[0].max_attempts = 1).await;
    let id = id_of(&app.create("refused", &chat("refused")).await);
    let failed = app.wait_job(&id, WITHIN, |j| j["state"] == "failed").await;
    let retry = format!("POST /v1/jobs/{id}/retry");
    let said = |job: &Value| job["error"]["hint"].as_str().unwrap_or_default().to_owned();
    assert!(said(&failed).contains(&retry), "{failed}");
    assert!(said(&failed).contains("new Idempotency-Key"), "{failed}");
    assert_eq!(
        failed["error"]["message"], "no attempt succeeded",
        "{failed}"
    );
    // The same submission again replays the failed job, hint included.
    let replay = app
        .submit("refused", &chat("refused"))
        .send()
        .await
        .unwrap();
    let (status, replayed) = crate::helpers::json(replay).await;
    assert_eq!(status, 200, "{replayed}");
    assert!(said(&replayed).contains(&retry), "{replayed}");
    // The hint's call, as written, recovers the job.
    let path = retry.trim_start_matches("POST ");
    let (status, job) = post(&app, path).await;
    assert_eq!(status, 200, "{job}");
    app.wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
}

async fn retry_refuses_every_state_but_failed(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "stuck",
        Behaviour {
            hang_after_ack: true,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |c| {
        c.kinds[0].attempt_timeout = Duration::from_millis(300)
    })
    .await;
    let succeeded = id_of(&app.create("ok", &chat("ok")).await);
    app.wait_job(&succeeded, WITHIN, |j| j["state"] == "succeeded")
        .await;
    let unknown = id_of(&app.create("stuck", &chat("stuck")).await);
    app.wait_job(&unknown, WITHIN, |j| j["state"] == "unknown")
        .await;
    for id in [&succeeded, &unknown] {
        let (status, problem) = post(&app, &format!("/v1/jobs/{id}/retry")).await;
        assert_eq!(status, 409, "{problem}");
        assert_eq!(problem["type"], "https://onejob.dev/problems/invalid-state");
    }
    let (status, _) = post(&app, &format!("/v1/jobs/{}/retry", uuid::Uuid::now_v7())).await;
    assert_eq!(status, 404);
    // Pending and running: a job held by a stopped-looking worker is simply pending here.
    let api_only = TestApp::spawn(&db).await;
    let pending = id_of(&api_only.create("later", &chat("later")).await);
    let (status, _) = post(&api_only, &format!("/v1/jobs/{pending}/retry")).await;
    assert!(status == 409, "pending or already running: {status}");
}

async fn failover_is_refused_to_an_uncertified_provider_until_verified(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let empty = Behaviour {
        outcome: Outcome::MissingArtifact,
        ..Default::default()
    };
    fakes.primary.add_rule(once("first", empty.clone()));
    let app = TestApp::running_uncertified(&db, &fakes, |_| {}).await;
    let first = id_of(&app.create("first", &chat("first")).await);
    app.wait_job(&first, WITHIN, |j| j["state"] == "succeeded")
        .await;
    let attempts = app.attempts(&first).await;
    let providers: Vec<&str> = attempts
        .iter()
        .map(|a| a["provider"].as_str().unwrap())
        .collect();
    assert_eq!(providers, ["fake", "fake"], "it stayed on its primary");
    let events = app.events(&first).await;
    let refused = events
        .iter()
        .find(|e| e["kind"] == "failover_refused")
        .unwrap();
    assert_eq!(refused["detail"]["provider"], "fake-backup");
    assert!(
        refused["detail"]["reason"]
            .as_str()
            .unwrap()
            .contains("no valid certificate")
    );
    assert_eq!(fakes.backup.submissions().total, 0);

    assert!(app.certify("fake-backup", "chat.completion").await);
    fakes.primary.add_rule(once("second", empty));
    let second = id_of(&app.create("second", &chat("second")).await);
    app.wait_job(&second, WITHIN, |j| j["state"] == "succeeded")
        .await;
    let attempts = app.attempts(&second).await;
    assert_eq!(
        attempts[1]["provider"], "fake-backup",
        "verified: failover allowed"
    );
    let kinds = kinds_of(&app.events(&second).await);
    assert!(
        kinds.contains(&"failover".to_owned()) && !kinds.contains(&"failover_refused".to_owned())
    );
}

async fn a_changed_template_voids_the_certificate(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let mut app = TestApp::running(&db, &fakes, |_| {}).await;
    let listed = app.certificates().await;
    let valid: Vec<&Value> = listed.iter().filter(|c| c["valid"] == true).collect();
    assert_eq!(valid.len(), 2, "{listed:?}");

    // The same database, redeployed with the kind's prompt template changed: the
    // certificate no longer holds.
    app.stop_worker().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("chat.jinja"),
        "Answer briefly: {{ prompt }}",
    )
    .unwrap();
    let changed = TestApp::running_uncertified(&db, &fakes, |config| {
        config.base_dir = dir.path().to_owned();
        config.kinds[0].template = Some("chat.jinja".into());
    })
    .await;
    let listed = changed.certificates().await;
    let chat_certificate = listed
        .iter()
        .find(|c| c["kind"] == "chat.completion")
        .unwrap()
        .clone();
    assert_eq!(chat_certificate["passed"], true);
    assert_eq!(chat_certificate["valid"], false);
    fakes.primary.add_rule(once(
        "voided",
        Behaviour {
            outcome: Outcome::Fail,
            ..Default::default()
        },
    ));
    let id = id_of(&changed.create("voided", &chat("voided")).await);
    changed
        .wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    let attempts = changed.attempts(&id).await;
    assert!(
        attempts.iter().all(|a| a["provider"] == "fake"),
        "{attempts:?}"
    );
    let kinds = kinds_of(&changed.events(&id).await);
    assert!(kinds.contains(&"failover_refused".to_owned()), "{kinds:?}");
}

async fn a_hedge_goes_only_to_a_certified_provider(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "hedge",
        Behaviour {
            run_ms: 800,
            ..Default::default()
        },
    ));
    let app = TestApp::running_uncertified(&db, &fakes, |c| {
        c.kinds[0].hedge_after = Some(Duration::from_millis(100))
    })
    .await;
    let id = id_of(&app.create("hedge", &chat("hedge")).await);
    app.wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    assert_eq!(
        app.attempts(&id).await.len(),
        1,
        "no hedge to an uncertified provider"
    );
    let events = app.events(&id).await;
    let refused = events
        .iter()
        .find(|e| e["kind"] == "failover_refused")
        .unwrap();
    assert_eq!(refused["detail"]["for"], "hedge");
    assert_eq!(fakes.backup.submissions().total, 0);
}

async fn a_failing_reverification_revokes_the_certificate(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |_| {}).await;
    // The backup starts drifting; verifying it again fails, and the earlier pass no longer
    // certifies it.
    fakes.backup.add_rule(rule(
        "fox",
        Behaviour {
            outcome: Outcome::DriftedKeys,
            ..Default::default()
        },
    ));
    assert!(!app.certify("fake-backup", "chat.completion").await);
    let listed = app.certificates().await;
    let chat_runs: Vec<(bool, bool)> = listed
        .iter()
        .filter(|c| c["kind"] == "chat.completion")
        .map(|c| {
            (
                c["passed"].as_bool().unwrap(),
                c["valid"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(chat_runs, [(false, false), (true, false)], "newest first");
    fakes.primary.add_rule(once(
        "revoked",
        Behaviour {
            outcome: Outcome::Fail,
            ..Default::default()
        },
    ));
    let id = id_of(&app.create("revoked", &chat("revoked")).await);
    app.wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    let attempts = app.attempts(&id).await;
    assert!(
        attempts.iter().all(|a| a["provider"] == "fake"),
        "{attempts:?}"
    );
}

async fn changed_provider_settings_void_the_certificate(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let mut app = TestApp::running(&db, &fakes, |_| {}).await;
    app.stop_worker().await;
    // Redeployed with what is sent to the backup changed: its certificate no longer holds.
    let changed = TestApp::running_uncertified(&db, &fakes, |config| {
        let backup = config
            .providers
            .iter_mut()
            .find(|p| p.name == "fake-backup")
            .unwrap();
        backup.max_tokens = Some(16);
    })
    .await;
    let listed = changed.certificates().await;
    assert!(listed.iter().all(|c| c["valid"] == false), "{listed:?}");
    fakes.primary.add_rule(once(
        "resent",
        Behaviour {
            outcome: Outcome::Fail,
            ..Default::default()
        },
    ));
    let id = id_of(&changed.create("resent", &chat("resent")).await);
    changed
        .wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    let attempts = changed.attempts(&id).await;
    assert!(
        attempts.iter().all(|a| a["provider"] == "fake"),
        "{attempts:?}"
    );
}
