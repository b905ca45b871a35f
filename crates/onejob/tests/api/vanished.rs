//! A gateway call belongs to its job, not to its caller (docs/design.md §2, invariant 11):
//! callers that go away at any point (their connection closed, the request deadline) never
//! leave a job `unknown`, never keep an attempt intake started from running, and never make
//! a second upstream call; every retry under the key gets the job's answer.

use std::time::Duration;

use onejob_fake::{Behaviour, Rule};
use rand::Rng;
use serde_json::{Value, json};

use crate::helpers::{
    Backend, Fakes, TestApp, TestDatabase, create_key, json, postgres_and_sqlite_tests,
};

postgres_and_sqlite_tests!(
    callers_that_go_away_at_random_points_leave_no_job_unknown,
    calls_cut_at_the_request_deadline_still_run_the_attempts_they_started,
    a_stream_whose_caller_left_midway_completes_and_its_retry_replays_it,
    an_attempt_whose_intake_reply_was_lost_still_runs_once,
    an_attempt_stopped_before_its_request_went_out_is_not_sent_never_unknown,
);

const WITHIN: Duration = Duration::from_secs(60);

/// The demo's gateway kind (`chat.fast`, model `fast`) on the primary fake only, one
/// attempt: a second upstream call could only be a second attempt of the same job.
fn gateway(config: &mut onejob::config::Config) {
    let kind = config
        .kinds
        .iter_mut()
        .find(|k| k.name == "chat.fast")
        .expect("the demo serves model fast");
    kind.providers = vec!["fake".into()];
    kind.max_attempts = 1;
}

/// The fake answers every call after `run_ms`.
fn slow_upstream(fakes: &Fakes, run_ms: u64) {
    fakes.primary.add_rule(Rule {
        matches: None,
        times: None,
        behaviour: Behaviour {
            run_ms,
            ..Default::default()
        },
    });
}

fn body(text: &str, stream: bool) -> Value {
    json!({"model": "fast", "stream": stream,
        "messages": [{"role": "user", "content": text}]})
}

/// Upstream calls whose conversation is `text`.
fn upstream_calls(fakes: &Fakes, text: &str) -> u64 {
    fakes
        .primary
        .submissions()
        .count_for(&json!([{"role": "user", "content": text}]))
}

