//! `onejob-loadgen`: the load generator of onejob's benchmark harness (bench/run.sh).
//!
//! Every subcommand waits for `GET /readyz`, prints one JSON document on stdout and
//! progress on stderr.
//!
//! - `intake`: N clients, each one keep-alive connection, share a counter of J jobs and
//!   `POST /v1/jobs` with unique keys (expect 201); with `--replay` the same keys and params
//!   are submitted again (expect 200 `Idempotent-Replayed`). Closed loop: a client sends its
//!   next request when the previous answer is read. With `--keys-file` (one API key a
//!   line, e.g. one per tenant) the jobs are spread over the keys, job `i` under key `i mod n`.
//! - `dispatch`: serves an OpenAI-compatible `/v1/chat/completions` sink, submits jobs one
//!   at a time at a fixed rate, and reports, per job, the time from the 201 arriving at the
//!   client to the sink receiving the provider call (the prompt carries a marker `#D<i>#`).
//! - `e2e`: submits J jobs with N clients while the worker runs, then polls `/metrics`
//!   until `onejob_attempts_ended_total{outcome="won"}` grew by J: jobs/s end to end.
//! - `hold`: opens C keep-alive connections (one `GET /healthz`, optionally one
//!   `POST /v1/jobs` each), holds them and reports the server's VmRSS.
//! - `gateway`: serves the same instant OpenAI-compatible sink as `dispatch`, and measures,
//!   closed loop with N clients, chat completions sent straight to the sink, the same calls
//!   through onejob's `POST /v1/chat/completions` under new idempotency keys (each a job run
//!   by the worker against the sink), and the same keys again (replays of finished calls).

mod client;
mod stats;

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use clap::{Args, Parser, Subcommand};
use hyper::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Barrier;

use client::{Conn, wait_ready};
use stats::{Phase, RssSampler, percentiles, rss_kib};

#[derive(Parser)]
#[command(name = "onejob-loadgen", about = "onejob's benchmark load generator")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone)]
struct Target {
    /// onejob's listen address.
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// API key (`oj_…`).
    #[arg(
        long,
        env = "ONEJOB_API_KEY",
        required_unless_present = "keys_file",
        default_value = ""
    )]
    key: String,
    /// A file of API keys, one a line (e.g. one per tenant): in `intake` and `gateway`,
    /// call `i` of a phase (key `<prefix>-<i>`) uses key `i mod n`, so that a replay is
    /// sent with the key its job was created with; the other subcommands use the first.
    #[arg(long)]
    keys_file: Option<std::path::PathBuf>,
    /// The job kind to submit (its params schema must accept `{"prompt": string}`).
    #[arg(long, default_value = "bench.chat")]
    kind: String,
    /// Prefix of every idempotency key (unique per run).
    #[arg(long, default_value = "run")]
    prefix: String,
    /// onejob's pid: its peak VmRSS during the measured phases is reported.
    #[arg(long)]
    pid: Option<u32>,
}

impl Target {
    /// The `Authorization` values: one per key of `--keys-file`, else `--key`'s.
    fn bearers(&self) -> Result<Vec<String>, String> {
        let keys: Vec<String> = match &self.keys_file {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|e| format!("--keys-file {}: {e}", path.display()))?
                .lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .map(str::to_owned)
                .collect(),
            None => vec![self.key.clone()],
        };
        if keys.is_empty() || keys.iter().any(String::is_empty) {
            return Err("no API key: give --key or a non-empty --keys-file".into());
        }
        Ok(keys
            .into_iter()
            .map(|key| format!("Bearer {key}"))
            .collect())
    }

    /// The first `Authorization` value.
    fn bearer(&self) -> Result<String, String> {
        Ok(self.bearers()?.swap_remove(0))
    }
}

