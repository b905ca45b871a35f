//! Unattended correctness (issue 15), black-box through HTTP on both stores, against the
//! fake provider and small scripted upstreams as real servers: unknown attempts resolved by
//! proof (lookup by key, or a re-send under the same key to a provider certified to
//! deduplicate), the upstream key kept when nothing proved a failure, ownership checked at
//! the acknowledgement, cancellation reaching attempts still being sent, and every provider
//! call bounded in time and size.

use std::{net::SocketAddr, time::Duration};

use axum::{Router, http::StatusCode, response::IntoResponse, routing::get, routing::post};
use onejob::{
    config::{Adapter, Config, ProviderConfig},
    store::{AttemptStart, Intake, StartOutcome, postgres::PgStore},
};
use onejob_fake::{Behaviour, FakeServer, Outcome, Rule};
use serde_json::{Value, json};
use time::{OffsetDateTime, format_description::well_known::Rfc3339};
use uuid::Uuid;

use crate::helpers::{
    Backend, Fakes, TestApp, TestDatabase, chat, create_key, json, new_job,
    postgres_and_sqlite_tests,
};

postgres_and_sqlite_tests!(
    never_received_is_believed_late_and_keeps_the_upstream_key,
    a_lost_acknowledgement_is_found_by_lookup_url,
    a_certified_deduplicating_task_api_gets_the_attempt_resent,
    without_lookup_or_certified_dedupe_the_attempt_stays_unknown,
    a_certified_caching_chat_server_gets_the_attempt_resent,
    two_nodes_never_resend_one_attempt_at_once,
    verify_records_the_lookup_and_whether_the_provider_deduplicates,
    an_acknowledgement_after_a_rescue_keeps_the_task_id_for_the_reconciler,
    cancel_while_starting_cancels_the_task_upstream,
    a_blackholed_provider_fails_over_instead_of_ending_unknown,
    a_hung_status_endpoint_ends_unknown_and_shutdown_still_completes,
    a_hung_provider_does_not_hold_up_reconciling_another,
    an_answer_larger_than_max_response_bytes_is_a_definite_failure,
    a_nul_in_an_upstream_error_is_still_a_recorded_failure,
    an_output_without_an_artifact_is_no_success,
    owners_see_no_internals_operators_do,
    lowering_max_attempts_settles_the_job_failed,
);

const WITHIN: Duration = Duration::from_secs(30);

fn id_of(job: &Value) -> String {
    job["id"].as_str().unwrap().to_owned()
}

fn rule(matches: &str, behaviour: Behaviour) -> Rule {
    Rule {
        matches: Some(matches.into()),
        times: None,
        behaviour,
    }
}

/// An `async-task` provider on a fake server's task API, forwarding `Idempotency-Key`, with
/// or without `lookup_url`.
fn task_api(name: &str, fake: &FakeServer, lookup: bool) -> ProviderConfig {
    let base = fake.base_url();
    let mut provider = ProviderConfig::new(name, Adapter::AsyncTask);
    provider.submit_url = Some(format!("{base}/v1/tasks"));
    provider.status_url = Some(format!("{base}/v1/tasks/{{task_id}}"));
    provider.cancel_url = Some(format!("{base}/v1/tasks/{{task_id}}/cancel"));
    provider.lookup_url = lookup.then(|| format!("{base}/v1/tasks?idempotency_key={{key}}"));
    provider.task_id_pointer = Some("/task_id".into());
    provider.status_pointer = Some("/status".into());
    provider.result_pointer = Some("/result".into());
    provider.succeeded = vec!["succeeded".into()];
    provider.failed = vec!["failed".into(), "cancelled".into()];
    provider.idempotency_header = Some("Idempotency-Key".into());
    provider
}

/// An `openai-chat` provider at `base` (`http://…`, without `/v1`).
fn chat_provider(name: &str, base: &str) -> ProviderConfig {
    let mut provider = ProviderConfig::new(name, Adapter::OpenaiChat);
    provider.base_url = Some(format!("{base}/v1"));
    provider.model = Some("fake-model".into());
    provider.idempotency_header = Some("Idempotency-Key".into());
    provider
}

/// Sends `chat.completion` only to `provider` (added to the config), with `timeout`.
fn only(provider: ProviderConfig, timeout: Duration) -> impl FnOnce(&mut Config) {
    move |config| {
        config.kinds[0].providers = vec![provider.name.clone()];
        config.kinds[0].attempt_timeout = timeout;
        config.providers.push(provider);
    }
}

