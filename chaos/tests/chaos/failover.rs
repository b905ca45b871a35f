//! PostgreSQL failover under load: a throwaway primary with a synchronous streaming standby,
//! three onejob nodes given both as one multi-host URL (`target_session_attrs=read-write`),
//! clients submitting (double clicks included) while workers run attempts. The primary is
//! SIGKILLed mid-storm and the test, playing the failover manager, promotes the standby.
//! Clients must only see `503` with `Retry-After` during the switch; every `201` job must be
//! on the new primary, one per key, each done once. Then the old primary comes back as a
//! standby (read-only), and a node started with the same URL, which lists it first, must
//! write to the new primary instead.

use std::time::Duration;

use onejob_chaos::{
    client::RecordingClient,
    history::Record,
    node::{Node, NodeConfig, Role, create_key},
    postgres::{Cluster, Database},
    readback::{Reader, record_side_effects},
    scale::Scale,
};
use onejob_fake::{Behaviour, FakeServer, Rule};
use serde_json::json;
use sqlx::{Connection, PgConnection};

use crate::harness;

/// Clients submitting at once.
const CLIENTS: usize = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "fault suite: run with chaos/run.sh"]
async fn a_failover_to_a_synchronous_standby_loses_nothing_acknowledged() {
    let scale = Scale::from_env();
    let primary = Cluster::start_new();
    let db = Database::create(&primary.admin_url()).await;
    let standby = Cluster::start_standby_of(&primary);
    let name = db.url.rsplit('/').next().unwrap().to_owned();
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{name}?target_session_attrs=read-write",
        primary.port, standby.port
    );
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
    let logs = harness::log_dir("failover");
    let mut config = NodeConfig::new(&url, &fake.base_url());
    // Only LISTEN/NOTIFY wakes the workers in time: a listener left on the dead primary
    // leaves jobs pending for an hour and fails the run.
    config.poll_interval = Duration::from_secs(3600);
    let config = config.write(dir.path(), "node");
    let mut nodes = harness::serve_nodes(3, &config, &logs).await;
    let urls: Vec<String> = nodes.iter().map(Node::url).collect();
    let token = create_key(&url, "failover", "client", false).await;
    let history = harness::history("failover");

    let keys: Vec<String> = (0..scale.restart_keys)
        .map(|i| format!("failover:{i}"))
        .collect();
    let window_ms = 6000u64;
    let pace = Duration::from_millis(window_ms * CLIENTS as u64 / keys.len() as u64);
    let clients = harness::paced_storm(&history, &token, &urls, &keys, CLIENTS, pace, 200);

    tokio::time::sleep(Duration::from_millis(2000)).await;
    history.fault("SIGKILL the primary");
    primary.kill();
    // A failover manager notices and decides: a second here.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    history.fault("promote the standby");
    standby.promote();
    history.fault("standby promoted");

    let mut acknowledged = 0;
    for client in clients {
        acknowledged += client.await.unwrap().len();
    }
    assert_eq!(acknowledged, keys.len());

    // The same processes, never restarted, finish every job on the new primary.
    let reader = Reader::new(&urls[0], &token);
    let open = reader.wait_settled(&keys, Duration::from_secs(300)).await;
    assert!(
        open.is_empty(),
        "{} jobs still open: {:?}",
        open.len(),
        &open[..open.len().min(5)]
    );

    // The old primary comes back read-only, as a standby of the new one; a node whose URL
    // lists it first must write elsewhere.
    history.fault("old primary restarted as a standby");
    primary.restart_as_standby_of(&standby);
    let mut old = PgConnection::connect(&format!(
        "postgres://postgres@127.0.0.1:{}/{name}",
        primary.port
    ))
    .await
    .expect("the old primary accepts read-only connections");
    let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
        .fetch_one(&mut old)
        .await
        .unwrap();
    assert!(in_recovery, "the old primary came back as a standby");
    let mut late = Node::start("late", Role::Serve, &config, &[], &logs.join("late.log"));
    late.wait_ready().await;
    let late_urls = vec![late.url()];
    let late_keys: Vec<String> = (0..20).map(|i| format!("failover:late:{i}")).collect();
    let late_client = RecordingClient::new(history.clone(), "late", &token);
    for key in &late_keys {
        let body =
            json!({"kind": "chat.completion", "params": {"prompt": format!("{key} please")}});
        let answer = late_client.submit(&late_urls, 0, key, &body, 50).await;
        assert_eq!(answer.status, Some(201), "{key}: {}", answer.body);
    }
    let all: Vec<String> = keys.iter().chain(&late_keys).cloned().collect();
    let open = reader.wait_settled(&all, Duration::from_secs(120)).await;
    assert!(open.is_empty(), "late jobs still open: {open:?}");
    reader.record_jobs(&history, &all).await;
    record_side_effects(&history, "fake", &fake).await;
    late.terminate().await;
    for node in &mut nodes {
        node.terminate().await;
    }

    // Every job is on the new primary, and the old one, read-only, has none of the late
    // ones (it could not have: it only replays what the new primary sends).
    let mut new = PgConnection::connect(&format!(
        "postgres://postgres@127.0.0.1:{}/{name}",
        standby.port
    ))
    .await
    .unwrap();
    let on_new: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&mut new)
        .await
        .unwrap();
    assert_eq!(
        on_new,
        all.len() as i64,
        "every acknowledged job is on the new primary"
    );
    let _ = old.close().await;
    let _ = new.close().await;

    let report = harness::check(&history);
    assert_eq!(
        report.stats.jobs,
        all.len() as u64,
        "no job lost or doubled"
    );
    assert_eq!(
        report.stats.job_states.get("succeeded"),
        Some(&(all.len() as u64))
    );
    assert_eq!(
        report.stats.side_effects,
        all.len() as u64,
        "no input reached the provider twice"
    );
    let records = onejob_chaos::history::read_history(history.path()).unwrap();
    let (killed, promoted) = (
        harness::fault_at(&records, "SIGKILL the primary"),
        harness::fault_at(&records, "standby promoted"),
    );
    // A request sent after the kill (and the moment its orphaned backends take to notice it)
    // and answered before the promotion gets only a 503 (with Retry-After, which the checker
    // requires of every 503), a replay's 200 or no answer. (One sent just before the kill
    // may be answered 201 later: its commit was on the synchronous standby, and the checks
    // above find its job on the new primary.)
    let first_201 = harness::answers_between(&records, 201, promoted, u64::MAX)
        .into_iter()
        .min()
        .expect("a job created after the promotion");
    let sent_after_kill: std::collections::HashSet<u64> = records
        .iter()
        .filter_map(|r| match r {
            Record::Request { t_ms, seq, .. } if *t_ms > killed + 200 => Some(*seq),
            _ => None,
        })
        .collect();
    let during: Vec<u16> = records
        .iter()
        .filter_map(|r| match r {
            Record::Response {
                t_ms,
                seq,
                status: Some(s),
                ..
            } if sent_after_kill.contains(seq) && *t_ms < promoted && *s != 503 && *s != 200 => {
                Some(*s)
            }
            _ => None,
        })
        .collect();
    assert!(
        during.is_empty(),
        "answers other than 503 during the switch: {during:?}"
    );
    println!(
        "failover: SIGKILL -> promoted {} ms; promoted -> first 201 {} ms; SIGKILL -> first 201 {} ms",
        promoted - killed,
        first_201 - promoted,
        first_201 - killed
    );
    drop(db);
}

