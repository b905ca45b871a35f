//! Kill storm: three `onejob serve` nodes on one PostgreSQL database, every key submitted
//! several times at once across the nodes, and one node SIGKILLed mid-storm — with
//! submissions and attempts in flight, one of its requests still on its way to the provider
//! — and restarted. The attempts the dead node held become `unknown`; the reconciler must
//! resolve every one of them by proof, so that no job is left unknown and nothing runs twice
//! upstream. The provider is the fake (which honours `Idempotency-Key` and counts every side
//! effect) behind a slow network ([`SlowNet`]: what a node sends is held 300 ms on its way,
//! and lost if the node dies meanwhile). Three upstream shapes:
//!
//! * `lookup`: `adapter = "async-task"` with `lookup_url`: an attempt whose task id never
//!   came back is found under its forwarded key (or proven never received);
//! * `dedupe`: `adapter = "async-task"` without a lookup, certified first by the real
//!   `onejob verify` (the certificate proves it deduplicates by key): such an attempt is
//!   re-sent under its same key;
//! * `chat`: `adapter = "openai-chat"` on the fake's chat API, certified the same way: a
//!   synchronous call has no task id at all, so every unknown attempt is re-sent.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use futures::{StreamExt, future::join_all};
use onejob_chaos::{
    client::{Answer, RecordingClient},
    history::{Record, read_history},
    node::{self, Adapter, Node, NodeConfig, ProviderSpec, Role, create_key},
    postgres::{Database, shared_admin_url},
    readback::{Reader, record_side_effects},
    scale::Scale,
    slownet::SlowNet,
};
use onejob_fake::{Behaviour, FakeServer, Rule};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::harness;

const KIND: &str = "chat.completion";

/// Time between the starts of two keys' submissions (quick: 120 keys in 6 s).
const PACE: Duration = Duration::from_millis(50);

/// How long the killed node stays down (its leases, 2 s, expire meanwhile).
const DOWN: Duration = Duration::from_millis(1500);

/// How long the network holds what a node sends to the provider.
const NET_DELAY: Duration = Duration::from_millis(300);

/// The failure bound: every job must have succeeded this long after the storm's end.
const SETTLE: Duration = Duration::from_secs(120);

/// The work, by key (`i % 4`): a tag in the prompt that a fake rule matches, the delay
/// before the fake acknowledges the submit (tasks: before the task id comes back; chat: part
/// of the latency) and the run time after it. The late acknowledgement leaves attempts
/// without a task id when their node dies.
const WORK: [(&str, u64, u64); 4] = [
    ("w-quick", 100, 300),
    ("w-mid", 300, 700),
    ("w-lateack", 1200, 300),
    ("w-long", 200, 1500),
];

/// The upstream shape of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upstream {
    /// async-task with `lookup_url`.
    Lookup,
    /// async-task without a lookup, certified to deduplicate by key.
    Dedupe,
    /// openai-chat, certified to deduplicate by key.
    Chat,
}

impl Upstream {
    fn name(self) -> &'static str {
        match self {
            Upstream::Lookup => "lookup",
            Upstream::Dedupe => "dedupe",
            Upstream::Chat => "chat",
        }
    }

    fn provider(self, fake_url: &str) -> ProviderSpec {
        let adapter = match self {
            Upstream::Lookup => Adapter::AsyncTask { lookup: true },
            Upstream::Dedupe => Adapter::AsyncTask { lookup: false },
            Upstream::Chat => Adapter::OpenAiChat {
                model: "fake-chat".into(),
            },
        };
        let name = match self {
            Upstream::Lookup | Upstream::Dedupe => "tasks",
            Upstream::Chat => "chat",
        };
        ProviderSpec::new(name, fake_url, adapter)
    }

    /// Whether the run certifies the provider first (it has no lookup to prove anything).
    fn certified(self) -> bool {
        self != Upstream::Lookup
    }
}

/// An async-task provider that looks tasks up by key: every unknown attempt is resolved by
/// its task id or by the lookup.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "fault suite: run with chaos/run.sh"]
async fn a_node_killed_mid_storm_leaves_nothing_unknown_with_a_task_lookup() {
    kill_storm(Upstream::Lookup).await;
}