/// Serves `router` on a loopback port: a scripted upstream.
async fn serve(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// An async-task provider `hung` whose submit answers task `t-1` at once and whose status
/// endpoint never answers, with a `request_timeout` far beyond any attempt's deadline: only
/// racing the deadline (and the reconciler's item budget) bounds a wait for it.
async fn hung_status_upstream(fakes: &Fakes) -> ProviderConfig {
    let upstream = serve(
        Router::new()
            .route(
                "/tasks",
                post(|| async { axum::Json(json!({"task_id": "t-1"})) }),
            )
            .route("/tasks/{id}", get(std::future::pending::<String>)),
    )
    .await;
    let mut hung = task_api("hung", &fakes.primary, false);
    hung.submit_url = Some(format!("http://{upstream}/tasks"));
    hung.status_url = Some(format!("http://{upstream}/tasks/{{task_id}}"));
    hung.cancel_url = None;
    hung.request_timeout = Duration::from_secs(600);
    hung
}

/// A port whose accept queue is full: connections to it are never accepted (the SYN is
/// dropped), as to a blackholed host. Keep the returned values alive.
fn blackhole() -> (SocketAddr, tokio::net::TcpListener, std::net::TcpStream) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let filler = std::net::TcpStream::connect(addr).unwrap();
    (addr, listener, filler)
}

fn at(text: &Value) -> OffsetDateTime {
    OffsetDateTime::parse(text.as_str().unwrap(), &Rfc3339).unwrap()
}

fn kinds_of(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["kind"].as_str().unwrap()).collect()
}

/// A job whose attempt was started by a worker that then died before sending it: the job
/// exists, its attempt is `starting`, leased to `dead-worker` for a moment, and nothing
/// reached the provider.
async fn job_whose_worker_died(db: &TestDatabase, key: &str, prompt: &str) -> Uuid {
    let store = db.open_store().await;
    let Intake::Created(job) = store.create_or_replay(new_job(key, prompt)).await.unwrap() else {
        panic!("a new key");
    };
    let start = AttemptStart {
        job_id: job.id,
        expected_attempts: 0,
        provider: "fake".into(),
        hedge: false,
        worker: "dead-worker".into(),
        lease: Duration::from_millis(300),
        timeout: Duration::from_millis(300),
        max_attempts: 3,
        upstream_key: format!("onejob:{}", job.id),
    };
    assert!(matches!(
        store.start_attempt(&start).await.unwrap(),
        StartOutcome::Started(_)
    ));
    job.id
}

/// The path to two executions: a lookup's "never received" right after the
/// timeout failed the attempt, and the retry went out under `onejob:<job>:2`, so a late copy
/// of the first request ran too. Now "never received" is believed only once no copy can be
/// in flight, and the next attempt reuses the key: the late copy deduplicates upstream.
async fn never_received_is_believed_late_and_keeps_the_upstream_key(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let job_id = job_whose_worker_died(&db, "dead", "a fox").await;
    let app = TestApp::running(&db, &fakes, |config| {
        config.kinds[0].providers = vec!["fake".into()];
    })
    .await;
    let id = job_id.to_string();
    let job = app
        .wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    let attempts = app.attempts(&id).await;
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0]["state"], "failed");
    // Believed only after the deadline and the in-flight margin.
    let events = app.events(&id).await;
    let never = events
        .iter()
        .find(|e| e["kind"] == "attempt_resolved" && e["attempt_id"] == attempts[0]["id"])
        .unwrap();
    assert_eq!(never["actor"], "reconciler");
    let margin = time::Duration::seconds(5);
    assert!(
        at(&never["at"]) >= at(&attempts[0]["deadline_at"]) + margin,
        "never-received believed too early: {never} vs {}",
        attempts[0]["deadline_at"]
    );
    // The retry went out under the same key...
    let stored = app.store.job_attempts(job_id).await.unwrap();
    assert_eq!(stored[0].upstream_key, stored[1].upstream_key);
    assert_eq!(
        stored[1].upstream_key.as_deref(),
        Some(&*format!("onejob:{id}"))
    );
    // ...so a late copy of the first request is answered from the upstream's record.
    let late = reqwest::Client::new()
        .post(format!("{}/v1/tasks", fakes.primary.base_url()))
        .header("Idempotency-Key", format!("onejob:{id}"))
        .json(&json!({"kind": "chat.completion", "params": {"prompt": "a fox"}}))
        .send()
        .await
        .unwrap();
    assert!(late.status().is_success());
    let seen = fakes.primary.submissions();
    assert_eq!(seen.total, 1, "one execution: {seen:?}");
    assert_eq!(seen.idempotent_replays, 1);
    assert_eq!(job["result"], json!({"text": "fake answer: a fox"}));
}

