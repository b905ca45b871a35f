//! What every scenario shares: where histories go, serving nodes, a paced storm of
//! careful clients, reading faults and answers back from a history, and the offline check at
//! the end.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use onejob_chaos::{
    checker::{self, Report},
    client::RecordingClient,
    history::{self, History, Record},
    node::{Node, Role},
};
use serde_json::json;
use tokio::task::JoinHandle;

/// The directory for histories and reports: `$ONEJOB_CHAOS_OUT`, else `chaos/out/`.
pub fn out_dir() -> PathBuf {
    let dir = std::env::var("ONEJOB_CHAOS_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("out"));
    std::fs::create_dir_all(&dir).expect("chaos output directory");
    dir
}

/// A fresh directory for scenario `name`'s node logs (`<out>/<name>-logs/`).
pub fn log_dir(name: &str) -> PathBuf {
    let dir = out_dir().join(format!("{name}-logs"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("log directory");
    dir
}

/// A fresh history for scenario `name`.
pub fn history(name: &str) -> Arc<History> {
    Arc::new(History::create(out_dir().join(format!("{name}.jsonl"))).expect("history file"))
}

/// Reads the history back from its file and checks it, as `onejob-chaos-check` would;
/// prints the figures and writes `<name>.report.json`. Panics on any violation.
pub fn check(history: &History) -> Report {
    let records = history::read_history(history.path()).expect("read the history back");
    let report = checker::check(&records);
    let path = history.path().with_extension("report.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&report).expect("report JSON"),
    )
    .expect("write the report");
    println!(
        "{}: {} records, {}",
        history.path().display(),
        records.len(),
        serde_json::to_string(&report.stats).expect("stats JSON")
    );
    for violation in report.violations.iter().take(50) {
        println!("VIOLATION [{}] {}", violation.rule, violation.detail);
    }
    assert!(
        report.is_clean(),
        "{} violation(s) of DESIGN §2 in {}",
        report.violations.len(),
        history.path().display()
    );
    report
}

/// Starts `count` `onejob serve` nodes (`node0`, `node1`…) on `config`, logging to `logs`,
/// and waits until each is ready.
pub async fn serve_nodes(count: usize, config: &Path, logs: &Path) -> Vec<Node> {
    let mut nodes: Vec<Node> = (0..count)
        .map(|i| {
            let name = format!("node{i}");
            Node::start(
                &name,
                Role::Serve,
                config,
                &[],
                &logs.join(format!("{name}.log")),
            )
        })
        .collect();
    for node in &mut nodes {
        node.wait_ready().await;
    }
    nodes
}

/// `clients` careful clients taking `keys` from one queue, each submitting its key until it
/// is accepted (up to `tries` times: after `Retry-After` on a `503`, on the next node when
/// one does not answer), double-clicking keys ending in 3 or 7 on the next node, and pausing
/// `pace` between keys. Each task answers the job ids it was given; it panics if a key is
/// never accepted.
pub fn paced_storm(
    history: &Arc<History>,
    token: &str,
    urls: &[String],
    keys: &[String],
    clients: usize,
    pace: Duration,
    tries: usize,
) -> Vec<JoinHandle<Vec<String>>> {
    let queue = Arc::new(Mutex::new(keys.to_vec()));
    (0..clients)
        .map(|c| {
            let client = RecordingClient::new(history.clone(), format!("submitter{c}"), token);
            let (queue, urls) = (queue.clone(), urls.to_vec());
            tokio::spawn(async move {
                let mut ids = Vec::new();
                loop {
                    let Some(key) = queue.lock().unwrap().pop() else {
                        return ids;
                    };
                    let body = json!({"kind": "chat.completion", "params": {"prompt": format!("{key} please")}});
                    let answer = client.submit(&urls, c, &key, &body, tries).await;
                    assert!(
                        matches!(answer.status, Some(200 | 201)),
                        "{key}: never accepted: {:?} {}",
                        answer.status,
                        answer.body
                    );
                    ids.push(answer.body["id"].as_str().unwrap().to_owned());
                    if key.ends_with('3') || key.ends_with('7') {
                        client.submit(&urls, c + 1, &key, &body, tries).await;
                    }
                    tokio::time::sleep(pace).await;
                }
            })
        })
        .collect()
}

/// When fault `what` was recorded in `records`.
pub fn fault_at(records: &[Record], what: &str) -> u64 {
    records
        .iter()
        .find_map(|r| match r {
            Record::Fault { t_ms, what: w } if w == what => Some(*t_ms),
            _ => None,
        })
        .unwrap_or_else(|| panic!("fault {what:?} recorded"))
}

/// The times of the answers with `status` recorded in `records` within `after..before`.
pub fn answers_between(records: &[Record], status: u16, after: u64, before: u64) -> Vec<u64> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Response {
                t_ms,
                status: Some(s),
                ..
            } if *s == status && *t_ms > after && *t_ms < before => Some(*t_ms),
            _ => None,
        })
        .collect()
}