/// An async-task provider without a lookup, certified to deduplicate by key: unknown
/// attempts without a task id are re-sent under their same key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "fault suite: run with chaos/run.sh"]
async fn a_node_killed_mid_storm_leaves_nothing_unknown_with_a_certified_task_api() {
    kill_storm(Upstream::Dedupe).await;
}

/// An OpenAI-compatible chat provider, certified to deduplicate by key: every unknown
/// attempt is re-sent under its same key and answered from the upstream's cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "fault suite: run with chaos/run.sh"]
async fn a_node_killed_mid_storm_leaves_nothing_unknown_with_a_certified_chat_api() {
    kill_storm(Upstream::Chat).await;
}

/// What the run's figures are; printed and written to `<out>/killstorm-<name>.summary.json`
/// for RELIABILITY.md.
#[derive(Debug, Default, Serialize)]
struct Summary {
    scenario: String,
    scale: &'static str,
    keys: usize,
    copies: usize,
    /// `onejob verify`'s report line on deduplication, where the run certified.
    verify_evidence: Option<String>,
    /// What the victim held when it was killed, and when.
    kill: String,
    /// Keyed requests the network lost with the victim (never received by the provider).
    lost_in_network: u64,
    requests: u64,
    statuses: BTreeMap<u16, u64>,
    no_answer: u64,
    jobs: u64,
    attempts: u64,
    attempt_states: BTreeMap<String, u64>,
    became_unknown: u64,
    /// Unknown attempts whose provider had acknowledged them (async-task: the task id had
    /// come back and was stored; chat: the request had been sent).
    unknown_acknowledged: u64,
    /// Unknown attempts never acknowledged (async-task: no task id).
    unknown_unacknowledged: u64,
    /// Unknown attempts the reconciler re-sent under their key.
    resent_attempts: u64,
    resent_events: u64,
    /// How each unknown attempt ended: `<acknowledged or not>, <event> by <actor>: <note>`.
    resolved: BTreeMap<String, u64>,
    side_effects: u64,
    idempotent_replays: u64,
    most_unknown_jobs_seen: usize,
    /// From the last answer of the storm until every job had succeeded.
    storm_end_to_all_succeeded_ms: u64,
    /// From the kill until every job had succeeded.
    kill_to_all_succeeded_ms: u64,
    run_ms: u64,
}