/// A task API whose answer to the submit was lost: `lookup_url` finds the task by the
/// forwarded key, and it is followed to its result.
async fn a_lost_acknowledgement_is_found_by_lookup_url(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "lost ack",
        Behaviour {
            hang_before_ack: true,
            ..Default::default()
        },
    ));
    let tasks = task_api("tasks", &fakes.primary, true);
    let app = TestApp::running(&db, &fakes, only(tasks, Duration::from_millis(500))).await;
    let id = id_of(&app.create("lost-ack", &chat("lost ack")).await);
    app.wait_attempts(&id, WITHIN, |a| a[0]["state"] == "unknown")
        .await;
    app.wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    let attempts = app.attempts(&id).await;
    assert_eq!(
        attempts.len(),
        1,
        "resolved by proof, not by a second attempt"
    );
    let seen = fakes.primary.submissions();
    assert_eq!(seen.total, 1);
    assert_eq!(
        attempts[0]["task_id"].as_str(),
        seen.requests[0].task_id.as_deref()
    );
    let events = app.events(&id).await;
    let won = events.iter().find(|e| e["kind"] == "won").unwrap();
    assert_eq!(won["actor"], "reconciler");
}

/// A task API with no lookup, certified to deduplicate by key: the unknown attempt is
/// re-sent under its key, the upstream answers the task it already has, nothing runs twice.
async fn a_certified_deduplicating_task_api_gets_the_attempt_resent(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "lost ack",
        Behaviour {
            hang_before_ack: true,
            ..Default::default()
        },
    ));
    let tasks = task_api("tasks", &fakes.primary, false);
    let app = TestApp::running(&db, &fakes, only(tasks, Duration::from_millis(500))).await;
    let report = app.verify("tasks", "chat.completion").await;
    assert!(report.passed, "{report:?}");
    let dedupe = report.idempotency.expect("a forwarded key is checked");
    assert!(dedupe.deduplicated, "{dedupe:?}");
    let before = fakes.primary.submissions();
    let id = id_of(&app.create("lost-ack", &chat("lost ack")).await);
    app.wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    let attempts = app.attempts(&id).await;
    assert_eq!(attempts.len(), 1);
    let events = app.events(&id).await;
    assert!(kinds_of(&events).contains(&"resent"), "{events:?}");
    let seen = fakes.primary.submissions();
    assert_eq!(seen.total - before.total, 1, "one execution");
    assert_eq!(
        seen.idempotent_replays - before.idempotent_replays,
        1,
        "the re-send was a replay"
    );
}

/// With neither a lookup nor a certified deduplication, nothing can prove what happened:
/// the attempt stays unknown (for an operator, or `settle_unknown_after`), and nothing is
/// sent again.
async fn without_lookup_or_certified_dedupe_the_attempt_stays_unknown(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "lost ack",
        Behaviour {
            hang_before_ack: true,
            ..Default::default()
        },
    ));
    let tasks = task_api("tasks", &fakes.primary, false);
    let app = TestApp::running(&db, &fakes, only(tasks, Duration::from_millis(500))).await;
    let id = id_of(&app.create("lost-ack", &chat("lost ack")).await);
    app.wait_attempts(&id, WITHIN, |a| a[0]["state"] == "unknown")
        .await;
    // Past the deadline, the in-flight margin and the lease: proof would have come by now.
    tokio::time::sleep(Duration::from_secs(9)).await;
    let attempts = app.attempts(&id).await;
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["state"], "unknown");
    assert!(!kinds_of(&app.events(&id).await).contains(&"resent"));
    assert_eq!(fakes.primary.submissions().total, 1);
}

/// An OpenAI-compatible server that caches answers by key, certified so: a chat attempt
/// whose answer came too late is re-sent under its key and gets the cached answer.
async fn a_certified_caching_chat_server_gets_the_attempt_resent(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "slow answer",
        Behaviour {
            run_ms: 1_500,
            ..Default::default()
        },
    ));
    let provider = chat_provider("chat", &fakes.primary.base_url());
    let app = TestApp::running(&db, &fakes, only(provider, Duration::from_millis(500))).await;
    let report = app.verify("chat", "chat.completion").await;
    assert!(report.passed, "{report:?}");
    assert!(
        report.idempotency.as_ref().unwrap().deduplicated,
        "{report:?}"
    );
    assert!(report.lookup.is_none(), "a chat API has no lookup");
    let before = fakes.primary.submissions();
    let id = id_of(&app.create("slow", &chat("slow answer")).await);
    app.wait_attempts(&id, WITHIN, |a| a[0]["state"] == "unknown")
        .await;
    let job = app
        .wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    assert_eq!(job["result"], json!({"text": "fake answer: slow answer"}));
    assert_eq!(app.attempts(&id).await.len(), 1);
    let events = app.events(&id).await;
    assert!(kinds_of(&events).contains(&"resent"), "{events:?}");
    let seen = fakes.primary.submissions();
    assert_eq!(seen.total - before.total, 1, "one generation");
}

