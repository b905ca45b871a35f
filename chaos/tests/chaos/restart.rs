//! Database restart under load: PostgreSQL (a throwaway cluster of our own, never the shared
//! one) is stopped and started again while clients submit and poll and workers run.
//! Clients must only ever see `503` problems with `Retry-After` while it is down, the same
//! onejob processes must carry on once it is back (wake-ups included: their fallback poll
//! is an hour), and no acknowledged job may be lost or doubled.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use onejob_chaos::{
    client::RecordingClient,
    history::Record,
    node::{Node, NodeConfig, Role, create_key},
    postgres::{Cluster, Database, StopMode},
    readback::{Reader, record_side_effects},
    scale::Scale,
};
use onejob_fake::{Behaviour, FakeServer, Rule};
use serde_json::json;

use crate::harness;

/// Clients submitting at once.
const CLIENTS: usize = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "fault suite: run with chaos/run.sh"]
async fn a_database_restart_under_load_answers_503_and_loses_nothing() {
    let scale = Scale::from_env();
    let cluster = Cluster::start_new();
    let db = Database::create(&cluster.admin_url()).await;
    let fake = FakeServer::spawn(([127, 0, 0, 1], 0).into()).await.unwrap();
    fake.add_rule(Rule {
        matches: None,
        times: None,
        behaviour: Behaviour {
            run_ms: 100,
            ..Default::default()
        },
    });
    let dir = tempfile::tempdir().unwrap();
    let logs = harness::log_dir("restart");
    let mut config = NodeConfig::new(&db.url, &fake.base_url());
    // Only LISTEN/NOTIFY wakes the workers in time: a listener that does not come back
    // after the restart leaves jobs pending for an hour and fails the run.
    config.poll_interval = Duration::from_secs(3600);
    let config = config.write(dir.path(), "node");
    let mut nodes: Vec<Node> = (0..2)
        .map(|i| {
            let name = format!("node{i}");
            Node::start(
                &name,
                Role::Serve,
                &config,
                &[],
                &logs.join(format!("{name}.log")),
            )
        })
        .collect();
    for node in &mut nodes {
        node.wait_ready().await;
    }
    let urls: Vec<String> = nodes.iter().map(Node::url).collect();
    let token = create_key(&db.url, "restart", "client", false).await;
    let history = harness::history("restart");

    let keys: Vec<String> = (0..scale.restart_keys)
        .map(|i| format!("restart:{i}"))
        .collect();
    let queue = Arc::new(Mutex::new(keys.clone()));
    // Spread the submissions over the whole restart window, so that clients are submitting
    // while the database is down, not only before.
    let window_ms = (1500 + 9500 * scale.restarts) as u64;
    let pace = Duration::from_millis(window_ms * CLIENTS as u64 / keys.len() as u64);
    let done = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let client = RecordingClient::new(history.clone(), format!("submitter{c}"), &token);
        let (queue, urls) = (queue.clone(), urls.clone());
        clients.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            loop {
                let Some(key) = queue.lock().unwrap().pop() else {
                    return ids;
                };
                let body = json!({"kind": "chat.completion", "params": {"prompt": format!("{key} please")}});
                // A careful client: the same key until it has an answer, through the outage.
                let answer = client.submit(&urls, c, &key, &body, 200).await;
                assert!(
                    matches!(answer.status, Some(200 | 201)),
                    "{key}: never accepted: {:?} {}",
                    answer.status,
                    answer.body
                );
                ids.push(answer.body["id"].as_str().unwrap().to_owned());
                // A double click now and then.
                if key.ends_with('7') {
                    client.submit(&urls, c + 1, &key, &body, 200).await;
                }
                tokio::time::sleep(pace).await;
            }
        }));
    }
    // Pollers read jobs while the database comes and goes.
    let poller = {
        let client = RecordingClient::new(history.clone(), "poller", &token);
        let (done, urls, keys) = (done.clone(), urls.clone(), keys.clone());
        tokio::spawn(async move {
            let mut i = 0usize;
            while !done.load(Ordering::SeqCst) {
                let key = &keys[(i * 7919) % keys.len()];
                let node = i % urls.len();
                let answer = client
                    .get(
                        node,
                        &urls[node],
                        &format!("/v1/jobs?idempotency_key={key}"),
                    )
                    .await;
                if let Some(id) = answer.body["id"].as_str() {
                    client
                        .get(node, &urls[node], &format!("/v1/jobs/{id}"))
                        .await;
                }
                client.get(node, &urls[node], "/readyz").await;
                i += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    for restart in 0..scale.restarts {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let mode = if restart % 2 == 0 {
            StopMode::Fast
        } else {
            StopMode::Immediate
        };
        history.fault(format!("stop PostgreSQL ({mode:?})"));
        cluster.stop(mode);
        // Longer than the pool's 5 s acquire timeout: requests waiting for a connection
        // must give up with a 503 rather than hang.
        tokio::time::sleep(Duration::from_secs(8)).await;
        cluster.start();
        history.fault("start PostgreSQL");
    }
    let mut acknowledged = 0;
    for client in clients {
        acknowledged += client.await.unwrap().len();
    }
    done.store(true, Ordering::SeqCst);
    poller.await.unwrap();
    assert_eq!(acknowledged, keys.len());

    // The same processes, never restarted, finish every job.
    let reader = Reader::new(&urls[0], &token);
    let open = reader.wait_settled(&keys, Duration::from_secs(300)).await;
    assert!(
        open.is_empty(),
        "{} jobs still open: {:?}",
        open.len(),
        &open[..open.len().min(5)]
    );
    reader.record_jobs(&history, &keys).await;
    record_side_effects(&history, "fake", &fake).await;
    for node in &mut nodes {
        node.terminate().await;
    }

    let report = harness::check(&history);
    assert_eq!(
        report.stats.jobs,
        keys.len() as u64,
        "no job lost or doubled"
    );
    assert_eq!(
        report.stats.job_states.get("succeeded"),
        Some(&(keys.len() as u64))
    );
    assert!(
        report.stats.statuses.get(&503).copied().unwrap_or(0) > 0,
        "the outage was seen by clients: {:?}",
        report.stats.statuses
    );
    assert_eq!(
        report.stats.side_effects,
        keys.len() as u64,
        "no input reached the provider twice"
    );
    // Recovered without a restart: jobs were created after the database came back.
    let records = onejob_chaos::history::read_history(history.path()).unwrap();
    let back_at = records
        .iter()
        .filter_map(|r| match r {
            Record::Fault { t_ms, what } if what.starts_with("start") => Some(*t_ms),
            _ => None,
        })
        .max()
        .expect("the database was restarted");
    let created_after = records
        .iter()
        .filter(
            |r| matches!(r, Record::Response { t_ms, status: Some(201), .. } if *t_ms > back_at),
        )
        .count();
    assert!(
        created_after > 0,
        "no job was created after the last restart"
    );
    println!("jobs created after the last restart: {created_after}");
    drop(db);
}
