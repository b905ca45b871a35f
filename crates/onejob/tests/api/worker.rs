//! The worker as a process: killed with SIGKILL mid-attempt, stopped gracefully, woken
//! without polling, forwarding a stable idempotency key upstream, and claiming a burst of
//! due jobs concurrently without running any twice.

use std::{process::Stdio, time::Duration};

use tokio::io::{AsyncBufReadExt, BufReader};

use onejob_fake::{Behaviour, Rule};
use serde_json::Value;

use futures::StreamExt;

use crate::helpers::{
    Backend, Fakes, TestApp, TestDatabase, chat, citus_tests, postgres_and_sqlite_tests,
};

postgres_and_sqlite_tests!(
    a_worker_aborted_after_the_answer_is_resolved_by_proof_and_nothing_resent,
    a_worker_killed_after_acknowledgement_leaves_unknown_and_nothing_resent,
    a_worker_killed_before_acknowledgement_leaves_unknown_and_nothing_resent,
    graceful_shutdown_stops_claiming_and_records_in_flight_as_unknown,
    workers_are_woken_without_polling,
    a_stable_idempotency_key_is_forwarded_upstream,
    a_retry_is_dispatched_after_its_backoff_not_the_poll_interval,
    a_burst_beyond_the_concurrency_runs_each_job_once,
    new_jobs_that_find_every_slot_busy_start_when_one_frees,
    a_due_retry_starts_ahead_of_a_backlog_of_new_jobs,
    an_acknowledgement_retried_after_an_unclear_commit_keeps_its_attempt,
    a_completion_retried_after_an_unclear_commit_keeps_its_win,
);

// Jobs run once each, and workers wake without polling, on a Citus cluster too.
citus_tests!(
    a_burst_beyond_the_concurrency_runs_each_job_once,
    a_stable_idempotency_key_is_forwarded_upstream,
    workers_are_woken_without_polling,
    a_worker_killed_after_acknowledgement_leaves_unknown_and_nothing_resent,
);

const WITHIN: Duration = Duration::from_secs(15);

/// A `onejob worker` process on `db`, sending `chat.completion` (and the gateway's
/// `chat.fast`, model `fast`) to `fakes.primary`, with `fault` as its `ONEJOB_FAULT` (see
/// `onejob::fault`).
fn worker_process(
    db: &TestDatabase,
    fakes: &Fakes,
    dir: &std::path::Path,
    fault: Option<&str>,
) -> tokio::process::Child {
    worker_command(db, fakes, dir, fault)
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start onejob worker")
}

/// The command of [`worker_process`], its stderr not yet chosen.
fn worker_command(
    db: &TestDatabase,
    fakes: &Fakes,
    dir: &std::path::Path,
    fault: Option<&str>,
) -> tokio::process::Command {
    let config = format!(
        r#"database = "{database}"

[worker]
lease = "1s"
poll_interval = "100ms"

[[provider]]
name = "fake"
adapter = "fake"
base_url = "{base_url}"
idempotency_header = "Idempotency-Key"

[[kind]]
name = "chat.completion"
providers = ["fake"]
attempt_timeout = "60s"

[[kind]]
name = "chat.fast"
openai_models = ["fast"]
providers = ["fake"]
attempt_timeout = "60s"
"#,
        database = db.url,
        base_url = fakes.primary.base_url(),
    );
    let path = dir.join("worker.toml");
    std::fs::write(&path, config).unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_onejob"));
    command
        .arg("worker")
        .arg("--config")
        .arg(&path)
        .env("RUST_LOG", "warn")
        .env("ONEJOB_FAULT", fault.unwrap_or_default())
        .stdout(Stdio::null())
        .kill_on_drop(true);
    command
}