/// Re-sends are exclusive across nodes: with two onejob nodes reconciling one database, an
/// attempt whose re-send is in flight (the upstream still generating, the replay following
/// the work live) is claimed by neither node again until it ends, so it is re-sent once.
/// Before, a claim only pushed the next check back by its backoff (400 ms at the re-send
/// here), and the other node re-sent the same attempt beside the first re-send.
///
/// Timeline: the generation takes 11 s; the attempt (4 s timeout) becomes unknown at 4 s; no
/// copy of it can be in flight from 9 s (the deadline plus 5 s), when it is re-sent under
/// its key; the re-send follows the generation live and gets its answer at 11 s, well within
/// its own 4 s.
async fn two_nodes_never_resend_one_attempt_at_once(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "long generation",
        Behaviour {
            run_ms: 11_000,
            ..Default::default()
        },
    ));
    let node = || {
        let provider = chat_provider("chat", &fakes.primary.base_url());
        let only = only(provider, Duration::from_secs(4));
        move |config: &mut Config| {
            only(config);
            config.worker.lease = Duration::from_secs(2);
        }
    };
    let app = TestApp::running(&db, &fakes, node()).await;
    let report = app.verify("chat", "chat.completion").await;
    assert!(report.passed, "{report:?}");
    let other = TestApp::running(&db, &fakes, node()).await;
    let before = fakes.primary.submissions();
    let id = id_of(&app.create("long", &chat("long generation")).await);
    let job = app
        .wait_job(&id, Duration::from_secs(60), |j| j["state"] == "succeeded")
        .await;
    assert_eq!(
        job["result"],
        json!({"text": "fake answer: long generation"})
    );
    let resent = kinds_of(&app.events(&id).await)
        .into_iter()
        .filter(|kind| *kind == "resent")
        .count();
    assert_eq!(resent, 1, "re-sent beside a re-send in flight");
    let seen = fakes.primary.submissions();
    assert_eq!(seen.total - before.total, 1, "one generation");
    assert_eq!(seen.idempotent_replays - before.idempotent_replays, 1);
    drop(other);
}

/// `onejob verify` checks the lookup on the case it just sent (and that a key never sent is
/// not found), and records whether the upstream deduplicated a second send under one key.
async fn verify_records_the_lookup_and_whether_the_provider_deduplicates(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let base = fakes.primary.base_url();
    let mut broken = task_api("broken-lookup", &fakes.primary, true);
    // Answers 404 for every key: the reconciler would wrongly believe "never received".
    broken.lookup_url = Some(format!("{base}/v1/nowhere/{{key}}"));
    let mut other_header = chat_provider("other-header", &base);
    // The fake deduplicates by `Idempotency-Key` only: under another header it runs twice.
    other_header.idempotency_header = Some("X-Request-Key".into());
    let app = TestApp::running(&db, &fakes, |config| {
        config
            .providers
            .push(task_api("tasks", &fakes.primary, true));
        config.providers.push(broken);
        config.providers.push(other_header);
    })
    .await;
    let good = app.verify("tasks", "chat.completion").await;
    assert!(good.passed, "{good:?}");
    assert!(good.lookup.as_ref().unwrap().passed);
    assert!(good.idempotency.as_ref().unwrap().deduplicated);
    let bad = app.verify("broken-lookup", "chat.completion").await;
    assert!(
        !bad.passed,
        "a lookup that finds nothing fails the run: {bad:?}"
    );
    let problems = &bad.lookup.as_ref().unwrap().problems;
    assert!(problems[0].contains("found nothing"), "{problems:?}");
    let twice = app.verify("other-header", "chat.completion").await;
    assert!(twice.passed, "not deduplicating fails nothing: {twice:?}");
    let check = twice.idempotency.unwrap();
    assert!(!check.deduplicated, "{check:?}");
    assert_eq!(check.header, "X-Request-Key");
    // The certificate carries the proof (or its absence) for the reconciler.
    let certificates = app.certificates().await;
    let proof = |provider: &str| {
        certificates
            .iter()
            .find(|c| c["provider"] == provider)
            .map(|c| c["report"]["idempotency"]["deduplicated"].clone())
    };
    assert_eq!(proof("tasks"), Some(json!(true)));
    assert_eq!(proof("other-header"), Some(json!(false)));
}