async fn kill_storm(upstream: Upstream) {
    let run_started = Instant::now();
    let scale = Scale::from_env();
    let name = format!("killstorm-{}", upstream.name());
    let db = Database::create(&shared_admin_url()).await;
    let fake = FakeServer::spawn(([127, 0, 0, 1], 0).into()).await.unwrap();
    let net = SlowNet::spawn(fake.addr(), NET_DELAY).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let logs = harness::log_dir(&name);
    let provider = upstream.provider(&net.base_url());
    let mut config = NodeConfig::with_provider(&db.url, provider.clone());
    config.lease = Duration::from_secs(2);
    config.attempt_timeout = Duration::from_secs(5);
    let config = config.write(dir.path(), "node");
    let mut summary = Summary {
        scenario: name.clone(),
        scale: scale.name,
        keys: scale.killstorm_keys,
        copies: scale.killstorm_copies,
        ..Summary::default()
    };

    // Certify first, with the real binary on the nodes' own configuration and database.
    if upstream.certified() {
        let (passed, report) = node::verify(&config, &provider.name, KIND).await;
        assert!(passed, "onejob verify did not pass: {report:#}");
        assert_eq!(
            report["idempotency"]["deduplicated"], true,
            "the certificate must prove deduplication: {report:#}"
        );
        assert_eq!(report["idempotency"]["header"], "Idempotency-Key");
        assert!(report.get("lookup").is_none(), "no lookup: {report:#}");
        let spent = fake.submissions();
        assert_eq!(
            (spent.total, spent.idempotent_replays),
            (1, 1),
            "verify sends its case once and again under the same key"
        );
        summary.verify_evidence = report["idempotency"]["evidence"].as_str().map(Into::into);
        // Verify's own task or answer (under a key of its own) is no job's side effect.
        fake.reset();
    }
    for (tag, ack, run) in WORK {
        fake.add_rule(Rule {
            matches: Some(tag.into()),
            times: None,
            behaviour: Behaviour {
                ack_delay_ms: ack,
                run_ms: run,
                ..Default::default()
            },
        });
    }

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
    let token = create_key(&db.url, "killstorm", "client", false).await;
    let operator = Reader::new(
        &urls[0],
        &create_key(&db.url, "killstorm", "operator", true).await,
    );
    if upstream.certified() {
        // The serving nodes hold the certificate valid, dedupe proven, under their settings.
        let page = operator
            .get("/v1/certificates")
            .await
            .expect("certificates");
        let certificate = page["certificates"]
            .as_array()
            .and_then(|all| {
                all.iter()
                    .find(|c| c["provider"] == provider.name.as_str() && c["kind"] == KIND)
            })
            .unwrap_or_else(|| panic!("no certificate recorded: {page:#}"));
        assert_eq!(certificate["valid"], true, "{certificate:#}");
        assert_eq!(
            certificate["report"]["idempotency"]["deduplicated"], true,
            "{certificate:#}"
        );
    }

    let history = harness::history(&name);
    let client = RecordingClient::new(history.clone(), name.clone(), &token);
    let keys: Vec<String> = (0..scale.killstorm_keys)
        .map(|i| format!("killstorm:{i}"))
        .collect();
    let storm_started = Instant::now();
    let urls = Arc::new(urls);
    let submissions: Vec<_> = keys
        .iter()
        .enumerate()
        .flat_map(|(i, key)| {
            let (tag, _, _) = WORK[i % WORK.len()];
            let body = json!({"kind": KIND, "params": {"prompt": format!("killstorm {i} {tag}")}});
            let start = storm_started + PACE * i as u32;
            (0..scale.killstorm_copies).map({
                let (client, urls) = (client.clone(), urls.clone());
                move |copy| {
                    let (client, urls, key, body) =
                        (client.clone(), urls.clone(), key.clone(), body.clone());
                    tokio::spawn(async move {
                        tokio::time::sleep_until(start).await;
                        let answer = client.submit(&urls, i + copy, &key, &body, 20).await;
                        (key, answer)
                    })
                }
            })
        })
        .collect();

    // Mid-storm, once the victim holds attempts in flight, one of them with its request
    // still on its way to the provider, SIGKILL it; restart it on the same address.
    let victim = 1;
    tokio::time::sleep_until(storm_started + PACE * (keys.len() as u32 / 2)).await;
    let worker_of_victim = format!(":{}:", nodes[victim].pid().expect("victim runs"));
    let aim_until = storm_started + PACE * keys.len() as u32;
    let (starting, running, on_the_way) = loop {
        let mut held: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for state in ["starting", "running"] {
            let page = operator
                .get(&format!("/v1/attempts?state={state}&limit=500"))
                .await
                .expect("attempts");
            for attempt in page["attempts"].as_array().into_iter().flatten() {
                if attempt["worker"]
                    .as_str()
                    .is_some_and(|w| w.contains(&worker_of_victim))
                {
                    let job = attempt["job_id"].as_str().unwrap_or_default().to_owned();
                    held.entry(state).or_default().push(job);
                }
            }
        }
        let in_the_network: BTreeSet<String> = net
            .held_keys()
            .iter()
            .map(|key| job_of_upstream_key(key).to_owned())
            .collect();
        let count = |state| held.get(state).map_or(0, Vec::len);
        let on_the_way = held
            .values()
            .flatten()
            .filter(|job| in_the_network.contains(*job))
            .count();
        let (starting, running) = (count("starting"), count("running"));
        if (on_the_way >= 1 && starting + running >= 3) || Instant::now() >= aim_until {
            break (starting, running, on_the_way);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    nodes[victim].kill().await;
    let killed_at = Instant::now();
    summary.kill = format!(
        "SIGKILL node{victim} {} ms into the storm, holding {starting} starting and {running} \
         running attempts, {on_the_way} of them with the request on its way",
        (killed_at - storm_started).as_millis()
    );
    history.fault(summary.kill.clone());
    assert!(
        starting + running > 0,
        "the victim held no attempt when it was killed: the run proves nothing"
    );
    tokio::time::sleep(DOWN).await;
    nodes[victim].restart(&logs.join(format!("node{victim}-restarted.log")));
    nodes[victim].wait_ready().await;
    history.fault(format!(
        "node{victim} restarted after {} ms down",
        killed_at.elapsed().as_millis()
    ));

    let answers: Vec<(String, Answer)> = join_all(submissions)
        .await
        .into_iter()
        .map(|joined| joined.expect("submission task"))
        .collect();
    let storm_ended = Instant::now();
    let mut ids_by_key: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (key, answer) in &answers {
        assert!(
            matches!(answer.status, Some(200 | 201)),
            "{key}: every submission is answered 200/201 in the end: {answer:?}"
        );
        ids_by_key
            .entry(key)
            .or_default()
            .insert(answer.body["id"].as_str().expect("job id"));
    }
    for (key, ids) in &ids_by_key {
        assert_eq!(ids.len(), 1, "{key} names exactly one job: {ids:?}");
    }
    assert_eq!(ids_by_key.len(), keys.len());

    // Every job succeeded (so none is left unknown) within SETTLE of the storm's end.
    let reader = Reader::new(&urls[0], &token);
    let mut most_unknown = 0;
    let all_succeeded_at = loop {
        let states: Vec<String> = futures::stream::iter(&keys)
            .map(|key| async {
                reader
                    .job_by_key(key)
                    .await
                    .and_then(|job| job["state"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| "missing".into())
            })
            .buffer_unordered(8)
            .collect()
            .await;
        let mut by_state: BTreeMap<&str, usize> = BTreeMap::new();
        for state in &states {
            *by_state.entry(state).or_default() += 1;
        }
        most_unknown = most_unknown.max(by_state.get("unknown").copied().unwrap_or(0));
        if by_state.get("succeeded") == Some(&keys.len()) {
            break Instant::now();
        }
        let ended_otherwise: usize = ["failed", "cancelled", "missing"]
            .iter()
            .filter_map(|s| by_state.get(s))
            .sum();
        assert!(
            ended_otherwise == 0 && storm_ended.elapsed() < SETTLE,
            "{:?} after the storm's end, jobs by state: {by_state:?} (node logs in {})",
            storm_ended.elapsed(),
            logs.display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    summary.most_unknown_jobs_seen = most_unknown;
    summary.storm_end_to_all_succeeded_ms = (all_succeeded_at - storm_ended).as_millis() as u64;
    summary.kill_to_all_succeeded_ms = (all_succeeded_at - killed_at).as_millis() as u64;

    reader.record_jobs(&history, &keys).await;
    let effects = fake.submissions();
    record_side_effects(&history, &provider.name, &fake).await;
    for node in &mut nodes {
        node.terminate().await;
    }

    let report = harness::check(&history);
    summary.requests = report.stats.requests;
    summary.statuses = report.stats.statuses.clone();
    summary.no_answer = report.stats.transport_errors;
    summary.jobs = report.stats.jobs;
    summary.attempts = report.stats.attempts;
    summary.attempt_states = report.stats.attempt_states.clone();
    summary.became_unknown = report.stats.became_unknown;
    summary.side_effects = effects.total;
    summary.idempotent_replays = effects.idempotent_replays;
    summary.lost_in_network = net.lost();
    summarize_unknowns(&history, &mut summary);
    summary.run_ms = run_started.elapsed().as_millis() as u64;
    let text = serde_json::to_string_pretty(&summary).expect("summary JSON");
    println!("{name} summary: {text}");
    std::fs::write(
        harness::out_dir().join(format!("{name}.summary.json")),
        &text,
    )
    .expect("write the summary");

    assert_eq!(report.stats.jobs, keys.len() as u64, "one job per key");
    assert_eq!(
        report.stats.job_states.get("succeeded"),
        Some(&(keys.len() as u64)),
        "every job succeeded: none left unknown"
    );
    assert_eq!(
        effects.total,
        keys.len() as u64,
        "exactly one side effect per job at the provider"
    );
    let mut per_job: BTreeMap<&str, u64> = BTreeMap::new();
    for request in &effects.requests {
        let key = request.idempotency_key.as_deref().unwrap_or_default();
        let job = job_of_upstream_key(key);
        // No attempt failed definitely at the provider, so no key was renewed: every retry
        // (after "never received") went under the job's first key.
        assert_eq!(key, format!("onejob:{job}"), "the upstream key was kept");
        *per_job.entry(job).or_default() += 1;
    }
    assert!(
        per_job.values().all(|n| *n == 1) && per_job.len() == keys.len(),
        "one side effect for each job: {per_job:?}"
    );
    assert!(
        summary.became_unknown > 0,
        "the kill made no attempt unknown: the run proves nothing"
    );
    assert_eq!(
        summary
            .resolved
            .keys()
            .filter(|how| !how.contains(" by reconciler"))
            .count(),
        0,
        "every unknown attempt is resolved by the reconciler's proof: {:?}",
        summary.resolved
    );
    match upstream {
        Upstream::Lookup => assert_eq!(summary.resent_events, 0, "nothing is re-sent"),
        // Only an attempt without a task id is re-sent; one with a task id is asked its status.
        Upstream::Dedupe => assert_eq!(
            summary.resent_attempts, summary.unknown_unacknowledged,
            "{summary:?}"
        ),
        // A chat call has no task id: every unknown attempt is re-sent.
        Upstream::Chat => assert_eq!(
            summary.resent_attempts, summary.became_unknown,
            "{summary:?}"
        ),
    }
}

/// How the attempts that became unknown were acknowledged and ended, from the read-back.
fn summarize_unknowns(history: &onejob_chaos::history::History, summary: &mut Summary) {
    let records = read_history(history.path()).expect("read the history back");
    for record in &records {
        let Record::Job {
            attempts, events, ..
        } = record
        else {
            continue;
        };
        for unknown in events.iter().filter(|e| e["kind"] == "attempt_unknown") {
            let id = &unknown["attempt_id"];
            let attempt = attempts.iter().find(|a| a["id"] == *id);
            let resent = events
                .iter()
                .filter(|e| e["attempt_id"] == *id && e["kind"] == "resent")
                .count() as u64;
            summary.resent_events += resent;
            if resent > 0 {
                summary.resent_attempts += 1;
            }
            let end = events.iter().find(|e| {
                e["attempt_id"] == *id
                    && e["id"].as_i64() > unknown["id"].as_i64()
                    && matches!(
                        e["kind"].as_str(),
                        Some("won" | "race_lost" | "attempt_resolved")
                    )
            });
            let acknowledged = if attempt.is_some_and(|a| a["acknowledged_at"].is_string()) {
                "acknowledged"
            } else {
                "unacknowledged"
            };
            if acknowledged == "acknowledged" {
                summary.unknown_acknowledged += 1;
            } else {
                summary.unknown_unacknowledged += 1;
            }
            let how = match end {
                None => format!("{acknowledged}, still unknown"),
                Some(end) => format!(
                    "{acknowledged}, {}{} by {}: {}",
                    end["kind"].as_str().unwrap_or("?"),
                    if resent > 0 { " after a re-send" } else { "" },
                    end["actor"].as_str().unwrap_or("nobody"),
                    note_of(end)
                ),
            };
            *summary.resolved.entry(how).or_default() += 1;
        }
    }
}

/// The job id in an upstream key, `onejob:<job id>[:<n>]`.
fn job_of_upstream_key(key: &str) -> &str {
    let rest = key.strip_prefix("onejob:").unwrap_or(key);
    rest.split(':').next().unwrap_or(rest)
}

/// The reason an ending event gives (its `note`, else its `outcome`).
fn note_of(event: &Value) -> String {
    let detail = &event["detail"];
    detail["note"]
        .as_str()
        .or_else(|| detail["outcome"].as_str())
        .unwrap_or("-")
        .to_owned()
}
