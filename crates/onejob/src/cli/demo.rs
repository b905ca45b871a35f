//! `onejob demo`: everything embedded (SQLite in a demo directory, the bundled fake
//! providers, API and worker in one process), then four short scenes that show what each
//! guarantee does — the double click, the conflicting retry, the timeout that turns unknown
//! and its reconciliation, and the out-of-order race — through the real HTTP API. The
//! dashboard stays up afterwards until Ctrl-C (or the command exits with `--exit`).
//!
//! The demo directory (`--dir`, else `onejob-demo` in the system's temporary directory) is
//! kept across runs: its database, and the operator key in `operator-key` beside it, which
//! every later run on that database prints again instead of minting a new one (so a
//! dashboard signed in with it stays signed in).
//!
//! It needs the bundled fake (cargo feature `fake`, on by default); a build without it
//! keeps the command and says so.

#[cfg(feature = "fake")]
use std::time::Duration;
use std::{net::SocketAddr, path::PathBuf};

#[cfg(feature = "fake")]
use anyhow::{Context, bail};
#[cfg(feature = "fake")]
use onejob_fake::{Behaviour, Rule};
#[cfg(feature = "fake")]
use serde_json::{Value, json};

#[cfg(feature = "fake")]
use super::serve::{certify_bundled_fakes, shutdown_signal};
#[cfg(feature = "fake")]
use crate::{
    app::App,
    config::{Config, DEMO_CONFIG},
};

/// Arguments of `onejob demo`.
#[derive(Debug, clap::Args)]
#[cfg_attr(not(feature = "fake"), allow(dead_code))]
pub struct DemoArgs {
    /// Where the demo's API and dashboard listen.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Exit after the scenes instead of leaving the dashboard up.
    #[arg(long)]
    exit: bool,
    /// Where the demo keeps its SQLite database and operator key, across runs (default:
    /// `onejob-demo` in the system's temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
}

#[cfg(feature = "fake")]
/// The file beside the demo's database that keeps its operator key.
const KEY_FILE: &str = "operator-key";

#[cfg(feature = "fake")]
/// How long the demo's attempts may take before their outcome is unknown.
const DEMO_TIMEOUT: Duration = Duration::from_millis(800);

#[cfg(feature = "fake")]
/// How long the slow provider of scene 3 takes (longer than [`DEMO_TIMEOUT`]).
const SLOW_RUN: Duration = Duration::from_millis(2500);

/// Runs `onejob demo` (in a build without the bundled fake: says so).
#[cfg(not(feature = "fake"))]
pub async fn run(_args: DemoArgs) -> anyhow::Result<()> {
    anyhow::bail!(
        "this onejob was built without the bundled fake provider (cargo feature `fake`), \
         which the demo runs on; build onejob with its default features to play it"
    )
}

