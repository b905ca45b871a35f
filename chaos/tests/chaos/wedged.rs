//! A failover where the old primary stays up but stops committing: a throwaway primary with a
//! synchronous streaming standby, two onejob nodes on the multi-host URL
//! (`target_session_attrs=read-write`), a paced storm of clients. Mid-storm the standby is
//! cut off (its `primary_conninfo` emptied: it stops streaming, as a partitioned standby
//! would), so every commit on the primary waits for a confirmation that never comes, while
//! the primary keeps saying it is read-write; then the test, playing the failover manager,
//! promotes the standby, and leaves the old primary running.
//!
//! Asserted: both nodes' `/readyz` answer `503` before the promotion; between the cut and
//! the promotion no `201` (nothing commits, so nothing may be acknowledged); writes resume
//! on the new primary within 15 s of the promotion (the target, the one duration
//! this suite asserts); every key accepted, every acknowledged job on the new primary, one
//! job per key, each run once, and the history checker's rules.

use std::time::Duration;

use onejob_chaos::{
    client::http_client,
    history::Record,
    node::{Node, NodeConfig, create_key},
    postgres::Cluster,
    readback::{Reader, record_side_effects},
    scale::Scale,
};
use onejob_fake::{Behaviour, FakeServer, Rule};
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

use crate::harness;

/// Clients submitting at once.
const CLIENTS: usize = 12;

/// The nodes.
const NODES: usize = 2;

/// The target: promotion → first `201`.
const RESUME_WITHIN_MS: u64 = 15_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "fault suite: run with chaos/run.sh"]
async fn a_primary_that_stops_committing_mid_storm_yields_to_the_promoted_standby() {
    let scale = Scale::from_env();
    let primary = Cluster::start_new();
    let standby = Cluster::start_standby_of(&primary);
    // The clusters' own `postgres` database: dropping a database of the old primary at the
    // end would wait on its commit for ever.
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
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
    let logs = harness::log_dir("wedged-failover");
    let config = NodeConfig::new(&url, &fake.base_url()).write(dir.path(), "node");
    let mut nodes = harness::serve_nodes(NODES, &config, &logs).await;
    let urls: Vec<String> = nodes.iter().map(Node::url).collect();
    let token = create_key(&url, "wedged", "client", false).await;
    let history = harness::history("wedged-failover");

    let keys: Vec<String> = (0..scale.wedge_keys)
        .map(|i| format!("wedged:{i}"))
        .collect();
    // Paced so that, unhindered, the storm would span 20 s: the cut, the promotion and the
    // recovery all fall inside it.
    let pace = Duration::from_millis(20_000 * CLIENTS as u64 / keys.len() as u64);
    let clients = harness::paced_storm(&history, &token, &urls, &keys, CLIENTS, pace, 500);

    tokio::time::sleep(Duration::from_secs(3)).await;
    history.fault("cut off the standby: commits wait for it");
    standby.set("primary_conninfo", "''");
    // Every node must say that it cannot commit, while the old primary still says it is
    // read-write and nothing has been promoted.
    for (at, node) in urls.iter().enumerate() {
        wait_readiness(node, 503).await;
        history.fault(format!("node{at} /readyz 503"));
    }
    // A failover manager notices and decides: a second here.
    tokio::time::sleep(Duration::from_secs(1)).await;
    history.fault("promote the standby");
    standby.promote();
    history.fault("standby promoted");

    let mut acknowledged: Vec<String> = Vec::new();
    for client in clients {
        acknowledged.extend(client.await.unwrap());
    }
    let reader = Reader::new(&urls[0], &token);
    let open = reader.wait_settled(&keys, Duration::from_secs(300)).await;
    assert!(
        open.is_empty(),
        "{} jobs still open: {:?}",
        open.len(),
        &open[..open.len().min(5)]
    );
    for node in &urls {
        wait_readiness(node, 200).await;
    }
    reader.record_jobs(&history, &keys).await;
    record_side_effects(&history, "fake", &fake).await;
    for node in &mut nodes {
        node.terminate().await;
    }

    // Every acknowledged job is on the new primary, and there is one job per key.
    let mut new = PgConnection::connect(&standby.admin_url()).await.unwrap();
    let ids: Vec<Uuid> = acknowledged.iter().map(|id| id.parse().unwrap()).collect();
    let present: i64 = sqlx::query_scalar("SELECT count(DISTINCT id) FROM jobs WHERE id = ANY($1)")
        .bind(&ids)
        .fetch_one(&mut new)
        .await
        .unwrap();
    let distinct: std::collections::HashSet<&Uuid> = ids.iter().collect();
    assert_eq!(
        present,
        distinct.len() as i64,
        "an acknowledged job is missing on the new primary"
    );
    let on_new: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&mut new)
        .await
        .unwrap();
    assert_eq!(
        on_new,
        keys.len() as i64,
        "one job per key on the new primary"
    );
    let _ = new.close().await;

    let report = harness::check(&history);
    assert_eq!(
        report.stats.jobs,
        keys.len() as u64,
        "no job lost or doubled"
    );
    assert_eq!(
        report.stats.side_effects,
        keys.len() as u64,
        "no input reached the provider twice"
    );
    let records = onejob_chaos::history::read_history(history.path()).unwrap();
    let (cut, promoted) = (
        harness::fault_at(&records, "cut off the standby: commits wait for it"),
        harness::fault_at(&records, "standby promoted"),
    );
    let acknowledged_while_wedged = harness::answers_between(&records, 201, cut + 1000, promoted);
    assert!(
        acknowledged_while_wedged.is_empty(),
        "201s while no commit could complete: {acknowledged_while_wedged:?}"
    );
    let first_201 = harness::answers_between(&records, 201, promoted, u64::MAX)
        .into_iter()
        .min()
        .expect("a job created after the promotion");
    let status_count = |status: u16| {
        records
            .iter()
            .filter(|r| matches!(r, Record::Response { status: Some(s), .. } if *s == status))
            .count()
    };
    println!(
        "wedged failover: cut -> promoted {} ms; promoted -> first 201 {} ms; {} x 201, {} x 200, \
         {} x 503; {} jobs, {} side effects",
        promoted - cut,
        first_201 - promoted,
        status_count(201),
        status_count(200),
        status_count(503),
        report.stats.jobs,
        report.stats.side_effects,
    );
    assert!(
        first_201 - promoted <= RESUME_WITHIN_MS,
        "writes resumed {} ms after the promotion, past the {RESUME_WITHIN_MS} ms target",
        first_201 - promoted
    );
    drop((primary, standby));
}

/// Waits until `node`'s `/readyz` answers `status` (bounded, so that a broken build fails
/// instead of hanging).
async fn wait_readiness(node: &str, status: u16) {
    let http = http_client(Duration::from_secs(30));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let answered = http
            .get(format!("{node}/readyz"))
            .send()
            .await
            .map(|r| r.status().as_u16());
        if answered.as_ref().ok() == Some(&status) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{node}/readyz never answered {status} (last: {answered:?})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
