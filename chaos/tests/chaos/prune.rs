//! Replays meet retention under load: two nodes with `[retention] finished_after = "2s"`,
//! clients replaying finished jobs (and reusing their keys with new params) while retention
//! deletes them, and another tenant replaying its running job throughout.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use onejob_chaos::{
    client::http_client,
    node::{Node, NodeConfig, Role, create_key},
    postgres::{Database, shared_admin_url},
    scale::Scale,
};
use onejob_fake::{Behaviour, FakeServer, Rule};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::harness;

/// One answer a client got: when its request was sent, for which key, and what it said.
struct Seen {
    sent: Instant,
    key: usize,
    status: u16,
    job: Option<String>,
}

/// No answer is a 5xx, the other tenant's replays all succeed, and no replay sent after a
/// job was seen deleted names that job (a replay cache answering for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "fault suite: run with chaos/run.sh"]
async fn replays_meet_retention_under_load_and_none_fails_or_names_a_deleted_job() {
    let scale = Scale::from_env();
    let (keys, seconds) = if scale.name == "full" {
        (200, 30)
    } else {
        (60, 10)
    };
    let db = Database::create(&shared_admin_url()).await;
    let fake = FakeServer::spawn(([127, 0, 0, 1], 0).into()).await.unwrap();
    fake.add_rule(Rule {
        matches: Some("forever".into()),
        times: None,
        behaviour: Behaviour {
            hang_after_ack: true,
            ..Default::default()
        },
    });
    let dir = tempfile::tempdir().unwrap();
    let logs = harness::log_dir("prune");
    let mut config = NodeConfig::new(&db.url, &fake.base_url());
    config.extra = "[retention]\nfinished_after = \"2s\"\nevery = \"100ms\"\n".into();
    let config = config.write(dir.path(), "node");
    let mut nodes: Vec<Node> = (0..2)
        .map(|i| {
            let name = format!("node{i}");
            let log = logs.join(format!("{name}.log"));
            Node::start(&name, Role::Serve, &config, &[], &log)
        })
        .collect();
    for node in &mut nodes {
        node.wait_ready().await;
    }
    let urls: Arc<Vec<String>> = Arc::new(nodes.iter().map(Node::url).collect());
    let acme = create_key(&db.url, "acme", "client", false).await;
    let globex = create_key(&db.url, "globex", "client", false).await;
    let http = http_client(Duration::from_secs(30));
    let submit = {
        let (http, urls) = (http.clone(), urls.clone());
        move |node: usize, token: String, key: String, prompt: String| {
            let (http, urls) = (http.clone(), urls.clone());
            async move {
                let response = http
                    .post(format!("{}/v1/jobs", urls[node % urls.len()]))
                    .bearer_auth(token)
                    .header("Idempotency-Key", key)
                    .json(&json!({"kind": "chat.completion", "params": {"prompt": prompt}}))
                    .send()
                    .await
                    .expect("an answer");
                let status = response.status().as_u16();
                let body: Value = response.json().await.unwrap_or(Value::Null);
                (status, body["id"].as_str().map(str::to_owned))
            }
        }
    };
    let (status, _) = submit(0, globex.clone(), "still-running".into(), "forever".into()).await;
    assert_eq!(status, 201);
    let mut first_ids = HashMap::new();
    for key in 0..keys {
        let (status, id) = submit(
            key,
            acme.clone(),
            format!("hot-{key}"),
            format!("hot {key}"),
        )
        .await;
        assert_eq!(status, 201);
        first_ids.insert(key, id.expect("a job id"));
    }

    let seen = Arc::new(Mutex::new(Vec::<Seen>::new()));
    let other = Arc::new(Mutex::new(Vec::<u16>::new()));
    let deleted: Arc<Mutex<HashMap<usize, Instant>>> = Arc::default();
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..16usize {
        let (submit, seen, acme) = (submit.clone(), seen.clone(), acme.clone());
        tasks.spawn(async move {
            let mut n = client;
            while Instant::now() < until {
                n = n.wrapping_mul(31).wrapping_add(17);
                let key = n % keys;
                // One in five reuses the key with new params.
                let prompt = if n % 5 == 0 {
                    format!("hot {key}, changed")
                } else {
                    format!("hot {key}")
                };
                let sent = Instant::now();
                let (status, job) = submit(n, acme.clone(), format!("hot-{key}"), prompt).await;
                seen.lock().unwrap().push(Seen {
                    sent,
                    key,
                    status,
                    job,
                });
            }
        });
    }
    for client in 0..4usize {
        let (submit, other, globex) = (submit.clone(), other.clone(), globex.clone());
        tasks.spawn(async move {
            while Instant::now() < until {
                let (status, _) = submit(
                    client,
                    globex.clone(),
                    "still-running".into(),
                    "forever".into(),
                )
                .await;
                other.lock().unwrap().push(status);
            }
        });
    }
    {
        // Watches the first job of every key until it is gone.
        let (http, urls, acme, deleted) =
            (http.clone(), urls.clone(), acme.clone(), deleted.clone());
        let first_ids = first_ids.clone();
        tasks.spawn(async move {
            while Instant::now() < until {
                for (key, id) in &first_ids {
                    if deleted.lock().unwrap().contains_key(key) {
                        continue;
                    }
                    let status = http
                        .get(format!("{}/v1/jobs/{id}", urls[0]))
                        .bearer_auth(&acme)
                        .send()
                        .await
                        .map(|r| r.status().as_u16());
                    if matches!(status, Ok(404)) {
                        deleted.lock().unwrap().insert(*key, Instant::now());
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    for node in &mut nodes {
        node.terminate().await;
    }

    let seen = seen.lock().unwrap();
    let other = other.lock().unwrap();
    let deleted = deleted.lock().unwrap();
    let mut by_status: HashMap<u16, usize> = HashMap::new();
    for answer in seen.iter() {
        *by_status.entry(answer.status).or_default() += 1;
    }
    let stale: Vec<&Seen> = seen
        .iter()
        .filter(|answer| {
            deleted.get(&answer.key).is_some_and(|at| answer.sent > *at)
                && answer.job.as_deref() == Some(first_ids[&answer.key].as_str())
        })
        .collect();
    println!(
        "prune: {} answers {by_status:?}, {} of the other tenant's replays, {} of {keys} first \
         jobs seen deleted, {} answers naming a job seen deleted before they were asked",
        seen.len(),
        other.len(),
        deleted.len(),
        stale.len()
    );
    assert!(
        seen.iter().all(|a| matches!(a.status, 200 | 201 | 422)),
        "{by_status:?}"
    );
    assert!(other.iter().all(|&status| status == 200), "{other:?}");
    assert!(!other.is_empty());
    assert!(
        deleted.len() * 2 >= keys,
        "retention deleted too few to tell"
    );
    assert!(
        stale.is_empty(),
        "{} replays named a deleted job",
        stale.len()
    );
}