async fn killed_mid_attempt(backend: Backend, hang: Behaviour, acknowledged: bool) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(Rule {
        matches: Some("doomed".into()),
        times: None,
        behaviour: hang,
    });
    let api = TestApp::spawn(&db).await; // API only: the worker is the child process
    let dir = tempfile::tempdir().unwrap();
    let mut child = worker_process(&db, &fakes, dir.path(), None);

    let job = api.create("doomed", &chat("doomed")).await;
    let id = job["id"].as_str().unwrap().to_owned();
    let want = if acknowledged { "running" } else { "starting" };
    api.wait_attempts(&id, WITHIN, |a| {
        a.len() == 1 && a[0]["state"] == want && fakes.total() == 1
    })
    .await;
    child.kill().await.expect("SIGKILL the worker");

    // Another worker (with its own rescuer) takes over the database.
    let rescuer = TestApp::running(&db, &fakes, |_| {}).await;
    let attempts = rescuer
        .wait_attempts(&id, WITHIN, |a| a[0]["state"] == "unknown")
        .await;
    assert!(
        attempts[0]["error"]["reason"]
            .as_str()
            .unwrap()
            .contains("lease expired"),
        "{attempts:?}"
    );
    assert_eq!(rescuer.job(&id).await["state"], "unknown");
    // Restarted workers do not re-send it.
    let mut again = worker_process(&db, &fakes, dir.path(), None);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let _ = again.kill().await;
    assert_eq!(rescuer.attempts(&id).await.len(), 1);
    assert_eq!(fakes.total(), 1, "the killed attempt was never sent again");
}

/// The third crash point, which no signal can aim at: the provider answered and the worker
/// died before writing the answer (`ONEJOB_FAULT=abort-after-answer` aborts exactly there).
/// The attempt stays `running` with its task id; a rescuer makes it `unknown` when the
/// lease expires and the reconciler resolves it by asking the provider: one attempt, one
/// side effect, the provider's own output as the result.
async fn a_worker_aborted_after_the_answer_is_resolved_by_proof_and_nothing_resent(
    backend: Backend,
) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let api = TestApp::spawn(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let mut child = worker_process(&db, &fakes, dir.path(), Some("abort-after-answer"));
    let job = api.create("answered", &chat("answered")).await;
    let id = job["id"].as_str().unwrap().to_owned();
    let status = tokio::time::timeout(WITHIN, child.wait())
        .await
        .expect("the armed worker aborts")
        .unwrap();
    assert!(!status.success(), "aborted, not exited: {status}");
    let attempts = api.attempts(&id).await;
    assert_eq!(attempts.len(), 1);
    assert_eq!(
        attempts[0]["state"], "running",
        "the answer was never written"
    );
    assert!(attempts[0]["task_id"].is_string(), "{attempts:?}");
    assert_eq!(fakes.total(), 1);

    let rescuer = TestApp::running(&db, &fakes, |_| {}).await;
    let done = rescuer
        .wait_job(&id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    assert_eq!(
        done["result"],
        serde_json::json!({"text": "fake answer: answered"})
    );
    let attempts = rescuer.attempts(&id).await;
    assert_eq!(
        attempts.len(),
        1,
        "resolved by proof, not by a second attempt"
    );
    assert_eq!(done["completed_by"], attempts[0]["id"]);
    let events = rescuer.events(&id).await;
    assert!(events.iter().any(|e| e["kind"] == "attempt_unknown"));
    let won = events.iter().find(|e| e["kind"] == "won").unwrap();
    assert_eq!(won["actor"], "reconciler");
    assert_eq!(fakes.total(), 1, "nothing was sent twice");
}

async fn a_worker_killed_after_acknowledgement_leaves_unknown_and_nothing_resent(backend: Backend) {
    let hang = Behaviour {
        hang_after_ack: true,
        ..Default::default()
    };
    killed_mid_attempt(backend, hang, true).await;
}

async fn a_worker_killed_before_acknowledgement_leaves_unknown_and_nothing_resent(
    backend: Backend,
) {
    let hang = Behaviour {
        hang_before_ack: true,
        hang_after_ack: true,
        ..Default::default()
    };
    killed_mid_attempt(backend, hang, false).await;
}

async fn graceful_shutdown_stops_claiming_and_records_in_flight_as_unknown(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(Rule {
        matches: Some("endless".into()),
        times: None,
        behaviour: Behaviour {
            hang_after_ack: true,
            ..Default::default()
        },
    });
    let mut app = TestApp::running(&db, &fakes, |_| {}).await;
    let job = app.create("endless", &chat("endless")).await;
    let id = job["id"].as_str().unwrap().to_owned();
    app.wait_attempts(&id, WITHIN, |a| a.len() == 1 && a[0]["state"] == "running")
        .await;

    app.stop_worker().await; // grace is 500 ms in tests
    let attempts = app.attempts(&id).await;
    assert_eq!(attempts[0]["state"], "unknown", "{attempts:?}");
    assert!(
        attempts[0]["error"]["reason"]
            .as_str()
            .unwrap()
            .contains("shut down")
    );

    // A stopped worker claims nothing more.
    let later = app.create("later", &chat("later")).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        app.job(later["id"].as_str().unwrap()).await["state"],
        "pending"
    );
    assert_eq!(fakes.total(), 1);
}