/// Runs `onejob demo`.
#[cfg(feature = "fake")]
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let dir = demo_dir(args.dir.clone())?;
    let database = format!("sqlite://{}", dir.join("onejob.db").display());
    let mut config = Config::from_toml(
        DEMO_CONFIG,
        "demo.toml".as_ref(),
        ".".into(),
        std::iter::empty(),
    )?;
    config.database = database.clone();
    config.listen = args.listen;
    config.worker.poll_interval = Duration::from_millis(200);
    for kind in &mut config.kinds {
        kind.attempt_timeout = DEMO_TIMEOUT;
        kind.retry_backoff = Duration::from_millis(100);
        // Images hedge (scene 4); chat does not, so its timeout can show (scene 3).
        if kind.name == "image.generate" {
            kind.attempt_timeout = Duration::from_secs(10);
            kind.hedge_after = Some(Duration::from_millis(300));
        }
    }
    let app = App::open(config).await?;
    let listener = app.bind().await?;
    let addr = listener.local_addr()?;
    certify_bundled_fakes(&app).await?;
    let (token, kept) =
        super::keys::kept_operator_key(&app.jobs.api_keys(), &dir.join(KEY_FILE)).await?;
    // The database outlives a run: each run's idempotency keys are its own.
    let run = uuid::Uuid::now_v7().simple().to_string();
    let key = |name: &str| format!("demo:{run}:{name}");
    let worker = app.spawn_worker();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = {
        let app = app.clone();
        tokio::spawn(async move {
            app.serve(listener, async {
                let _ = stopped.await;
            })
            .await
        })
    };
    let fakes = app.providers.bundled_fakes();
    let (primary, backup) = match fakes {
        [primary, backup, ..] => (primary.clone(), backup.clone()),
        _ => bail!("the demo configuration has two bundled fake providers"),
    };

    println!("onejob demo: one user intent, one job");
    println!("  everything embedded: {database}, two bundled fake providers (certified by");
    println!("  `onejob verify` against the demo contracts), API and worker on http://{addr}\n");
    let demo = Scenes {
        http: crate::provider::http_client(),
        base: format!("http://{addr}"),
        token: token.clone(),
    };
    let side_effects = || primary.submissions().total + backup.submissions().total;

    // 1. The double click.
    println!("1. The double click: 5 identical submissions under one key, all at once");
    let baseline = side_effects();
    let body = json!({"kind": "chat.completion", "params": {"prompt": "Describe a red fox."}});
    let caption = key("order-42:caption");
    let answers = futures::future::join_all((0..5).map(|_| demo.submit(&caption, &body))).await;
    let mut created = 0;
    let mut ids = Vec::new();
    for answer in answers {
        let (status, job) = answer?;
        created += usize::from(status == 201);
        ids.push(job["id"].as_str().unwrap_or_default().to_owned());
    }
    ids.dedup();
    let job = demo.wait(&ids[0]).await?;
    println!(
        "   → {} job ({}), {created} × 201 Created, {} × 200 Idempotent-Replayed",
        ids.len(),
        ids[0],
        5 - created
    );
    println!(
        "   → the provider ran it {} time(s); result {}",
        side_effects() - baseline,
        job["result"]
    );
    println!("   guarantee: one job per key; a unique constraint in the database decides\n");

    // 2. The conflicting retry.
    println!("2. The conflicting retry: the same key, the prompt changed by one space");
    let baseline = side_effects();
    let changed = json!({"kind": "chat.completion", "params": {"prompt": "Describe a  red fox."}});
    let (status, problem) = demo.submit(&caption, &changed).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    println!(
        "   → {status} {}: changed {} (paths, never values)",
        problem["type"].as_str().unwrap_or_default(),
        problem["changed"]
    );
    println!(
        "   → nothing ran (side effects: {}), the job is untouched",
        side_effects() - baseline
    );
    println!("   guarantee: a key is bound to its intent (RFC 8785 fingerprint)\n");

    // 3. The timeout that turns unknown, and its reconciliation.
    println!(
        "3. The timeout: the provider takes {}, the attempt's deadline is {}",
        super::display::duration(SLOW_RUN),
        super::display::duration(DEMO_TIMEOUT)
    );
    primary.add_rule(Rule {
        matches: Some("slow intent".into()),
        times: None,
        behaviour: Behaviour {
            run_ms: SLOW_RUN.as_millis() as u64,
            ..Default::default()
        },
    });
    let body = json!({"kind": "chat.completion", "params": {"prompt": "A slow intent."}});
    let (_, job) = demo.submit(&key("slow"), &body).await?;
    let id = job["id"].as_str().unwrap_or_default().to_owned();
    let unknown = demo.until(&id, |j| j["state"] == "unknown").await?;
    let attempts = demo.get(&format!("/v1/jobs/{id}/attempts")).await?;
    println!(
        "   → job {} is {}: attempt #1 {} (not failed: the upstream may still be working)",
        id, unknown["state"], attempts["attempts"][0]["error"]["reason"]
    );
    println!("   → nothing else starts while it is unknown; the reconciler asks the provider");
    let done = demo.wait(&id).await?;
    let attempts = demo.get(&format!("/v1/jobs/{id}/attempts")).await?;
    println!(
        "   → the provider's status said succeeded: job {}, still {} attempt(s), result {}",
        done["state"],
        attempts["attempts"].as_array().map_or(0, Vec::len),
        done["result"]
    );
    println!("   guarantee: timeouts are unknown, not failed; resolved by proof\n");

    // 4. The out-of-order race.
    println!("4. The race: the primary is sent first and answers last; a hedge answers first");
    primary.add_rule(Rule {
        matches: Some("a fox in the snow".into()),
        times: None,
        behaviour: Behaviour {
            run_ms: 2000,
            ..Default::default()
        },
    });
    let body = json!({"kind": "image.generate", "params": {"prompt": "a fox in the snow", "n": 1}});
    let (_, job) = demo.submit(&key("race"), &body).await?;
    let id = job["id"].as_str().unwrap_or_default().to_owned();
    let done = demo.wait(&id).await?;
    let settled = demo
        .until_attempts(&id, |a| {
            a.iter()
                .all(|x| x["state"] != "running" && x["state"] != "starting")
        })
        .await?;
    for attempt in settled["attempts"].as_array().into_iter().flatten() {
        println!(
            "   → attempt #{} on {}{}: {}",
            attempt["number"],
            attempt["provider"].as_str().unwrap_or_default(),
            if attempt["hedge"] == true {
                " (hedge)"
            } else {
                ""
            },
            attempt["state"].as_str().unwrap_or_default()
        );
    }
    let events = demo.get(&format!("/v1/jobs/{id}/events?limit=500")).await?;
    let lost = events["events"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["kind"] == "race_lost");
    println!(
        "   → the first to return won ({}); the late result was discarded, not merged{}",
        done["completed_by"].as_str().unwrap_or_default(),
        lost.map(|e| format!(
            " (race_lost: {} bytes, sha256 {}…)",
            e["detail"]["size"],
            &e["detail"]["sha256"].as_str().unwrap_or_default()[..12]
        ))
        .unwrap_or_default()
    );
    println!("   guarantee: one winner, by compare-and-swap on the job row\n");

    println!("dashboard: http://{addr}/ui  (API key, operator: {token})");
    let file = dir.join(KEY_FILE);
    if kept {
        println!("  (the same key as last time, kept in {})", file.display());
    } else {
        println!(
            "  (kept in {}: the next demo on this directory prints it again)",
            file.display()
        );
    }
    if args.exit {
        println!("done (--exit)");
    } else {
        println!("Ctrl-C to stop");
        shutdown_signal().await;
    }
    let _ = stop.send(());
    worker.shutdown().await;
    let _ = server.await;
    Ok(())
}