/// Calls under `key` until the job's answer comes (a `409` while it runs is retried, as an
/// OpenAI SDK does); a `409` saying the outcome is unknown fails at once.
async fn answer(app: &TestApp, key: &str, body: &Value) -> Value {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let (status, answer) = json(app.chat(Some(key), body).await).await;
        match status {
            200 => return answer,
            409 | 503 if answer["error"]["state"] != "unknown" => {}
            _ => panic!("{key}: {status} {answer}"),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{key}: still no answer: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// After every caller went away: each key's retry gets a completion, each intent reached
/// the upstream once, and no attempt is (or was) `unknown`.
async fn every_intent_answered_once(app: &TestApp, db: &TestDatabase, fakes: &Fakes, n: usize) {
    for i in 0..n {
        let text = format!("vanishing caller {i}");
        let answer = answer(app, &format!("gone-{i}"), &body(&text, false)).await;
        assert_eq!(answer["object"], "chat.completion", "{answer}");
        assert_eq!(upstream_calls(fakes, &text), 1, "{text}: one upstream call");
    }
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM jobs").await,
        n as i64,
        "one job per key"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM attempts").await,
        n as i64,
        "one attempt per job"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_events WHERE kind = 'attempt_unknown'")
            .await,
        0,
        "no attempt was ever unknown"
    );
}

/// 40 calls (half of them streams) whose clients close the connection 1–60 ms after sending,
/// against an upstream that answers in 200 ms: some go away before intake commits, some
/// after, some while the request is in flight upstream or streaming. Then each is retried
/// under its key. Before attempts were run apart from their callers, most jobs were left
/// with a `starting` attempt nobody ran, rescued as `unknown` at the lease's end, and every
/// retry answered `409 … awaits proof`.
async fn callers_that_go_away_at_random_points_leave_no_job_unknown(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    slow_upstream(&fakes, 200);
    let app = TestApp::running(&db, &fakes, gateway).await;
    let n = 40;
    let calls = (0..n).map(|i| {
        let app = &app;
        let wait = rand::rng().random_range(1..=60);
        async move {
            let (key, body) = (
                format!("gone-{i}"),
                body(&format!("vanishing caller {i}"), i % 2 == 0),
            );
            let call = app.chat(Some(&key), &body);
            // The client goes away: its request future (and connection) is dropped.
            let _ = tokio::time::timeout(Duration::from_millis(wait), call).await;
        }
    });
    futures::future::join_all(calls).await;
    every_intent_answered_once(&app, &db, &fakes, n).await;
}

/// Calls cut by onejob's own request deadline (`request_timeout`, here 5 ms: every call is
/// cut, at whatever point its handler has reached) are answered `408`, and the attempts
/// their intake started run to their end all the same.
async fn calls_cut_at_the_request_deadline_still_run_the_attempts_they_started(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    slow_upstream(&fakes, 100);
    let app = TestApp::running(&db, &fakes, |config| {
        gateway(config);
        config.http.request_timeout = Duration::from_millis(5);
        config.gateway.wait = Duration::from_millis(1);
    })
    .await;
    let n = 20;
    let calls = (0..n).map(|i| {
        let app = &app;
        async move {
            let response = app
                .chat(
                    Some(&format!("gone-{i}")),
                    &body(&format!("vanishing caller {i}"), i % 2 == 0),
                )
                .await;
            response.status().as_u16()
        }
    });
    let statuses = futures::future::join_all(calls).await;
    assert!(
        statuses.iter().all(|s| matches!(s, 408 | 409 | 200)),
        "{statuses:?}"
    );
    assert!(
        statuses.contains(&408),
        "the deadline cut calls: {statuses:?}"
    );
    // Retried through a node of the same database whose deadline lets an answer through.
    let mut patient = TestApp::spawn_with(&db, gateway).await;
    patient.token = app.token.clone();
    every_intent_answered_once(&patient, &db, &fakes, n).await;
}

/// A stream whose caller reads its first chunks and goes away still runs to its end and is
/// stored: the retry under its key replays the whole answer as a stream, and the upstream
/// was called once.
async fn a_stream_whose_caller_left_midway_completes_and_its_retry_replays_it(backend: Backend) {
    use futures::StreamExt;

    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(Rule {
        matches: None,
        times: None,
        behaviour: serde_json::from_value(json!({"run_ms": 1_000})).unwrap(),
    });
    let app = TestApp::running(&db, &fakes, gateway).await;
    let text = "a stream left midway";
    let response = app.chat(Some("midway"), &body(text, true)).await;
    assert_eq!(response.status(), 200);
    let job_id = response.headers()["onejob-job-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let mut chunks = response.bytes_stream();
    let first = chunks.next().await.expect("a first chunk").unwrap();
    assert!(!first.is_empty());
    drop(chunks);
    let job = app
        .wait_job(&job_id, WITHIN, |j| j["state"] != "running")
        .await;
    assert_eq!(job["state"], "succeeded", "{job}");
    let replayed = app.chat(Some("midway"), &body(text, true)).await;
    assert_eq!(replayed.status(), 200);
    assert_eq!(replayed.headers()["idempotent-replayed"], "true");
    let stream = replayed.text().await.unwrap();
    assert!(stream.trim_end().ends_with("data: [DONE]"), "{stream}");
    let content = job["result"]["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let streamed: String = stream
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|chunk| {
            chunk["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(streamed, content);
    assert_eq!(upstream_calls(&fakes, text), 1);
}

/// An intake that committed a job with its first attempt started, but whose reply was lost
/// (`ONEJOB_FAULT=intake-reply-lost` on a `onejob serve` process): the call is answered `503`
/// (its outcome is unclear to it), and the attempt it started is found by its id and run all
/// the same. The retry gets the answer, the upstream was called once, and no attempt was
/// ever `unknown`. Without the look-up, the attempt stayed `starting` with nobody to run it
/// and was rescued as `unknown` at its lease's end.
async fn an_attempt_whose_intake_reply_was_lost_still_runs_once(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    slow_upstream(&fakes, 200);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("onejob.toml");
    std::fs::write(
        &config,
        format!(
            r#"database = "{database}"

[worker]
lease = "2s"
poll_interval = "100ms"

[[provider]]
name = "fake"
adapter = "fake"
base_url = "{base_url}"
idempotency_header = "Idempotency-Key"

[[kind]]
name = "chat.fast"
openai_models = ["fast"]
providers = ["fake"]
attempt_timeout = "60s"
max_attempts = 1
"#,
            database = db.url,
            base_url = fakes.primary.base_url(),
        ),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _serve = tokio::process::Command::new(env!("CARGO_BIN_EXE_onejob"))
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--config",
        ])
        .arg(&config)
        .env("RUST_LOG", "warn")
        .env("ONEJOB_FAULT", "intake-reply-lost")
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start onejob serve");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = tokio::time::Instant::now() + WITHIN;
    // Migrated by `serve` before it answers (two migrators of one SQLite file would clash).
    while !client
        .get(format!("{base}/healthz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "onejob serve never answered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let token = create_key(&*db.open_store().await, "acme", "alice", false).await;
    let call = || {
        client
            .post(format!("{base}/v1/chat/completions"))
            .bearer_auth(&token)
            .header("Idempotency-Key", "unclear-intake")
            .json(&body("an unclear intake", false))
            .send()
    };
    let (status, error) = json(call().await.unwrap()).await;
    assert_eq!(status, 503, "the intake's reply was lost: {error}");
    let answer = loop {
        let (status, answer) = json(call().await.unwrap()).await;
        match status {
            200 => break answer,
            409 if answer["error"]["state"] != "unknown" => {}
            _ => panic!("{status} {answer}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "{answer}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(answer["object"], "chat.completion", "{answer}");
    assert_eq!(upstream_calls(&fakes, "an unclear intake"), 1);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM attempts").await, 1);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_events WHERE kind = 'attempt_unknown'")
            .await,
        0
    );
}

/// An attempt whose worker shuts down while its request has not gone out (the upstream's
/// connection is still being made: here its accept queue is full, so the connection hangs)
/// was not sent: it ends `failed` with its key unspent, never `unknown`, so its job is not
/// left awaiting a proof nobody needs. Before, a shutdown made every attempt in flight
/// `unknown`, sent or not.
async fn an_attempt_stopped_before_its_request_went_out_is_not_sent_never_unknown(
    backend: Backend,
) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    // A listener that never accepts, with room for one connection in its queue: filled, so
    // every other connection to it hangs in its handshake.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    socket.listen(0).unwrap();
    let addr = socket.local_addr().unwrap().as_socket().unwrap();
    let _queued = std::net::TcpStream::connect(addr).unwrap();
    let mut app = TestApp::running_uncertified(&db, &fakes, |config| {
        gateway(config);
        let mut provider =
            onejob::config::ProviderConfig::new("hung", onejob::config::Adapter::OpenaiChat);
        provider.base_url = Some(format!("http://{addr}/v1"));
        provider.model = Some("m".into());
        provider.connect_timeout = Some(Duration::from_secs(20));
        config.providers.push(provider);
        let kind = config
            .kinds
            .iter_mut()
            .find(|k| k.name == "chat.fast")
            .unwrap();
        kind.providers = vec!["hung".into()];
        config.gateway.wait = Duration::from_millis(200);
    })
    .await;
    let (status, refused) = json(
        app.chat(Some("hung"), &body("a request that never goes out", false))
            .await,
    )
    .await;
    assert_eq!(status, 409, "still running: {refused}");
    let job_id = refused["error"]["job_id"].as_str().unwrap().to_owned();
    app.stop_worker().await;
    let attempts = app.attempts(&job_id).await;
    assert_eq!(attempts[0]["state"], "failed", "{attempts:?}");
    assert_ne!(app.job(&job_id).await["state"], "unknown");
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_events WHERE kind = 'attempt_unknown'")
            .await,
        0
    );
}