async fn workers_are_woken_without_polling(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |config| {
        // Polling alone would take an hour: only the wake-up (NOTIFY / in-process) runs jobs.
        config.worker.poll_interval = Duration::from_secs(3600);
    })
    .await;
    // Let the worker settle into its wait (and, on PostgreSQL, LISTEN).
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 0..3 {
        let job = app.create(&format!("wake-{i}"), &chat("wake")).await;
        let done = app
            .wait_job(job["id"].as_str().unwrap(), Duration::from_secs(10), |j| {
                j["state"] == "succeeded"
            })
            .await;
        assert_eq!(done["attempts"], 1);
    }
}

async fn a_stable_idempotency_key_is_forwarded_upstream(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |_| {}).await;
    let job = app.create("fwd", &chat("forward")).await;
    let id = job["id"].as_str().unwrap();
    app.wait_job(id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    let seen = fakes.primary.submissions();
    let keys: Vec<Option<String>> = seen
        .requests
        .iter()
        .map(|r| r.idempotency_key.clone())
        .collect();
    assert_eq!(keys, vec![Some(format!("onejob:{id}"))]);
    let _: Value = app.job(id).await;
}

async fn a_retry_is_dispatched_after_its_backoff_not_the_poll_interval(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(Rule {
        matches: Some("retry soon".into()),
        times: Some(1),
        behaviour: Behaviour {
            outcome: onejob_fake::Outcome::Fail,
            ..Default::default()
        },
    });
    let app = TestApp::running(&db, &fakes, |config| {
        // Polling would take an hour; the 50 ms backoff must decide when the retry runs.
        config.worker.poll_interval = Duration::from_secs(3600);
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let job = app.create("soon", &chat("retry soon")).await;
    let done = app
        .wait_job(job["id"].as_str().unwrap(), Duration::from_secs(10), |j| {
            j["state"] == "succeeded"
        })
        .await;
    assert_eq!(done["attempts"], 2);
}

/// More jobs due at once than the worker runs at a time: its claims run concurrently, each
/// in its own task, while the loop keeps looking for due jobs (which stay due until their
/// claim commits); still every job runs exactly one attempt and the provider is called once
/// per job.
async fn a_burst_beyond_the_concurrency_runs_each_job_once(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |config| {
        config.worker.concurrency = 3;
    })
    .await;
    let jobs = futures::future::join_all((0..40).map(|i| {
        let app = &app;
        async move {
            app.create(&format!("burst-{i}"), &chat(&format!("burst {i}")))
                .await
        }
    }))
    .await;
    for job in &jobs {
        let done = app
            .wait_job(job["id"].as_str().unwrap(), WITHIN, |j| {
                j["state"] == "succeeded"
            })
            .await;
        assert_eq!(done["attempts"], 1, "{done}");
    }
    assert_eq!(fakes.total(), 40);
}

/// New jobs created while every slot of the worker is busy wake it for nothing it can
/// start; they start as the running attempt ends, not at the poll interval (an hour here).
async fn new_jobs_that_find_every_slot_busy_start_when_one_frees(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(Rule {
        matches: Some("slow".into()),
        times: None,
        behaviour: Behaviour {
            ack_delay_ms: 300,
            ..Default::default()
        },
    });
    let app = TestApp::running(&db, &fakes, |config| {
        config.worker.concurrency = 1;
        config.worker.poll_interval = Duration::from_secs(3600);
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let first = app.create("busy-0", &chat("slow 0")).await;
    app.wait_job(first["id"].as_str().unwrap(), WITHIN, |j| {
        j["state"] == "running"
    })
    .await;
    let next = [
        app.create("busy-1", &chat("slow 1")).await,
        app.create("busy-2", &chat("slow 2")).await,
    ];
    for job in next.iter().chain([&first]) {
        let done = app
            .wait_job(job["id"].as_str().unwrap(), WITHIN, |j| {
                j["state"] == "succeeded"
            })
            .await;
        assert_eq!(done["attempts"], 1, "{done}");
    }
}

/// A retry due while new jobs keep every slot busy starts ahead of them, not when their
/// backlog drains: two slots, 40 new jobs of 0.5 s each (10 s of work), one job whose first
/// attempt fails definitely with a 200 ms backoff. Its second attempt must start (and win)
/// while most of the backlog has not started; before, new jobs took every slot that freed
/// and the retry started after the last of them.
async fn a_due_retry_starts_ahead_of_a_backlog_of_new_jobs(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(Rule {
        matches: Some("fails once".into()),
        times: Some(1),
        behaviour: Behaviour {
            outcome: onejob_fake::Outcome::Fail,
            ..Default::default()
        },
    });
    fakes.primary.add_rule(Rule {
        matches: Some("backlog".into()),
        times: None,
        behaviour: Behaviour {
            ack_delay_ms: 500,
            ..Default::default()
        },
    });
    let app = TestApp::running_uncertified(&db, &fakes, |config| {
        config.worker.concurrency = 2;
        config.worker.poll_interval = Duration::from_secs(3600);
        for kind in &mut config.kinds {
            kind.retry_backoff = Duration::from_millis(200);
        }
    })
    .await;
    let retried = app.create("retried", &chat("fails once")).await;
    for n in 0..40 {
        app.create(&format!("backlog-{n}"), &chat(&format!("backlog {n}")))
            .await;
    }
    let done = app
        .wait_job(
            retried["id"].as_str().unwrap(),
            Duration::from_secs(60),
            |j| j["state"] == "succeeded",
        )
        .await;
    assert_eq!(done["attempts"], 2, "{done}");
    let waiting = db
        .scalar("SELECT COUNT(*) FROM jobs WHERE attempts = 0")
        .await;
    assert!(
        waiting >= 20,
        "the retry won only when {waiting} of the 40 new jobs still waited to start: it waited \
         for the backlog"
    );
}

/// An acknowledgement that committed but whose reply was lost (`ONEJOB_FAULT=ack-reply-lost`)
/// is retried, finds the attempt already `running` by its own first try, and goes on: the
/// provider's answer, 300 ms later, wins. Before, the retry read `running` as "no longer
/// this worker's", dropped the request in flight and left the attempt to end `unknown`.
async fn an_acknowledgement_retried_after_an_unclear_commit_keeps_its_attempt(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(Rule {
        matches: Some("unclear".into()),
        times: None,
        behaviour: Behaviour {
            ack_delay_ms: 300,
            ..Default::default()
        },
    });
    let api = TestApp::spawn(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let _worker = worker_process(&db, &fakes, dir.path(), Some("ack-reply-lost"));
    let job = api.create("unclear", &chat("unclear commit")).await;
    let done = api
        .wait_job(job["id"].as_str().unwrap(), WITHIN, |j| {
            j["state"] == "succeeded"
        })
        .await;
    assert_eq!(done["attempts"], 1, "{done}");
    assert_eq!(fakes.total(), 1, "sent once");
}

/// A completion that committed but whose reply was lost (`ONEJOB_FAULT=completion-reply-lost`;
/// on PostgreSQL the one-statement completion of a job's only attempt) is retried by its
/// worker not knowing, and the retry finds the job's result already its own: the worker
/// goes on as the winner, the job has that one attempt as its winner with one `won` event
/// and no `race_lost`, the provider was called once, and the gateway call gets the answer.
/// Without the rule's recognition of the attempt's own earlier win (`transitions.rs`,
/// `completing`), the retry logs a `race_lost` of the winning answer itself and the worker
/// takes its own win for a discarded late result.
async fn a_completion_retried_after_an_unclear_commit_keeps_its_win(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let api = TestApp::spawn(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let mut worker = worker_command(&db, &fakes, dir.path(), Some("completion-reply-lost"))
        .env("RUST_LOG", "warn,onejob::worker=info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("start onejob worker");
    // The worker's log, kept (and passed on) as it comes.
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut lines = BufReader::new(worker.stderr.take().expect("piped stderr")).lines();
    let kept = log.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("{line}");
            kept.lock().unwrap().push(line);
        }
    });
    let body = serde_json::json!({
        "model": "fast",
        "messages": [{"role": "user", "content": "Describe a red fox."}],
    });
    let response = api.chat(Some("unclear-completion"), &body).await;
    let job_id = response.headers()["onejob-job-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let (status, answer) = crate::helpers::json(response).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["object"], "chat.completion", "{answer}");
    // Until the worker has decided what its retried completion did.
    let decided = |log: &[String]| {
        log.iter()
            .any(|l| l.contains("attempt won") || l.contains("late result discarded"))
    };
    let deadline = tokio::time::Instant::now() + WITHIN;
    while !decided(&log.lock().unwrap()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the worker never said what its completion did"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let log = log.lock().unwrap().clone();
    assert!(
        log.iter()
            .any(|l| l.contains("completion-reply-lost: the completion committed")),
        "the fault fired: {log:#?}"
    );
    assert!(
        log.iter().any(|l| l.contains("attempt won"))
            && !log.iter().any(|l| l.contains("late result discarded")),
        "the worker took its retried win for a lost race: {log:#?}"
    );
    let job = api.job(&job_id).await;
    assert_eq!(job["state"], "succeeded", "{job}");
    assert_eq!(job["attempts"], 1, "{job}");
    assert_eq!(job["result"], answer, "the caller got the job's result");
    let attempts = api.attempts(&job_id).await;
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0]["state"], "succeeded", "{attempts:?}");
    assert_eq!(job["completed_by"], attempts[0]["id"], "{job}");
    let events = api.events(&job_id).await;
    let of = |kind: &str| events.iter().filter(|e| e["kind"] == kind).count();
    assert_eq!(of("won"), 1, "{events:#?}");
    assert_eq!(of("race_lost"), 0, "{events:#?}");
    assert_eq!(fakes.total(), 1, "sent once");
}

/// Work thousands of jobs from an empty schema that was analyzed while empty, with
/// autovacuum off (what operators and benchmarks do): the worker's connections, which keep
/// their cached plans for life, must not keep reading `attempts` by sequential scans as it
/// grows. Before, the statements reading attempts by `id = ANY($1)` kept the plan made on the
/// empty table (a sequential scan) for good: over 3,000 jobs, 3,557 sequential scans of
/// `attempts` read 4.8 M rows.
#[tokio::test]
async fn the_workers_plans_do_not_rot_as_the_tables_grow_from_empty() {
    let db = TestDatabase::create(Backend::Postgres).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |_| {}).await;
    for off in [
        "ALTER TABLE jobs SET (autovacuum_enabled = false)",
        "ALTER TABLE attempts SET (autovacuum_enabled = false)",
        "ALTER TABLE job_events SET (autovacuum_enabled = false)",
        "ANALYZE",
    ] {
        db.exec(off).await.unwrap();
    }
    let jobs = 3_000;
    let submissions = futures::stream::iter(0..jobs)
        .map(|n| {
            let app = &app;
            async move {
                app.create(&format!("grow-{n}"), &chat(&format!("grow {n}")))
                    .await
            }
        })
        .buffer_unordered(32);
    let created: Vec<Value> = submissions.collect().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    loop {
        let open = db
            .scalar("SELECT COUNT(*) FROM jobs WHERE state <> 'succeeded'")
            .await;
        if open == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{open} of {jobs} jobs still open"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(created.len(), jobs);
    // The statistics collector publishes its counters within a second.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let scans = db
        .scalar("SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'attempts'")
        .await;
    let read = db
        .scalar("SELECT seq_tup_read FROM pg_stat_user_tables WHERE relname = 'attempts'")
        .await;
    let analyzed = db
        .scalar("SELECT analyze_count FROM pg_stat_user_tables WHERE relname = 'attempts'")
        .await;
    // With the statistics kept: about 500 scans reading 130,000 rows in all, nearly all
    // while `attempts` was small; with the plans made on the empty table: 3,557 scans reading
    // 4.8 M rows.
    assert!(
        read < 500_000,
        "{scans} sequential scans of attempts read {read} rows while working {jobs} jobs \
         (analyzed {analyzed} times)"
    );
}