/// The acknowledgement found the attempt no longer `starting` (another node rescued it as
/// unknown while its submit was slow): the task id is stored all the same, the worker
/// abandons the attempt, and the reconciler resolves it by that task id. The provider has no
/// lookup and no certificate: without the stored id nothing could prove what happened.
async fn an_acknowledgement_after_a_rescue_keeps_the_task_id_for_the_reconciler(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "slow ack",
        Behaviour {
            ack_delay_ms: 1_500,
            ..Default::default()
        },
    ));
    let tasks = task_api("tasks", &fakes.primary, false);
    let app = TestApp::running(&db, &fakes, only(tasks, Duration::from_secs(20))).await;
    let id = id_of(&app.create("slow-ack", &chat("slow ack")).await);
    app.wait_attempts(&id, WITHIN, |a| a[0]["state"] == "starting")
        .await;
    // What another node's rescuer would do to it.
    let rescue = db.dialect(
        "UPDATE attempts SET state = 'unknown', unknown_since = now(), reconcile_at = now()",
        "UPDATE attempts SET state = 'unknown', \
         unknown_since = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), \
         reconcile_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
    );
    assert_eq!(db.exec(rescue).await.unwrap(), 1);
    app.wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    let attempts = app.attempts(&id).await;
    assert_eq!(attempts.len(), 1);
    let seen = fakes.primary.submissions();
    assert_eq!(seen.total, 1);
    assert_eq!(
        attempts[0]["task_id"].as_str(),
        seen.requests[0].task_id.as_deref(),
        "the task id was stored although the attempt was no longer starting"
    );
    let events = app.events(&id).await;
    let won = events.iter().find(|e| e["kind"] == "won").unwrap();
    assert_eq!(won["actor"], "reconciler", "the worker abandoned it: {won}");
}

/// A job cancelled while its attempt is still being sent: the acknowledgement sees the
/// cancellation, the task is cancelled upstream and the attempt ends `cancelled`.
async fn cancel_while_starting_cancels_the_task_upstream(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "slow ack",
        Behaviour {
            ack_delay_ms: 1_500,
            run_ms: 200,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |config| {
        config.kinds[0].providers = vec!["fake".into()];
    })
    .await;
    let id = id_of(&app.create("slow-ack", &chat("slow ack")).await);
    app.wait_attempts(&id, WITHIN, |a| a[0]["state"] == "starting")
        .await;
    // The request has reached the provider and waits for its acknowledgement; a cancel
    // before that point is stopped by the send fence and never reaches it at all.
    Fakes::wait_submissions(&fakes.primary, WITHIN, |seen| seen.total == 1).await;
    let (status, job) = json(
        app.client
            .post(app.url(&format!("/v1/jobs/{id}/cancel")))
            .bearer_auth(&app.token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{job}");
    let attempts = app
        .wait_attempts(&id, WITHIN, |a| a[0]["state"] == "cancelled")
        .await;
    let seen = Fakes::wait_submissions(&fakes.primary, WITHIN, |seen| seen.cancels > 0).await;
    assert_eq!(seen.cancels, 1, "the task was cancelled upstream: {seen:?}");
    assert_eq!(
        attempts[0]["task_id"].as_str(),
        seen.requests[0].task_id.as_deref()
    );
    let job = app.job(&id).await;
    assert_eq!(job["state"], "cancelled");
    assert!(job.get("result").is_none());
}

/// A provider that never accepts the connection: the connect timeout (below the attempt
/// timeout) makes it a definite failure, so the job fails over instead of ending unknown.
async fn a_blackholed_provider_fails_over_instead_of_ending_unknown(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let (addr, _listener, _filler) = blackhole();
    let mut blackholed = task_api("blackholed", &fakes.primary, false);
    blackholed.submit_url = Some(format!("http://{addr}/v1/tasks"));
    let app = TestApp::running(&db, &fakes, |config| {
        config.kinds[0].providers = vec!["blackholed".into(), "fake-backup".into()];
        config.kinds[0].attempt_timeout = Duration::from_secs(3);
        config.providers.push(blackholed);
    })
    .await;
    let id = id_of(&app.create("blackholed", &chat("into the void")).await);
    app.wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    let attempts = app.attempts(&id).await;
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0]["state"], "failed");
    assert_eq!(
        attempts[0]["error"]["message"],
        "the provider could not be reached"
    );
    assert_eq!(attempts[1]["provider"], "fake-backup");
}

/// An upstream whose submit answers a task id at once but whose status endpoint never
/// answers: the attempt ends unknown at its deadline (each status call is raced against it)
/// and the worker still shuts down.
async fn a_hung_status_endpoint_ends_unknown_and_shutdown_still_completes(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let hung = hung_status_upstream(&fakes).await;
    let mut app = TestApp::running(&db, &fakes, only(hung, Duration::from_secs(1))).await;
    let id = id_of(&app.create("hung", &chat("hung status")).await);
    let attempts = app
        .wait_attempts(&id, WITHIN, |a| a[0]["state"] == "unknown")
        .await;
    assert_eq!(attempts[0]["task_id"], "t-1");
    tokio::time::timeout(Duration::from_secs(60), app.stop_worker())
        .await
        .expect("the worker shuts down although a status call hangs");
}