#[derive(Subcommand)]
enum Command {
    /// New keys (201), optionally then replays of the same keys (200).
    Intake {
        #[command(flatten)]
        target: Target,
        /// Concurrent clients (= connections).
        #[arg(long, default_value_t = 8)]
        clients: usize,
        /// Measured jobs.
        #[arg(long, default_value_t = 10_000)]
        jobs: usize,
        /// Unmeasured jobs first (connections, pool and caches warm up).
        #[arg(long, default_value_t = 500)]
        warmup: usize,
        /// After the intake phase, submit the same keys again and measure that.
        #[arg(long)]
        replay: bool,
        /// Only the replay phase: the keys `<prefix>-0..jobs` exist already (a previous
        /// `intake` with the same prefix); the warm-up replays the first `warmup` of them.
        #[arg(long, conflicts_with = "replay")]
        replay_only: bool,
    },
    /// Dispatch latency: 201 at the client -> provider call at the sink.
    Dispatch {
        #[command(flatten)]
        target: Target,
        /// Where the sink (an OpenAI-compatible chat endpoint) listens.
        #[arg(long, default_value = "127.0.0.1:9400")]
        sink: SocketAddr,
        /// Measured jobs.
        #[arg(long, default_value_t = 500)]
        jobs: usize,
        /// Unmeasured jobs first.
        #[arg(long, default_value_t = 20)]
        warmup: usize,
        /// Submissions per second (open loop, one connection).
        #[arg(long, default_value_t = 50.0)]
        rate: f64,
    },
    /// End-to-end jobs/s through a provider, worker running.
    E2e {
        #[command(flatten)]
        target: Target,
        #[arg(long, default_value_t = 32)]
        clients: usize,
        #[arg(long, default_value_t = 5_000)]
        jobs: usize,
        /// Give up waiting for completions after this many seconds.
        #[arg(long, default_value_t = 300)]
        timeout_s: u64,
    },
    /// The gateway's overhead: chat calls straight to a sink, the same through onejob
    /// (new keys), and replays of those keys.
    Gateway {
        #[command(flatten)]
        target: Target,
        /// Where the sink (an instant OpenAI-compatible chat endpoint) listens; onejob's
        /// gateway kind must send to it.
        #[arg(long, default_value = "127.0.0.1:9400")]
        sink: SocketAddr,
        /// The model onejob's gateway kind serves.
        #[arg(long, default_value = "bench")]
        model: String,
        #[arg(long, default_value_t = 8)]
        clients: usize,
        /// Measured calls per phase.
        #[arg(long, default_value_t = 2_000)]
        calls: usize,
        /// Unmeasured calls before each kind of phase.
        #[arg(long, default_value_t = 200)]
        warmup: usize,
    },
    /// Holds many open connections and reports the server's RSS.
    Hold {
        #[command(flatten)]
        target: Target,
        #[arg(long, default_value_t = 1000)]
        conns: usize,
        /// Also send one `POST /v1/jobs` on every connection, all at once.
        #[arg(long)]
        post: bool,
        /// How long to hold them.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
    },
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Intake {
            target,
            clients,
            jobs,
            warmup,
            replay,
            replay_only,
        } => intake(target, clients, jobs, warmup, replay, replay_only).await,
        Command::Dispatch {
            target,
            sink,
            jobs,
            warmup,
            rate,
        } => dispatch(target, sink, jobs, warmup, rate).await,
        Command::E2e {
            target,
            clients,
            jobs,
            timeout_s,
        } => e2e(target, clients, jobs, Duration::from_secs(timeout_s)).await,
        Command::Gateway {
            target,
            sink,
            model,
            clients,
            calls,
            warmup,
        } => gateway(target, sink, model, clients, calls, warmup).await,
        Command::Hold {
            target,
            conns,
            post,
            seconds,
        } => hold(target, conns, post, Duration::from_secs(seconds)).await,
    };
    match result {
        Ok(value) => println!("{}", serde_json::to_string_pretty(&value).unwrap()),
        Err(error) => {
            eprintln!("onejob-loadgen: {error}");
            std::process::exit(1);
        }
    }
}

/// A submission's body.
fn submission(kind: &str, prompt: &str) -> Bytes {
    Bytes::from(json!({"kind": kind, "params": {"prompt": prompt}}).to_string())
}

async fn submit(
    conn: &mut Conn,
    bearer: &str,
    kind: &str,
    key: &str,
    prompt: &str,
) -> Result<client::Answer, String> {
    conn.call(
        "POST",
        "/v1/jobs",
        &[
            ("authorization", bearer),
            ("idempotency-key", key),
            ("content-type", "application/json"),
        ],
        Some(submission(kind, prompt)),
    )
    .await
}

