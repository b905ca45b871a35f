//! Due work under a backlog of new jobs: one node with two slots, new jobs arriving faster
//! than it runs them (8 a second, 0.5 s each), and every tenth job's first attempt failing
//! definitely: each retry starts within 2 s of being due, however long the backlog grows.

use std::time::Duration;

use onejob_chaos::{
    client::http_client,
    node::{Node, NodeConfig, Role, create_key},
    postgres::{Database, shared_admin_url},
    scale::Scale,
};
use onejob_fake::{Behaviour, FakeServer, Outcome, Rule};
use serde_json::{Value, json};
use time::{OffsetDateTime, format_description::well_known::Rfc3339};

use crate::harness;

/// The target: a retry starts within this long after its backoff ended.
const TARGET: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "fault suite: run with chaos/run.sh"]
async fn retries_start_within_two_seconds_of_due_under_a_backlog_of_new_jobs() {
    let scale = Scale::from_env();
    let seconds: u64 = if scale.name == "full" { 40 } else { 12 };
    let backoff = Duration::from_millis(200);
    let db = Database::create(&shared_admin_url()).await;
    let fake = FakeServer::spawn(([127, 0, 0, 1], 0).into()).await.unwrap();
    let jobs = seconds * 8;
    for n in (0..jobs).step_by(10) {
        fake.add_rule(Rule {
            matches: Some(format!("job {n} fails once.")),
            times: Some(1),
            behaviour: Behaviour {
                outcome: Outcome::Fail,
                ..Default::default()
            },
        });
    }
    fake.add_rule(Rule {
        matches: Some("job".into()),
        times: None,
        behaviour: Behaviour {
            ack_delay_ms: 500,
            ..Default::default()
        },
    });
    let dir = tempfile::tempdir().unwrap();
    let logs = harness::log_dir("fairness");
    let mut config = NodeConfig::new(&db.url, &fake.base_url());
    config.concurrency = 2;
    config.poll_interval = Duration::from_secs(2);
    config.retry_backoff = backoff;
    let config = config.write(dir.path(), "node");
    let mut node = Node::start("node", Role::Serve, &config, &[], &logs.join("node.log"));
    node.wait_ready().await;
    let token = create_key(&db.url, "fairness", "client", false).await;
    let http = http_client(Duration::from_secs(30));
    let mut retried = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(125));
    for n in 0..jobs {
        tick.tick().await;
        let prompt = if n % 10 == 0 {
            format!("job {n} fails once.")
        } else {
            format!("job {n}")
        };
        let answer: Value = http
            .post(format!("{}/v1/jobs", node.url()))
            .bearer_auth(&token)
            .header("Idempotency-Key", format!("fair-{n}"))
            .json(&json!({"kind": "chat.completion", "params": {"prompt": prompt}}))
            .send()
            .await
            .expect("an answer")
            .json()
            .await
            .expect("a job");
        if n % 10 == 0 {
            retried.push(answer["id"].as_str().expect("a job id").to_owned());
        }
    }
    let at = |value: &Value| OffsetDateTime::parse(value.as_str().unwrap(), &Rfc3339).unwrap();
    let mut delays = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    for id in &retried {
        let attempts = loop {
            let attempts: Value = http
                .get(format!("{}/v1/jobs/{id}/attempts", node.url()))
                .bearer_auth(&token)
                .send()
                .await
                .expect("an answer")
                .json()
                .await
                .expect("attempts");
            let list = attempts["attempts"].as_array().cloned().unwrap_or_default();
            if list.len() >= 2 {
                break list;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{id}: no second attempt"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let due = at(&attempts[0]["finished_at"]) + backoff;
        let started = at(&attempts[1]["started_at"]);
        delays.push(Duration::try_from(started - due).unwrap_or_default());
    }
    node.terminate().await;
    delays.sort();
    println!(
        "fairness: {} retries under a backlog of {jobs} new jobs; start after due: median \
         {:?}, max {:?}",
        delays.len(),
        delays[delays.len() / 2],
        delays[delays.len() - 1]
    );
    assert!(
        delays.iter().all(|delay| *delay <= TARGET),
        "retries started up to {:?} after due: {delays:?}",
        delays.last()
    );
}