/// The reconciler asks several providers at once, each within a time budget: one hung
/// status endpoint does not keep another unknown attempt from being resolved.
async fn a_hung_provider_does_not_hold_up_reconciling_another(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let hung = hung_status_upstream(&fakes).await;
    fakes.primary.add_rule(rule(
        "slow",
        Behaviour {
            run_ms: 3_000,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |config| {
        // chat.completion goes to the hung upstream; image.generate to the fake.
        config.kinds[0].providers = vec!["hung".into()];
        config.kinds[0].attempt_timeout = Duration::from_millis(500);
        config.kinds[1].providers = vec!["fake".into()];
        config.kinds[1].attempt_timeout = Duration::from_millis(500);
        config.providers.push(hung);
    })
    .await;
    let hung_job = id_of(&app.create("hung", &chat("hung status")).await);
    app.wait_attempts(&hung_job, WITHIN, |a| a[0]["state"] == "unknown")
        .await;
    let image = json!({"kind": "image.generate", "params": {"prompt": "slow fox"}});
    let fine_job = id_of(&app.create("fine", &image).await);
    app.wait_attempts(&fine_job, WITHIN, |a| a[0]["state"] == "unknown")
        .await;
    app.wait_job(&fine_job, WITHIN, |j| j["state"] == "succeeded")
        .await;
    assert_eq!(app.attempts(&hung_job).await[0]["state"], "unknown");
}

/// An answer body beyond the provider's `max_response_bytes` is never read whole: the
/// attempt definitely failed (a synchronous answer, or a task's status) and fails over.
async fn an_answer_larger_than_max_response_bytes_is_a_definite_failure(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let huge = json!({"text": "x".repeat(100_000)});
    fakes.primary.add_rule(rule(
        "huge",
        Behaviour {
            output: Some(huge),
            ..Default::default()
        },
    ));
    let mut chat_api = chat_provider("chat", &fakes.primary.base_url());
    chat_api.max_response_bytes = 4_096;
    let mut tasks = task_api("tasks", &fakes.primary, true);
    tasks.max_response_bytes = 4_096;
    let app = TestApp::running(&db, &fakes, |config| {
        config.kinds[0].providers = vec!["chat".into(), "fake-backup".into()];
        config.kinds[1].providers = vec!["tasks".into(), "fake-backup".into()];
        config.providers.push(chat_api);
        config.providers.push(tasks);
    })
    .await;
    let chat_job = id_of(&app.create("huge-chat", &chat("huge")).await);
    let image = json!({"kind": "image.generate", "params": {"prompt": "huge"}});
    let task_job = id_of(&app.create("huge-task", &image).await);
    for id in [chat_job, task_job] {
        app.wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
            .await;
        let attempts = app.attempts(&id).await;
        assert_eq!(attempts[0]["state"], "failed", "{attempts:?}");
        assert_eq!(
            attempts[0]["error"]["message"],
            "the provider's answer is larger than 4096 bytes"
        );
        assert_eq!(attempts[1]["provider"], "fake-backup");
    }
}

/// An upstream error body with U+0000 (which PostgreSQL cannot store as is) is still a
/// definite, recorded failure that fails over, never an unrecorded one left unknown; and an
/// operator's reason with one is no 500.
async fn a_nul_in_an_upstream_error_is_still_a_recorded_failure(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let upstream = serve(Router::new().route(
        "/v1/chat/completions",
        post(|| async { (StatusCode::BAD_REQUEST, "bad \u{0} input").into_response() }),
    ))
    .await;
    fakes.primary.add_rule(rule(
        "silent",
        Behaviour {
            hang_after_ack: true,
            ..Default::default()
        },
    ));
    let nul = chat_provider("nul", &format!("http://{upstream}"));
    let silent = chat_provider("silent", &fakes.primary.base_url());
    let app = TestApp::running(&db, &fakes, |config| {
        config.kinds[0].providers = vec!["nul".into(), "fake-backup".into()];
        config.kinds[1].providers = vec!["silent".into()];
        config.kinds[1].attempt_timeout = Duration::from_millis(300);
        config.providers.push(nul);
        config.providers.push(silent);
    })
    .await;
    let id = id_of(&app.create("nul", &chat("nul")).await);
    app.wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    let attempts = app.operator_attempts(&id).await;
    assert_eq!(attempts[0]["state"], "failed");
    let internal = attempts[0]["error"]["internal"].as_str().unwrap();
    assert!(internal.contains("bad \u{FFFD} input"), "{internal}");
    // An operator's reason carrying U+0000 resolves an unknown attempt (no 500).
    let image = json!({"kind": "image.generate", "params": {"prompt": "silent"}});
    let unknown = id_of(&app.create("silent", &image).await);
    let attempts = app
        .wait_attempts(&unknown, WITHIN, |a| a[0]["state"] == "unknown")
        .await;
    let operator = create_key(&*app.store, "acme", "ops", true).await;
    let attempt = attempts[0]["id"].as_str().unwrap();
    let (status, body) = json(
        app.client
            .post(app.url(&format!("/v1/attempts/{attempt}/resolve")))
            .bearer_auth(&operator)
            .json(&json!({"outcome": "failed", "reason": "nul \u{0} here"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let events = app.events(&unknown).await;
    let resolved = events
        .iter()
        .find(|e| e["kind"] == "attempt_resolved")
        .unwrap();
    assert_eq!(resolved["detail"]["note"], "nul \u{FFFD} here");
}

/// A kind without an output schema still needs a real artifact: `{}`, `""`, `[]`, `false`
/// are failed attempts, not results.
async fn an_output_without_an_artifact_is_no_success(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let empties = [json!({}), json!(""), json!([]), json!(false)];
    for (n, empty) in empties.iter().enumerate() {
        fakes.primary.add_rule(rule(
            &format!("empty {n}"),
            Behaviour {
                output: Some(empty.clone()),
                ..Default::default()
            },
        ));
    }
    let app = TestApp::running_uncertified(&db, &fakes, |config| {
        let mut raw = config.kinds[0].clone();
        raw.name = "raw.echo".into();
        raw.output_schema = None;
        raw.contract.clear();
        raw.providers = vec!["fake".into()];
        raw.max_attempts = 1;
        config.kinds.push(raw);
    })
    .await;
    for n in 0..empties.len() {
        let body = json!({"kind": "raw.echo", "params": {"prompt": format!("empty {n}")}});
        let id = id_of(&app.create(&format!("empty-{n}"), &body).await);
        let job = app.wait_job(&id, WITHIN, |j| j["state"] == "failed").await;
        assert!(job.get("result").is_none(), "{job}");
        let attempts = app.attempts(&id).await;
        let message = attempts[0]["error"]["message"].as_str().unwrap();
        assert!(message.contains("no real artifact"), "{message}");
    }
    let body = json!({"kind": "raw.echo", "params": {"prompt": "a fox"}});
    let id = id_of(&app.create("real", &body).await);
    app.wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
}

/// A job's owner sees what happened, not onejob's internals: no worker `host:pid`, no
/// provider address, no raw upstream text. An operator key sees them.
async fn owners_see_no_internals_operators_do(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    // Nothing listens on port 1: connection refused, with the address in reqwest's error.
    let refused = chat_provider("refused", "http://127.0.0.1:1");
    let app = TestApp::running(&db, &fakes, |config| {
        config.kinds[0].providers = vec!["refused".into(), "fake-backup".into()];
        config.providers.push(refused);
    })
    .await;
    let id = id_of(&app.create("refused", &chat("refused")).await);
    app.wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    let owner = app.attempts(&id).await;
    assert!(owner[0].get("worker").is_none(), "{}", owner[0]);
    assert_eq!(
        owner[0]["error"],
        json!({"message": "the provider could not be reached"})
    );
    let events = app.events(&id).await;
    assert!(
        !serde_json::to_string(&events)
            .unwrap()
            .contains("127.0.0.1:1"),
        "{events:?}"
    );
    let operator = app.operator_attempts(&id).await;
    assert!(operator[0]["worker"].as_str().is_some(), "{}", operator[0]);
    let internal = operator[0]["error"]["internal"].as_str().unwrap();
    assert!(internal.contains("127.0.0.1:1"), "{internal}");
}

/// A job waiting for its next attempt when its kind's `max_attempts` is lowered below what
/// it already made is settled failed, with a reason, instead of waiting for ever.
async fn lowering_max_attempts_settles_the_job_failed(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "doomed",
        Behaviour {
            outcome: Outcome::Fail,
            ..Default::default()
        },
    ));
    let id = {
        let mut app = TestApp::running_uncertified(&db, &fakes, |config| {
            config.kinds[0].providers = vec!["fake".into()];
            config.kinds[0].retry_backoff = Duration::from_secs(3_600);
        })
        .await;
        let id = id_of(&app.create("doomed", &chat("doomed")).await);
        app.wait_attempts(&id, WITHIN, |a| a[0]["state"] == "failed")
            .await;
        app.stop_worker().await;
        // Due again now, as it would be once its backoff passed.
        let due = db.dialect(
            "UPDATE jobs SET dispatch_at = now()",
            "UPDATE jobs SET dispatch_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
        );
        db.exec(due).await.unwrap();
        id
    };
    let app = TestApp::running_uncertified(&db, &fakes, |config| {
        config.kinds[0].providers = vec!["fake".into()];
        config.kinds[0].max_attempts = 1;
    })
    .await;
    let job = app.wait_job(&id, WITHIN, |j| j["state"] == "failed").await;
    let reason = job["error"]["last_error"]["message"].as_str().unwrap();
    assert!(reason.contains("max_attempts"), "{reason}");
    assert_eq!(app.attempts(&id).await.len(), 1);
    assert!(kinds_of(&app.events(&id).await).contains(&"exhausted"));
}

/// Installs a switch that makes every `UPDATE` of `jobs` fail with a serialization failure
/// (SQLSTATE 40001, which onejob classifies as retryable) while the flag table holds a row: a
/// database refusing writes for a while, for real. Returns a store on the database, already
/// connected, to flip the switch with: connecting inside the timed window would eat into it
/// (a TLS handshake to the local server takes ~90 ms with sqlx 0.9). PostgreSQL only:
/// SQLite's retryable error is "busy", which onejob's 30 s busy timeout absorbs before it
/// ever reaches the worker.
async fn job_update_switch(db: &TestDatabase) -> PgStore {
    for statement in [
        "CREATE TABLE test_refuse_writes (on_ boolean)",
        "CREATE FUNCTION test_refuse_writes() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN IF EXISTS (SELECT 1 FROM test_refuse_writes) THEN \
         RAISE EXCEPTION 'test: writes refused' USING ERRCODE = '40001'; END IF; \
         RETURN NEW; END $$",
        "CREATE TRIGGER test_refuse_writes BEFORE UPDATE ON jobs \
         FOR EACH ROW EXECUTE FUNCTION test_refuse_writes()",
    ] {
        db.exec(statement).await.unwrap();
    }
    PgStore::connect(&db.url, &Default::default())
        .await
        .unwrap()
}

async fn refuse_job_updates(switch: &PgStore) {
    sqlx::query("INSERT INTO test_refuse_writes VALUES (true)")
        .execute(switch.pool())
        .await
        .unwrap();
}

async fn accept_job_updates(switch: &PgStore) {
    sqlx::query("DELETE FROM test_refuse_writes")
        .execute(switch.pool())
        .await
        .unwrap();
}

/// A chat job whose answer comes after `answer_ms`, with `timeout`, on PostgreSQL: the
/// database refuses job updates from the moment the attempt runs for `refused`, and the
/// answer must still become the job's result, once, with no second attempt.
async fn answer_survives_refused_writes(answer_ms: u64, timeout: Duration, refused: Duration) {
    let db = TestDatabase::create(Backend::Postgres).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(rule(
        "answer",
        Behaviour {
            run_ms: answer_ms,
            ..Default::default()
        },
    ));
    let provider = chat_provider("chat", &fakes.primary.base_url());
    let app = TestApp::running(&db, &fakes, only(provider, timeout)).await;
    let switch = job_update_switch(&db).await;
    let id = id_of(&app.create("answer", &chat("answer")).await);
    app.wait_attempts(&id, WITHIN, |a| a[0]["state"] == "running")
        .await;
    refuse_job_updates(&switch).await;
    tokio::time::sleep(refused).await;
    assert_eq!(
        app.job(&id).await["state"],
        "running",
        "nothing recorded yet"
    );
    accept_job_updates(&switch).await;
    let job = app
        .wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    assert_eq!(job["result"], json!({"text": "fake answer: answer"}));
    assert_eq!(app.attempts(&id).await.len(), 1);
    assert_eq!(fakes.primary.submissions().total, 1);
}

/// A synchronous provider's answer arrives while the database refuses writes for a moment:
/// recording it is retried with backoff, and it wins. (Before, the answer was dropped; the
/// chat attempt, which no provider can be asked about, stayed unknown for ever.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_recording_an_answer_is_retried_through_a_transient_failure() {
    answer_survives_refused_writes(1_000, Duration::from_secs(20), Duration::from_millis(2_500))
        .await;
}

/// The database refuses writes for longer than the attempt's recording window (past the
/// answer, the deadline and the 3 s minimum window): the answer is held, not dropped, and the
/// reconciler records it once the database takes writes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_an_answer_not_recorded_in_time_is_held_and_recorded_later() {
    answer_survives_refused_writes(500, Duration::from_secs(1), Duration::from_secs(6)).await;
}