/// What one request of a phase is.
#[derive(Clone)]
enum Call {
    /// `POST /v1/jobs` to onejob.
    Submit,
    /// `POST /v1/chat/completions` to onejob (the gateway), naming `model`.
    Chat(String),
    /// `POST /v1/chat/completions` straight to the upstream sink, without onejob.
    Direct(SocketAddr),
}

/// A closed-loop phase: `total` calls under keys `<prefix>-<i>` expecting `expect`.
struct PhaseSpec {
    name: &'static str,
    prefix: String,
    total: usize,
    expect: StatusCode,
    call: Call,
}

/// A chat completion request for `prompt`.
fn chat_request(model: &str, prompt: &str) -> Bytes {
    Bytes::from(
        json!({"model": model, "messages": [{"role": "user", "content": prompt}]}).to_string(),
    )
}

async fn chat(
    conn: &mut Conn,
    bearer: &str,
    model: &str,
    key: &str,
    prompt: &str,
) -> Result<client::Answer, String> {
    conn.call(
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", bearer),
            ("idempotency-key", key),
            ("content-type", "application/json"),
        ],
        Some(chat_request(model, prompt)),
    )
    .await
}

struct PhaseOutcome {
    phase: Phase,
    started: Instant,
}

/// Runs phases back to back with `clients` connections; every client joins every phase
/// (a barrier separates them, so phases never overlap).
async fn run_phases(
    target: &Target,
    clients: usize,
    specs: Vec<PhaseSpec>,
) -> Result<Vec<PhaseOutcome>, String> {
    let specs = Arc::new(specs);
    let counters: Arc<Vec<AtomicUsize>> =
        Arc::new(specs.iter().map(|_| AtomicUsize::new(0)).collect());
    let barrier = Arc::new(Barrier::new(clients + 1));
    let bearers = Arc::new(target.bearers()?);
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (specs, counters, barrier, bearers) = (
            specs.clone(),
            counters.clone(),
            barrier.clone(),
            bearers.clone(),
        );
        let (addr, kind) = (target.addr, target.kind.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = open_retrying(addr).await.expect("cannot connect to onejob");
            // One connection to the upstream sink too, for phases that call it directly.
            let mut direct = None;
            let mut results = Vec::new();
            for (p, spec) in specs.iter().enumerate() {
                if let Call::Direct(sink) = spec.call
                    && direct.is_none()
                {
                    direct = Some(
                        open_retrying(sink)
                            .await
                            .expect("cannot connect to the sink"),
                    );
                }
                barrier.wait().await;
                let mut latencies = Vec::new();
                let mut unexpected: BTreeMap<String, u64> = BTreeMap::new();
                loop {
                    let i = counters[p].fetch_add(1, Ordering::Relaxed);
                    if i >= spec.total {
                        break;
                    }
                    let key = format!("{}-{i}", spec.prefix);
                    let prompt = format!("bench {key}");
                    let bearer = &bearers[i % bearers.len()];
                    let sent = Instant::now();
                    let answer = match &spec.call {
                        Call::Submit => submit(&mut conn, bearer, &kind, &key, &prompt).await,
                        Call::Chat(model) => chat(&mut conn, bearer, model, &key, &prompt).await,
                        Call::Direct(_) => {
                            let direct = direct.as_mut().expect("opened for this phase");
                            chat(direct, bearer, "bench", &key, &prompt).await
                        }
                    };
                    match answer {
                        Ok(answer) if answer.status == spec.expect => {
                            latencies.push(sent.elapsed().as_micros() as i64)
                        }
                        Ok(answer) => {
                            *unexpected
                                .entry(answer.status.as_u16().to_string())
                                .or_default() += 1;
                            if unexpected.values().sum::<u64>() <= 3 {
                                eprintln!(
                                    "unexpected {}: {}",
                                    answer.status,
                                    String::from_utf8_lossy(&answer.body)
                                );
                            }
                        }
                        Err(error) => {
                            *unexpected.entry("io".into()).or_default() += 1;
                            eprintln!("transport error: {error}");
                            let _ = conn.reopen().await;
                        }
                    }
                }
                barrier.wait().await;
                results.push((latencies, unexpected));
            }
            results
        }));
    }
    let mut times = Vec::new();
    let mut cpu = Vec::new();
    for spec in specs.iter() {
        barrier.wait().await;
        let started = Instant::now();
        let cpu_before = target.pid.and_then(stats::cpu_ticks);
        let machine_before = stats::CpuByProgram::now();
        barrier.wait().await;
        times.push((started, started.elapsed()));
        let cpu_after = target.pid.and_then(stats::cpu_ticks);
        let machine_after = stats::CpuByProgram::now();
        cpu.push((
            cpu_before
                .zip(cpu_after)
                .map(|(a, b)| stats::ticks_to_ms(b - a)),
            (machine_before, machine_after),
        ));
        eprintln!("phase {} done in {:.2?}", spec.name, started.elapsed());
    }
    let mut per_phase: Vec<(Vec<i64>, BTreeMap<String, u64>)> = specs
        .iter()
        .map(|_| (Vec::new(), BTreeMap::new()))
        .collect();
    for task in tasks {
        let results = task.await.map_err(|e| e.to_string())?;
        for (p, (latencies, unexpected)) in results.into_iter().enumerate() {
            per_phase[p].0.extend(latencies);
            for (status, n) in unexpected {
                *per_phase[p].1.entry(status).or_default() += n;
            }
        }
    }
    Ok(specs
        .iter()
        .zip(per_phase)
        .zip(times)
        .zip(cpu)
        .map(
            |(((spec, (latencies, unexpected)), (started, elapsed)), (cpu_ms, machine))| {
                let mut phase = Phase::new(spec.name, clients, latencies, unexpected, elapsed);
                phase.server_cpu_ms = cpu_ms;
                phase.server_cpu_us_per_ok = cpu_ms.map(|ms| ms * 1000.0 / phase.ok.max(1) as f64);
                phase.cpu_us_per_ok_by_program = machine.1.per_request_since(&machine.0, phase.ok);
                if let Some((busy, iowait)) = machine.1.machine_since(&machine.0) {
                    phase.machine_busy_pct = Some(busy);
                    phase.machine_iowait_pct = Some(iowait);
                }
                PhaseOutcome { phase, started }
            },
        )
        .collect())
}