/// An old primary left running after its synchronous standby was promoted away (a failover
/// manager that could not stop it) still accepts sessions and writes, and commits none of
/// them. A node whose URL lists it first must pass it over for the host that commits,
/// instead of waiting on it for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault suite: run with chaos/run.sh"]
async fn a_primary_whose_commits_never_complete_is_passed_over() {
    let hung = Cluster::start_new();
    // Its synchronous standby is gone: every commit waits for it.
    hung.set("synchronous_standby_names", "'gone'");
    let healthy = Cluster::start_new();
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        hung.port, healthy.port
    );
    let fake = FakeServer::spawn(([127, 0, 0, 1], 0).into()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let logs = harness::log_dir("hung-primary");
    let config = NodeConfig::new(&url, &fake.base_url()).write(dir.path(), "node");
    let mut node = Node::start("node", Role::Serve, &config, &[], &logs.join("node.log"));
    node.wait_ready().await;
    let token = create_key(&url, "hung", "client", false).await;
    let history = harness::history("hung-primary");
    let client = RecordingClient::new(history.clone(), "client", &token);
    let body = json!({"kind": "chat.completion", "params": {"prompt": "hung please"}});
    let answer = client.submit(&[node.url()], 0, "hung:1", &body, 50).await;
    assert_eq!(answer.status, Some(201), "{}", answer.body);
    // The job runs to its end there too, and the history is whole for the offline checker.
    let keys = vec!["hung:1".to_owned()];
    let reader = Reader::new(&node.url(), &token);
    let open = reader.wait_settled(&keys, Duration::from_secs(60)).await;
    assert!(open.is_empty(), "the job is still open");
    reader.record_jobs(&history, &keys).await;
    record_side_effects(&history, "fake", &fake).await;
    let report = harness::check(&history);
    assert_eq!(report.stats.side_effects, 1, "one side effect");
    let mut written = PgConnection::connect(&healthy.admin_url()).await.unwrap();
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&mut written)
        .await
        .unwrap();
    assert_eq!(jobs, 1, "the job is on the host that commits");
    let _ = written.close().await;
    node.terminate().await;
}
