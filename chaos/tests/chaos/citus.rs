//! A Citus worker node down mid-storm costs only its tenants: three `onejob serve` processes
//! on a Citus cluster (a coordinator and two workers, the job tables distributed by tenant),
//! careful clients of two tenants — one whose shard lives on worker 0, one on worker 1 —
//! submitting side by side, double clicks sprayed across the nodes. Worker 0 is stopped as a
//! crash would (`immediate`) and started again: while it is down, its tenant's submissions
//! are answered `503` (and retried), the other tenant's keep being created (`201`); once it
//! is back, every acknowledged job is there, one per key, each run once.

use std::time::Duration;

use onejob_chaos::{
    citus::CitusCluster,
    history::{Record, read_history},
    node::{NodeConfig, create_key},
    readback::{Reader, record_side_effects},
    scale::Scale,
};
use onejob_fake::{Behaviour, FakeServer, Rule};

use crate::harness;

/// Careful clients per tenant.
const CLIENTS: usize = 6;

/// Tenants tried until one on each worker is found.
const CANDIDATES: usize = 32;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "fault suite: run with chaos/run.sh"]
async fn a_citus_worker_down_costs_only_its_tenants() {
    let scale = Scale::from_env();
    let cluster = tokio::task::spawn_blocking(|| CitusCluster::start(2))
        .await
        .unwrap();
    let name = format!("onejob_chaos_citus_{}", uuid::Uuid::now_v7().simple());
    cluster.create_database(&name).await;
    let url = cluster.url(&name);
    let fake = FakeServer::spawn(([127, 0, 0, 1], 0).into()).await.unwrap();
    fake.add_rule(Rule {
        matches: None,
        times: None,
        behaviour: Behaviour {
            run_ms: 50,
            ..Default::default()
        },
    });
    let dir = tempfile::tempdir().unwrap();
    let logs = harness::log_dir("citus");
    let config = NodeConfig::new(&url, &fake.base_url()).write(dir.path(), "node");
    // The first node migrates, which distributes the tables.
    let mut nodes = harness::serve_nodes(3, &config, &logs).await;
    let urls: Vec<String> = nodes.iter().map(|n| n.url()).collect();

    // One tenant whose shard is on worker 0 (the one that goes down), one on worker 1.
    let candidates: Vec<String> = (0..CANDIDATES).map(|i| format!("tenant{i}")).collect();
    let down = cluster
        .tenants_on_worker(&name, "jobs", 0, &candidates)
        .await;
    let up = cluster
        .tenants_on_worker(&name, "jobs", 1, &candidates)
        .await;
    let (down, up) = (down[0].clone(), up[0].clone());
    let down_token = create_key(&url, &down, "client", false).await;
    let up_token = create_key(&url, &up, "client", false).await;
    let history = harness::history("citus");

    let per_tenant = scale.restart_keys / 2;
    let keys_of = |tenant: &str| -> Vec<String> {
        (0..per_tenant).map(|i| format!("{tenant}:{i}")).collect()
    };
    let (down_keys, up_keys) = (keys_of(&down), keys_of(&up));
    // Spread over the outage, so that both tenants submit while worker 0 is down.
    let window_ms = 12_000u64;
    let pace = Duration::from_millis(window_ms * CLIENTS as u64 / per_tenant as u64);
    let mut clients =
        harness::paced_storm(&history, &down_token, &urls, &down_keys, CLIENTS, pace, 200);
    clients.extend(harness::paced_storm(
        &history, &up_token, &urls, &up_keys, CLIENTS, pace, 200,
    ));

    tokio::time::sleep(Duration::from_millis(2_000)).await;
    history.fault("stop Citus worker 0");
    cluster.stop_worker(0);
    tokio::time::sleep(Duration::from_secs(8)).await;
    cluster.start_worker(0);
    history.fault("start Citus worker 0");

    let mut acknowledged = 0;
    for client in clients {
        acknowledged += client.await.unwrap().len();
    }
    assert_eq!(acknowledged, down_keys.len() + up_keys.len());
    for (token, keys) in [(&down_token, &down_keys), (&up_token, &up_keys)] {
        let reader = Reader::new(&urls[0], token);
        let open = reader.wait_settled(keys, Duration::from_secs(300)).await;
        assert!(
            open.is_empty(),
            "{} jobs still open: {:?}",
            open.len(),
            &open[..open.len().min(5)]
        );
        reader.record_jobs(&history, keys).await;
    }
    record_side_effects(&history, "fake", &fake).await;
    for node in &mut nodes {
        node.terminate().await;
    }

    let report = harness::check(&history);
    let all = (down_keys.len() + up_keys.len()) as u64;
    assert_eq!(report.stats.jobs, all, "no job lost or doubled");
    assert_eq!(report.stats.job_states.get("succeeded"), Some(&all));
    assert_eq!(
        report.stats.side_effects, all,
        "no input reached the provider twice"
    );

    // While worker 0 was down: its tenant got 503s and no job created; the other tenant's
    // jobs kept being created.
    let records = read_history(history.path()).unwrap();
    let (stopped, started) = (
        harness::fault_at(&records, "stop Citus worker 0"),
        harness::fault_at(&records, "start Citus worker 0"),
    );
    let tenant_of: std::collections::HashMap<u64, String> = records
        .iter()
        .filter_map(|r| match r {
            Record::Request {
                seq,
                key: Some(key),
                ..
            } => Some((*seq, key.split(':').next().unwrap_or_default().to_owned())),
            _ => None,
        })
        .collect();
    let answers = |tenant: &str, status: u16| {
        records
            .iter()
            .filter(|r| {
                matches!(r, Record::Response { t_ms, seq, status: Some(s), .. }
                if *s == status && *t_ms > stopped + 1_000 && *t_ms < started
                    && tenant_of.get(seq).map(String::as_str) == Some(tenant))
            })
            .count()
    };
    println!(
        "while worker 0 was down: {down}: {} × 503, {} × 201; {up}: {} × 503, {} × 201",
        answers(&down, 503),
        answers(&down, 201),
        answers(&up, 503),
        answers(&up, 201)
    );
    assert!(
        answers(&down, 503) > 0,
        "the down worker's tenant saw the outage"
    );
    assert_eq!(
        answers(&down, 201),
        0,
        "no job of the down worker's tenant was created"
    );
    assert!(
        answers(&up, 201) > 0,
        "the other tenant kept getting its jobs created"
    );
    assert_eq!(
        answers(&up, 503),
        0,
        "the other tenant never saw the outage"
    );
    cluster.drop_database(&name).await;
}