#[cfg(feature = "fake")]
/// The demo directory (`--dir`, else `onejob-demo` in the temporary directory), created if
/// need be.
fn demo_dir(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let dir = given.unwrap_or_else(|| std::env::temp_dir().join("onejob-demo"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

#[cfg(feature = "fake")]
/// The demo's HTTP calls, as a client application would make them.
struct Scenes {
    http: reqwest::Client,
    base: String,
    token: String,
}

#[cfg(feature = "fake")]
impl Scenes {
    async fn submit(&self, key: &str, body: &Value) -> anyhow::Result<(u16, Value)> {
        let response = self
            .http
            .post(format!("{}/v1/jobs", self.base))
            .bearer_auth(&self.token)
            .header("Idempotency-Key", key)
            .json(body)
            .send()
            .await?;
        let status = response.status().as_u16();
        Ok((status, response.json().await?))
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        Ok(self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await?
            .json()
            .await?)
    }

    /// Polls the job until `done` holds (at most 30 s).
    async fn until(&self, id: &str, done: impl Fn(&Value) -> bool) -> anyhow::Result<Value> {
        for _ in 0..600 {
            let job = self.get(&format!("/v1/jobs/{id}")).await?;
            if done(&job) {
                return Ok(job);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("job {id} did not get there in 30 s")
    }

    /// Polls the job's attempts until `done` holds (at most 30 s).
    async fn until_attempts(
        &self,
        id: &str,
        done: impl Fn(&[Value]) -> bool,
    ) -> anyhow::Result<Value> {
        for _ in 0..600 {
            let body = self.get(&format!("/v1/jobs/{id}/attempts")).await?;
            if body["attempts"]
                .as_array()
                .is_some_and(|a| !a.is_empty() && done(a))
            {
                return Ok(body);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("the attempts of job {id} did not settle in 30 s")
    }

    /// Waits for a terminal state.
    async fn wait(&self, id: &str) -> anyhow::Result<Value> {
        self.until(id, |j| {
            matches!(
                j["state"].as_str(),
                Some("succeeded" | "failed" | "cancelled")
            )
        })
        .await
    }
}
