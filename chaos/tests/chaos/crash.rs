//! Crash mid-attempt: a `onejob worker` process killed before the provider acknowledged an
//! attempt, after it acknowledged, and after it answered but before the answer was written
//! (`ONEJOB_FAULT=abort-after-answer`), then killed at random under load. Each killed
//! attempt must end resolved by proof (the reconciler asked the provider), nothing may be
//! sent twice, and every job must still finish exactly once.

use std::time::Duration;

use onejob_chaos::{
    client::RecordingClient,
    history::History,
    node::{Node, NodeConfig, Role, create_key},
    postgres::{Database, shared_admin_url},
    readback::{Reader, record_side_effects},
    scale::Scale,
};
use onejob_fake::{Behaviour, FakeServer, Rule};
use serde_json::{Value, json};

use crate::harness;

const WITHIN: Duration = Duration::from_secs(60);

struct Setup {
    _db: Database,
    _dir: tempfile::TempDir,
    logs: std::path::PathBuf,
    fake: FakeServer,
    api: Node,
    config: std::path::PathBuf,
    token: String,
    workers: usize,
}

impl Setup {
    async fn new() -> Setup {
        let db = Database::create(&shared_admin_url()).await;
        let fake = FakeServer::spawn(([127, 0, 0, 1], 0).into()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut config = NodeConfig::new(&db.url, &fake.base_url());
        config.lease = Duration::from_secs(1);
        let config = config.write(dir.path(), "node");
        let logs = harness::log_dir("crash");
        let mut api = Node::start("api", Role::Api, &config, &[], &logs.join("api.log"));
        api.wait_ready().await;
        let token = create_key(&db.url, "crash", "client", false).await;
        Setup {
            _db: db,
            _dir: dir,
            logs,
            fake,
            api,
            config,
            token,
            workers: 0,
        }
    }

    fn worker(&mut self, fault: Option<&str>) -> Node {
        self.workers += 1;
        let name = format!("worker{}", self.workers);
        let env: Vec<(&str, &str)> = fault.map(|f| ("ONEJOB_FAULT", f)).into_iter().collect();
        Node::start(
            &name,
            Role::Worker,
            &self.config,
            &env,
            &self.logs.join(format!("{name}.log")),
        )
    }

    fn reader(&self) -> Reader {
        Reader::new(&self.api.url(), &self.token)
    }

    async fn submit(&self, client: &RecordingClient, key: &str, prompt: &str) -> String {
        let body = json!({"kind": "chat.completion", "params": {"prompt": prompt}});
        let answer = client.submit(&[self.api.url()], 0, key, &body, 10).await;
        assert_eq!(answer.status, Some(201), "{}", answer.body);
        answer.body["id"].as_str().unwrap().to_owned()
    }

    /// Polls the job's attempts until `done` holds.
    async fn wait_attempts(&self, id: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let reader = self.reader();
        let deadline = tokio::time::Instant::now() + WITHIN;
        loop {
            let attempts = reader
                .get(&format!("/v1/jobs/{id}/attempts"))
                .await
                .unwrap()["attempts"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if !attempts.is_empty() && done(&attempts) {
                return attempts;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out: {attempts:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Every attempt that became unknown ended by the reconciler's proof (or is still unknown),
/// and every job's input reached the provider exactly once.
fn assert_resolved_by_proof(history: &History) {
    let records = onejob_chaos::history::read_history(history.path()).unwrap();
    for record in &records {
        let onejob_chaos::history::Record::Job { events, .. } = record else {
            continue;
        };
        for unknown in events.iter().filter(|e| e["kind"] == "attempt_unknown") {
            let end = events.iter().find(|e| {
                e["attempt_id"] == unknown["attempt_id"]
                    && matches!(
                        e["kind"].as_str(),
                        Some("won" | "race_lost" | "attempt_resolved")
                    )
            });
            if let Some(end) = end {
                assert_eq!(
                    end["actor"], "reconciler",
                    "an unknown attempt ended otherwise than by proof: {end}"
                );
            }
        }
    }
}

/// The three aimed crashes, one job each, then random SIGKILLs under load.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "fault suite: run with chaos/run.sh"]
async fn workers_killed_mid_attempt_leave_no_duplicate_and_every_job_finishes_once() {
    let scale = Scale::from_env();
    let mut setup = Setup::new().await;
    let history = harness::history("crash");
    let client = RecordingClient::new(history.clone(), "crash", &setup.token);
    let mut keys = Vec::new();

    // 1. Killed before the acknowledgement: the submit is received (a side effect) and
    //    answered only after 3 s; the worker dies while it waits.
    setup.fake.add_rule(Rule {
        matches: Some("before ack".into()),
        times: None,
        behaviour: Behaviour {
            ack_delay_ms: 3000,
            ..Default::default()
        },
    });
    // 2. Killed after the acknowledgement: the task runs 3 s after it was acknowledged.
    setup.fake.add_rule(Rule {
        matches: Some("after ack".into()),
        times: None,
        behaviour: Behaviour {
            run_ms: 3000,
            ..Default::default()
        },
    });
    for (key, state) in [
        ("crash:before-ack", "starting"),
        ("crash:after-ack", "running"),
    ] {
        let mut worker = setup.worker(None);
        let prompt = key.replace("crash:", "").replace('-', " ");
        let id = setup.submit(&client, key, &prompt).await;
        let fake = &setup.fake;
        setup
            .wait_attempts(&id, |a| {
                a.len() == 1
                    && a[0]["state"] == state
                    && fake.submissions().total as usize > keys.len()
            })
            .await;
        worker.kill().await;
        history.fault(format!(
            "SIGKILL {} with attempt of {key} {state}",
            worker.name
        ));
        keys.push(key.to_owned());
    }
    // 3. Aborted after the answer, before it was written.
    let mut aborting = setup.worker(Some("abort-after-answer"));
    let id = setup
        .submit(&client, "crash:after-answer", "after answer")
        .await;
    let exit = aborting
        .wait_exit(WITHIN)
        .await
        .expect("the armed worker aborts");
    assert!(!exit.success(), "aborted: {exit}");
    history.fault(format!(
        "{} aborted after the answer of crash:after-answer",
        aborting.name
    ));
    keys.push("crash:after-answer".to_owned());
    let attempts = setup.wait_attempts(&id, |_| true).await;
    assert_eq!(
        attempts[0]["state"], "running",
        "the answer was never written: {attempts:?}"
    );

    // A healthy worker rescues the three (lease expired → unknown) and the reconciler
    // resolves them by asking the provider.
    let mut rescuer = setup.worker(None);
    let reader = setup.reader();
    let open = reader.wait_settled(&keys, WITHIN).await;
    assert!(open.is_empty(), "still open: {open:?}");
    rescuer.kill().await;

    // Random kills under load: jobs of 0.2–1.2 s, the worker killed every few hundred ms.
    for i in 0..scale.crash_jobs {
        let key = format!("crash:load:{i}");
        let prompt = format!("load {i} {}", ["quick", "slow"][i % 2]);
        setup.submit(&client, &key, &prompt).await;
        keys.push(key);
    }
    setup.fake.add_rule(Rule {
        matches: Some("slow".into()),
        times: None,
        behaviour: Behaviour {
            run_ms: 1200,
            ..Default::default()
        },
    });
    setup.fake.add_rule(Rule {
        matches: Some("quick".into()),
        times: None,
        behaviour: Behaviour {
            run_ms: 200,
            ..Default::default()
        },
    });
    let mut worker = setup.worker(None);
    for kill in 0..scale.crash_kills {
        let pause = 300 + (kill as u64 * 397) % 900;
        tokio::time::sleep(Duration::from_millis(pause)).await;
        worker.kill().await;
        history.fault(format!("SIGKILL {} after {pause} ms", worker.name));
        worker = setup.worker(None);
    }
    let open = reader.wait_settled(&keys, Duration::from_secs(300)).await;
    assert!(open.is_empty(), "still open: {open:?}");
    worker.terminate().await;

    reader.record_jobs(&history, &keys).await;
    record_side_effects(&history, "fake", &setup.fake).await;
    let report = harness::check(&history);
    assert_resolved_by_proof(&history);
    assert_eq!(
        report.stats.job_states.get("succeeded"),
        Some(&(keys.len() as u64))
    );
    assert_eq!(
        report.stats.side_effects,
        keys.len() as u64,
        "each job's input reached the provider exactly once"
    );
    assert!(report.stats.became_unknown >= 3, "{:?}", report.stats);
}
