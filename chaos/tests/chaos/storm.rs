//! Storm across nodes: three `onejob serve` processes on one PostgreSQL database, every key
//! submitted many times at once, the copies sprayed across the nodes.

use std::sync::Arc;

use futures::future::join_all;
use onejob_chaos::{
    client::RecordingClient,
    node::{Node, NodeConfig, Role, create_key},
    postgres::{Database, shared_admin_url},
    readback::{Reader, record_side_effects},
    scale::Scale,
};
use onejob_fake::FakeServer;
use serde_json::json;
use tokio::sync::Semaphore;

use crate::harness;

/// Exactly one job per key and, once they ran, exactly one side effect per key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "fault suite: run with chaos/run.sh"]
async fn a_storm_across_three_nodes_makes_one_job_and_one_side_effect_per_key() {
    let scale = Scale::from_env();
    let db = Database::create(&shared_admin_url()).await;
    let fake = FakeServer::spawn(([127, 0, 0, 1], 0).into()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let logs = harness::log_dir("storm");
    let config = NodeConfig::new(&db.url, &fake.base_url()).write(dir.path(), "node");
    let mut nodes: Vec<Node> = (0..3)
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
    let token = create_key(&db.url, "storm", "client", false).await;
    let history = harness::history("storm");
    let client = RecordingClient::new(history.clone(), "storm", &token);

    let keys: Vec<String> = (0..scale.storm_keys)
        .map(|i| format!("storm:{i}"))
        .collect();
    let in_flight = Arc::new(Semaphore::new(200));
    let submissions = keys.iter().enumerate().flat_map(|(i, key)| {
        (0..scale.storm_copies).map({
            let (client, urls, in_flight) = (client.clone(), urls.clone(), in_flight.clone());
            move |copy| {
                let (client, urls, in_flight) = (client.clone(), urls.clone(), in_flight.clone());
                let key = key.clone();
                let body =
                    json!({"kind": "chat.completion", "params": {"prompt": format!("storm {i}")}});
                tokio::spawn(async move {
                    let _permit = in_flight.acquire_owned().await.unwrap();
                    client.submit(&urls, i + copy, &key, &body, 20).await
                })
            }
        })
    });
    let answers = join_all(submissions.collect::<Vec<_>>()).await;
    let created = answers
        .iter()
        .filter(|a| a.as_ref().unwrap().status == Some(201))
        .count();
    let replayed = answers
        .iter()
        .filter(|a| a.as_ref().unwrap().status == Some(200))
        .count();
    assert_eq!(created, keys.len(), "one 201 per key");
    assert_eq!(
        created + replayed,
        answers.len(),
        "every submission answered"
    );

    let reader = Reader::new(&urls[0], &token);
    let open = reader
        .wait_settled(&keys, std::time::Duration::from_secs(300))
        .await;
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
        "exactly one job per key"
    );
    assert_eq!(
        report.stats.side_effects,
        keys.len() as u64,
        "exactly one side effect per key"
    );
    assert_eq!(
        report.stats.job_states.get("succeeded"),
        Some(&(keys.len() as u64))
    );
    assert_eq!(fake.submissions().total, keys.len() as u64);
}