/// Opens a connection, retrying for a few seconds while the server starts listening.
async fn open_retrying(addr: SocketAddr) -> Option<Conn> {
    for _ in 0..50 {
        match Conn::open(addr).await {
            Ok(conn) => return Some(conn),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    None
}

async fn intake(
    target: Target,
    clients: usize,
    jobs: usize,
    warmup: usize,
    replay: bool,
    replay_only: bool,
) -> Result<Value, String> {
    wait_ready(target.addr, Duration::from_secs(60)).await?;
    let mut specs = vec![if replay_only {
        PhaseSpec {
            name: "warmup",
            prefix: target.prefix.clone(),
            total: warmup.min(jobs),
            expect: StatusCode::OK,
            call: Call::Submit,
        }
    } else {
        PhaseSpec {
            name: "warmup",
            prefix: format!("{}-w", target.prefix),
            total: warmup,
            expect: StatusCode::CREATED,
            call: Call::Submit,
        }
    }];
    if !replay_only {
        specs.push(PhaseSpec {
            name: "intake",
            prefix: target.prefix.clone(),
            total: jobs,
            expect: StatusCode::CREATED,
            call: Call::Submit,
        });
    }
    if replay || replay_only {
        specs.push(PhaseSpec {
            name: "replay",
            prefix: target.prefix.clone(),
            total: jobs,
            expect: StatusCode::OK,
            call: Call::Submit,
        });
    }
    let rss_before = target.pid.and_then(rss_kib);
    let sampler = RssSampler::start(target.pid);
    let outcomes = run_phases(&target, clients, specs).await?;
    let rss_peak = sampler.finish();
    let mut out = json!({
        "clients": clients,
        "jobs": jobs,
        "rss_before_kib": rss_before,
        "rss_peak_kib": rss_peak,
    });
    for outcome in outcomes.into_iter().skip(1) {
        out[outcome.phase.phase.clone()] = serde_json::to_value(&outcome.phase).unwrap();
    }
    Ok(out)
}

async fn gateway(
    target: Target,
    sink_addr: SocketAddr,
    model: String,
    clients: usize,
    calls: usize,
    warmup: usize,
) -> Result<Value, String> {
    let sink = Arc::new(Sink::default());
    serve_sink(sink_addr, sink.clone()).await?;
    wait_ready(target.addr, Duration::from_secs(60)).await?;
    let prefix = &target.prefix;
    let phase = |name, prefix: String, total, call| PhaseSpec {
        name,
        prefix,
        total,
        expect: StatusCode::OK,
        call,
    };
    let specs = vec![
        phase(
            "warmup-direct",
            format!("{prefix}-wd"),
            warmup,
            Call::Direct(sink_addr),
        ),
        phase(
            "direct",
            format!("{prefix}-d"),
            calls,
            Call::Direct(sink_addr),
        ),
        phase(
            "warmup-gateway",
            format!("{prefix}-wg"),
            warmup,
            Call::Chat(model.clone()),
        ),
        phase(
            "gateway",
            format!("{prefix}-g"),
            calls,
            Call::Chat(model.clone()),
        ),
        phase("replay", format!("{prefix}-g"), calls, Call::Chat(model)),
    ];
    let before = sink.calls.load(Ordering::Relaxed);
    let outcomes = run_phases(&target, clients, specs).await?;
    let upstream_calls = sink.calls.load(Ordering::Relaxed) - before;
    let get = |name: &str| {
        outcomes
            .iter()
            .find(|o| o.phase.phase == name)
            .map(|o| o.phase.clone())
            .expect("every phase ran")
    };
    let (direct, new, replay) = (get("direct"), get("gateway"), get("replay"));
    Ok(json!({
        "clients": clients,
        "calls": calls,
        "upstream_calls": upstream_calls,
        "expected_upstream_calls": 2 * (warmup + calls),
        "added_p50_ms": new.p50_ms - direct.p50_ms,
        "added_p99_ms": new.p99_ms - direct.p99_ms,
        "replay_over_new": replay.rps / new.rps,
        "direct": direct,
        "gateway": new,
        "replay": replay,
    }))
}

/// The dispatch sink: arrival time per marker.
#[derive(Default)]
struct Sink {
    arrivals: Mutex<HashMap<u64, Instant>>,
    calls: AtomicU64,
    duplicates: AtomicU64,
}

fn marker(body: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find("#D")? + 2;
    let digits: String = text[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

async fn serve_sink(addr: SocketAddr, sink: Arc<Sink>) -> Result<(), String> {
    use http_body_util::{BodyExt, Full};
    use hyper::{Response, server::conn::http1, service::service_fn};
    use hyper_util::rt::TokioIo;

    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("sink cannot listen on {addr}: {e}"))?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let sink = sink.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let sink = sink.clone();
                    async move {
                        let body = request.into_body().collect().await?.to_bytes();
                        let now = Instant::now();
                        sink.calls.fetch_add(1, Ordering::Relaxed);
                        if let Some(id) = marker(&body) {
                            let mut arrivals = sink.arrivals.lock().unwrap();
                            if arrivals.insert(id, now).is_some() {
                                sink.duplicates.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        let answer = json!({
                            "id": "chatcmpl-bench",
                            "object": "chat.completion",
                            "model": "bench",
                            "choices": [{"index": 0, "finish_reason": "stop",
                                "message": {"role": "assistant", "content": "{\"text\":\"ok\"}"}}],
                            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
                        });
                        Ok::<_, hyper::Error>(
                            Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from(answer.to_string())))
                                .unwrap(),
                        )
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(())
}

async fn dispatch(
    target: Target,
    sink_addr: SocketAddr,
    jobs: usize,
    warmup: usize,
    rate: f64,
) -> Result<Value, String> {
    let sink = Arc::new(Sink::default());
    serve_sink(sink_addr, sink.clone()).await?;
    wait_ready(target.addr, Duration::from_secs(60)).await?;
    let mut conn = Conn::open(target.addr).await.map_err(|e| e.to_string())?;
    let bearer = target.bearer()?;
    let interval = Duration::from_secs_f64(1.0 / rate);
    let total = warmup + jobs;
    let mut answered: HashMap<u64, (Instant, Instant)> = HashMap::new();
    let mut unexpected: BTreeMap<String, u64> = BTreeMap::new();
    let rss = RssSampler::start(target.pid);
    let start = tokio::time::Instant::now();
    for i in 0..total {
        tokio::time::sleep_until(start + interval * i as u32).await;
        let key = format!("{}-d{i}", target.prefix);
        let prompt = format!("dispatch probe #D{i}#");
        let sent = Instant::now();
        match submit(&mut conn, &bearer, &target.kind, &key, &prompt).await {
            Ok(answer) if answer.status == StatusCode::CREATED => {
                answered.insert(i as u64, (sent, Instant::now()));
            }
            Ok(answer) => {
                *unexpected
                    .entry(answer.status.as_u16().to_string())
                    .or_default() += 1;
            }
            Err(error) => {
                *unexpected.entry("io".into()).or_default() += 1;
                eprintln!("transport error: {error}");
                let _ = conn.reopen().await;
            }
        }
    }
    // Wait for every accepted job's call (or 30 s).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let arrived = {
            let arrivals = sink.arrivals.lock().unwrap();
            answered.keys().filter(|i| arrivals.contains_key(i)).count()
        };
        if arrived == answered.len() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rss_peak = rss.finish();
    let arrivals = sink.arrivals.lock().unwrap().clone();
    let mut from_201 = Vec::new();
    let mut from_send = Vec::new();
    let mut missing = 0;
    let mut before_201 = 0;
    for (i, (sent, got_201)) in &answered {
        if (*i as usize) < warmup {
            continue;
        }
        match arrivals.get(i) {
            Some(arrived) => {
                let signed = if arrived >= got_201 {
                    arrived.duration_since(*got_201).as_micros() as i64
                } else {
                    before_201 += 1;
                    -(got_201.duration_since(*arrived).as_micros() as i64)
                };
                from_201.push(signed);
                from_send.push(arrived.duration_since(*sent).as_micros() as i64);
            }
            None => missing += 1,
        }
    }
    let measured = from_201.len();
    let (p50, p90, p99, max, mean) = percentiles(&mut from_201);
    let (s50, s90, s99, smax, smean) = percentiles(&mut from_send);
    Ok(json!({
        "jobs": jobs,
        "warmup": warmup,
        "rate_per_s": rate,
        "measured": measured,
        "missing": missing,
        "unexpected": unexpected,
        "arrived_before_201": before_201,
        "sink_calls": sink.calls.load(Ordering::Relaxed),
        "sink_duplicate_calls": sink.duplicates.load(Ordering::Relaxed),
        "from_201_ms": {"p50": p50, "p90": p90, "p99": p99, "max": max, "mean": mean},
        "from_send_ms": {"p50": s50, "p90": s90, "p99": s99, "max": smax, "mean": smean},
        "rss_peak_kib": rss_peak,
    }))
}

/// `onejob_attempts_ended_total{…outcome="won"}` summed over providers: attempts whose
/// result became their job's result, i.e. jobs that succeeded. Reconnects once on a closed
/// connection (the server may drop an idle keep-alive connection).
async fn jobs_won(conn: &mut Conn) -> Result<f64, String> {
    let answer = match conn.call("GET", "/metrics", &[], None).await {
        Ok(answer) => answer,
        Err(_) => {
            conn.reopen().await.map_err(|e| e.to_string())?;
            conn.call("GET", "/metrics", &[], None).await?
        }
    };
    let text = String::from_utf8_lossy(&answer.body);
    Ok(text
        .lines()
        .filter(|l| l.starts_with("onejob_attempts_ended_total{") && l.contains("outcome=\"won\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

async fn e2e(
    target: Target,
    clients: usize,
    jobs: usize,
    timeout: Duration,
) -> Result<Value, String> {
    wait_ready(target.addr, Duration::from_secs(60)).await?;
    let mut metrics = Conn::open(target.addr).await.map_err(|e| e.to_string())?;
    let baseline = jobs_won(&mut metrics).await?;
    let rss = RssSampler::start(target.pid);
    let cpu_before = target.pid.and_then(stats::cpu_ticks);
    let outcomes = run_phases(
        &target,
        clients,
        vec![PhaseSpec {
            name: "submit",
            prefix: target.prefix.clone(),
            total: jobs,
            expect: StatusCode::CREATED,
            call: Call::Submit,
        }],
    )
    .await?;
    let started = outcomes[0].started;
    let deadline = Instant::now() + timeout;
    let mut done;
    loop {
        done = jobs_won(&mut metrics).await? - baseline;
        if done >= jobs as f64 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu_ms = cpu_before
        .zip(target.pid.and_then(stats::cpu_ticks))
        .map(|(a, b)| stats::ticks_to_ms(b - a));
    Ok(json!({
        "server_cpu_ms": cpu_ms,
        "server_cpu_us_per_job": cpu_ms.map(|ms| ms * 1000.0 / done.max(1.0)),
        "clients": clients,
        "jobs": jobs,
        "succeeded": done,
        "elapsed_s": elapsed,
        "jobs_per_s": done / elapsed,
        "submit": outcomes[0].phase,
        "rss_peak_kib": rss.finish(),
    }))
}

async fn hold(
    target: Target,
    conns: usize,
    post: bool,
    seconds: Duration,
) -> Result<Value, String> {
    wait_ready(target.addr, Duration::from_secs(60)).await?;
    let rss_before = target.pid.and_then(rss_kib);
    let sampler = RssSampler::start(target.pid);
    let opened = Arc::new(Mutex::new(Vec::with_capacity(conns)));
    let gate = Arc::new(tokio::sync::Semaphore::new(64));
    let failures = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (opened, gate, failures, addr) =
            (opened.clone(), gate.clone(), failures.clone(), target.addr);
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire().await.unwrap();
            match Conn::open(addr).await {
                Ok(mut conn) => match conn.call("GET", "/healthz", &[], None).await {
                    Ok(a) if a.status == StatusCode::OK => opened.lock().unwrap().push(conn),
                    _ => {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                },
                Err(_) => {
                    failures.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    let mut held: Vec<Conn> = std::mem::take(&mut *opened.lock().unwrap());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_open = target.pid.and_then(rss_kib);
    eprintln!(
        "holding {} connections ({} failed)",
        held.len(),
        failures.load(Ordering::Relaxed)
    );
    let mut post_statuses: BTreeMap<String, u64> = BTreeMap::new();
    let mut rss_after_post = None;
    if post {
        let bearer = Arc::new(target.bearer()?);
        let mut tasks = Vec::new();
        for (i, mut conn) in held.drain(..).enumerate() {
            let (bearer, kind, prefix) =
                (bearer.clone(), target.kind.clone(), target.prefix.clone());
            tasks.push(tokio::spawn(async move {
                let key = format!("{prefix}-h{i}");
                let status = match submit(&mut conn, &bearer, &kind, &key, &key).await {
                    Ok(a) => a.status.as_u16().to_string(),
                    Err(_) => "io".to_string(),
                };
                (conn, status)
            }));
        }
        for task in tasks {
            let (conn, status) = task.await.map_err(|e| e.to_string())?;
            *post_statuses.entry(status).or_default() += 1;
            held.push(conn);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        rss_after_post = target.pid.and_then(rss_kib);
    }
    tokio::time::sleep(seconds).await;
    let rss_end = target.pid.and_then(rss_kib);
    let peak = sampler.finish();
    let still_open = held.len();
    drop(held);
    Ok(json!({
        "conns": conns,
        "open": still_open,
        "failed": failures.load(Ordering::Relaxed),
        "post_statuses": post_statuses,
        "rss_before_kib": rss_before,
        "rss_open_kib": rss_open,
        "rss_after_post_kib": rss_after_post,
        "rss_end_kib": rss_end,
        "rss_peak_kib": peak,
    }))
}
