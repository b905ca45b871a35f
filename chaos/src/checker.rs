//! The offline history checker: reads a run's [`Record`]s and verifies DESIGN §2 on them.
//!
//! What it checks (each [`Violation`] names the rule it broke):
//!
//! * **answers** — no 5xx but `503`, and every `503` is an `application/problem+json`
//!   `unavailable` problem with `Retry-After` (never a 500 or a stack trace); on the
//!   gateway's paths (`/v1/chat/completions`, …), whose errors come in OpenAI's (or
//!   Anthropic's) shape, an `{"error": {"code": "unavailable", …}}` with `Retry-After`;
//! * **one job per key** (§2.1) — every `200`/`201` for a key names the same job (as does
//!   every gateway answer, by its `onejob-job-id` header), at most one `201` per key, the
//!   final read-back by key finds that job, the listings (one per owner) hold exactly the
//!   read-back jobs (none without a key, none twice), and no client acknowledged a job that
//!   is gone;
//! * **keys bound to intent** (§2.2) — a submission whose body equals (RFC 8785) one that was
//!   accepted under the same key is never refused as a conflict (for a gateway call, its
//!   body less the delivery-only `stream` and `stream_options`);
//! * **no result overwritten** (§2.5) — every observation of a succeeded job carries the
//!   same result and winner as the final read-back, a non-succeeded view carries no result,
//!   exactly one attempt succeeded and exactly one `won` event names it, with the result's
//!   SHA-256; a gateway's `200` is the completion its job ends with;
//! * **the result is the winner's output** (§2.5, §2.6) — the winning attempt's task at the
//!   fake provider finished with exactly the job's result (for a gateway job, whose result
//!   is the upstream's `chat.completion`: the answer the fake gave that attempt);
//! * **guarded transitions** (§2.3) — replaying each job's event log in order, no attempt
//!   starts while another is live (a non-hedge beside any live attempt, a hedge beside a
//!   starting or unknown one); attempt numbers run 1..n and every attempt has its
//!   `attempt_started`; timestamps of each attempt are in order;
//! * **proof** (§2.4) — an attempt recorded as failed did not succeed at the provider (its
//!   task's final status), so no result was dropped and re-sent;
//! * **retries are attempts** (§2.7) — no job has more side effects at the provider than
//!   attempts, every side effect belongs to a job, and no task was created twice.
//!
//! A history may also carry what its scenario promises beyond these ([`Record::Expect`]);
//! each [`Expectation`] is a rule of its own, named as it is:
//!
//! * **every-key-answered** — each key's last call was answered: `200`/`201` for a
//!   submission, a `200` with the job's result for a gateway call;
//! * **one-side-effect-per-key** — each key has a job, and each job exactly one side effect;
//! * **never-unknown** — no job or attempt ends `unknown`, no attempt ever became `unknown`.
//!
//! Event order is the authority for the guard, not timestamps: PostgreSQL's `now()` is the
//! start of a transaction, so two transactions serialised by the job's row lock can carry
//! timestamps in either order, while event ids come from a sequence drawn under that lock.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::{
    client::CHAT_PATH,
    history::{Expectation, Record},
};

/// The gateway's paths: calls that make one job per key, answered in the shape of the API
/// they imitate (OpenAI's, Anthropic's at `/v1/messages`), with the job's id in a header.
const GATEWAY_PATHS: [&str; 5] = [
    CHAT_PATH,
    "/v1/embeddings",
    "/v1/responses",
    "/v1/images/generations",
    "/v1/messages",
];

/// The members of a gateway call's body that are delivery only, not part of its intent.
const DELIVERY_ONLY: [&str; 2] = ["stream", "stream_options"];

/// One broken rule, with enough context to find it in the history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// The rule (`answers`, `one-job-per-key`, `intent`, `result-once`, `winner-output`,
    /// `proof`, `guard`, `side-effects`, or an [`Expectation`]'s: `every-key-answered`,
    /// `one-side-effect-per-key`, `never-unknown`).
    pub rule: &'static str,
    /// What was seen.
    pub detail: String,
}

/// Counts over the history, for `RELIABILITY.md`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Requests sent.
    pub requests: u64,
    /// Answers by HTTP status.
    pub statuses: BTreeMap<u16, u64>,
    /// Requests that got no answer (refused, reset, timed out).
    pub transport_errors: u64,
    /// Distinct idempotency keys submitted.
    pub keys: u64,
    /// Jobs read back at the end.
    pub jobs: u64,
    /// Read-back jobs by state.
    pub job_states: BTreeMap<String, u64>,
    /// Attempts of all read-back jobs.
    pub attempts: u64,
    /// Attempts by final state.
    pub attempt_states: BTreeMap<String, u64>,
    /// Attempts that were `unknown` at some point (an `attempt_unknown` event).
    pub became_unknown: u64,
    /// Side effects at the fake providers.
    pub side_effects: u64,
    /// Injected faults.
    pub faults: u64,
}

/// The checker's verdict.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Every broken rule found.
    pub violations: Vec<Violation>,
    /// What the history holds.
    pub stats: Stats,
}

impl Report {
    /// True when no rule was broken.
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
    }

    fn violation(&mut self, rule: &'static str, detail: impl Into<String>) {
        self.violations.push(Violation {
            rule,
            detail: detail.into(),
        });
    }
}

struct Request<'a> {
    method: &'a str,
    path: &'a str,
    key: Option<&'a str>,
    body: Option<&'a Value>,
}

struct Response<'a> {
    seq: u64,
    status: Option<u16>,
    content_type: Option<&'a str>,
    retry_after: Option<&'a str>,
    body: Option<&'a Value>,
    error: Option<&'a str>,
    job_id: Option<&'a str>,
}

struct SideEffect<'a> {
    provider: &'a str,
    idempotency_key: Option<&'a str>,
    task_id: Option<&'a str>,
    task: Option<&'a Value>,
}

struct Dump<'a> {
    key: &'a str,
    job: &'a Value,
    attempts: &'a [Value],
    events: &'a [Value],
}

/// Checks a whole history.
pub fn check(records: &[Record]) -> Report {
    let mut report = Report::default();
    let mut requests: HashMap<u64, Request<'_>> = HashMap::new();
    let mut responses: Vec<Response<'_>> = Vec::new();
    let mut side_effects: Vec<SideEffect<'_>> = Vec::new();
    let mut dumps: Vec<Dump<'_>> = Vec::new();
    // Each owner's listing (a run with several tenants reads each one's own): together
    // they must hold exactly the read-back jobs.
    let mut listing: Option<Vec<String>> = None;
    let mut expectations: BTreeSet<Expectation> = BTreeSet::new();
    for record in records {
        match record {
            Record::Request {
                seq,
                method,
                path,
                key,
                body,
                ..
            } => {
                requests.insert(
                    *seq,
                    Request {
                        method,
                        path,
                        key: key.as_deref(),
                        body: body.as_ref(),
                    },
                );
            }
            Record::Response {
                seq,
                status,
                content_type,
                retry_after,
                body,
                error,
                job_id,
                ..
            } => responses.push(Response {
                seq: *seq,
                status: *status,
                content_type: content_type.as_deref(),
                retry_after: retry_after.as_deref(),
                body: body.as_ref(),
                error: error.as_deref(),
                job_id: job_id.as_deref(),
            }),
            Record::SideEffect {
                provider,
                idempotency_key,
                task_id,
                task,
                ..
            } => side_effects.push(SideEffect {
                provider,
                idempotency_key: idempotency_key.as_deref(),
                task_id: task_id.as_deref(),
                task: task.as_ref(),
            }),
            Record::Expect { expectations: more } => expectations.extend(more.iter().copied()),
            Record::Fault { .. } => report.stats.faults += 1,
            Record::Listing { job_ids } => listing
                .get_or_insert_default()
                .extend(job_ids.iter().cloned()),
            Record::Job {
                key,
                job,
                attempts,
                events,
            } => dumps.push(Dump {
                key,
                job,
                attempts,
                events,
            }),
        }
    }
    report.stats.requests = requests.len() as u64;
    report.stats.side_effects = side_effects.len() as u64;
    report.stats.jobs = dumps.len() as u64;

    check_answers(&mut report, &requests, &responses);
    let final_by_id = check_one_job_per_key(
        &mut report,
        &requests,
        &responses,
        &dumps,
        listing.as_deref(),
    );
    check_observations(&mut report, &requests, &responses, &final_by_id);
    for dump in &dumps {
        check_job(&mut report, dump, &side_effects);
    }
    check_side_effects(&mut report, &side_effects, &dumps);
    for expectation in expectations {
        match expectation {
            Expectation::EveryKeyAnswered => {
                check_every_key_answered(&mut report, &requests, &responses, &final_by_id);
            }
            Expectation::OneSideEffectPerKey => {
                check_one_side_effect_per_key(&mut report, &requests, &side_effects, &dumps);
            }
            Expectation::NeverUnknown => check_never_unknown(&mut report, &dumps),
        }
    }
    report
}

fn check_answers(
    report: &mut Report,
    requests: &HashMap<u64, Request<'_>>,
    responses: &[Response<'_>],
) {
    for response in responses {
        let Some(status) = response.status else {
            report.stats.transport_errors += 1;
            continue;
        };
        *report.stats.statuses.entry(status).or_default() += 1;
        let gateway = requests.get(&response.seq).is_some_and(is_gateway);
        if status == 503 && gateway {
            // The gateway speaks its callers' API: OpenAI's error shape (Anthropic's has the
            // same `error.code`), onejob's problem type as the code.
            let json = response
                .content_type
                .is_some_and(|t| t.starts_with("application/json"));
            let typed = response
                .body
                .and_then(|b| b["error"]["code"].as_str())
                .is_some_and(|code| code == "unavailable");
            if !json || !typed || response.retry_after.is_none() {
                report.violation(
                    "answers",
                    format!(
                        "request {}: a gateway 503 without an unavailable error in its API's \
                         shape and Retry-After (content-type {:?}, retry-after {:?}, body {:?})",
                        response.seq, response.content_type, response.retry_after, response.body
                    ),
                );
            }
        } else if status == 503 {
            let problem = response
                .content_type
                .is_some_and(|t| t.starts_with("application/problem+json"));
            let typed = response
                .body
                .and_then(|b| b["type"].as_str())
                .is_some_and(|t| t.ends_with("/unavailable"));
            if !problem || !typed || response.retry_after.is_none() {
                report.violation(
                    "answers",
                    format!(
                        "request {}: 503 without an unavailable problem+json and Retry-After \
                         (content-type {:?}, retry-after {:?}, body {:?})",
                        response.seq, response.content_type, response.retry_after, response.body
                    ),
                );
            }
        } else if status >= 500 {
            report.violation(
                "answers",
                format!(
                    "request {}: {status} with body {:?}",
                    response.seq, response.body
                ),
            );
        }
    }
}

fn is_submit(request: &Request<'_>) -> bool {
    request.method == "POST" && request.path == "/v1/jobs"
}

fn is_gateway(request: &Request<'_>) -> bool {
    request.method == "POST" && GATEWAY_PATHS.contains(&request.path)
}

/// A call that makes (or finds) the job of its key: a submission or a gateway call.
fn is_keyed_call(request: &Request<'_>) -> bool {
    is_submit(request) || is_gateway(request)
}

/// The canonical form of what a keyed call asks for: a submission's body, or a gateway
/// call's less its delivery-only members.
fn intent_bytes(request: &Request<'_>, body: &Value) -> Vec<u8> {
    if is_gateway(request)
        && let Value::Object(members) = body
    {
        let mut intent = members.clone();
        for delivery in DELIVERY_ONLY {
            intent.remove(delivery);
        }
        return onejob_domain::fingerprint::canonical_bytes(&Value::Object(intent));
    }
    onejob_domain::fingerprint::canonical_bytes(body)
}

/// The job a keyed call's answer names: a submission's `200`/`201` in its body's `id`, a
/// gateway answer (of any status, or a vanished call that saw the head) in its header.
fn answered_job<'a>(request: &Request<'_>, response: &Response<'a>) -> Option<&'a str> {
    if is_gateway(request) {
        return response.job_id;
    }
    match response.status {
        Some(200 | 201) => Some(
            response
                .body
                .and_then(|b| b["id"].as_str())
                .unwrap_or_default(),
        ),
        _ => None,
    }
}

/// Checks §2.1 and §2.2; returns the final job view of each read-back job id.
fn check_one_job_per_key<'a>(
    report: &mut Report,
    requests: &HashMap<u64, Request<'a>>,
    responses: &[Response<'a>],
    dumps: &[Dump<'a>],
    listing: Option<&[String]>,
) -> HashMap<String, &'a Value> {
    let mut ids_by_key: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut created_by_key: BTreeMap<&str, u64> = BTreeMap::new();
    let mut accepted_bodies: BTreeMap<&str, Vec<Vec<u8>>> = BTreeMap::new();
    let mut keys = BTreeSet::new();
    for request in requests.values().filter(|r| is_keyed_call(r)) {
        if let Some(key) = request.key {
            keys.insert(key);
        }
    }
    report.stats.keys = keys.len() as u64;
    for response in responses {
        let Some(request) = requests.get(&response.seq) else {
            report.violation(
                "answers",
                format!("response {} has no request", response.seq),
            );
            continue;
        };
        if !is_keyed_call(request) {
            continue;
        }
        let Some(key) = request.key else { continue };
        if let Some(id) = answered_job(request, response) {
            ids_by_key.entry(key).or_default().insert(id.to_owned());
            if is_submit(request) && response.status == Some(201) {
                *created_by_key.entry(key).or_default() += 1;
            }
            if let Some(body) = request.body {
                accepted_bodies
                    .entry(key)
                    .or_default()
                    .push(intent_bytes(request, body));
            }
        }
    }
    // §2.2: the same intent is never refused as a conflict.
    for response in responses.iter().filter(|r| r.status == Some(422)) {
        let Some(request) = requests.get(&response.seq) else {
            continue;
        };
        let (Some(key), Some(body)) = (request.key, request.body) else {
            continue;
        };
        let canonical = intent_bytes(request, body);
        if accepted_bodies
            .get(key)
            .is_some_and(|bodies| bodies.contains(&canonical))
        {
            report.violation(
                "intent",
                format!(
                    "request {}: key {key:?} refused as reused although the same body was accepted",
                    response.seq
                ),
            );
        }
    }
    for (key, ids) in &ids_by_key {
        if ids.len() != 1 {
            report.violation(
                "one-job-per-key",
                format!("key {key:?} answered with {} job ids: {ids:?}", ids.len()),
            );
        }
    }
    for (key, created) in &created_by_key {
        if *created > 1 {
            report.violation(
                "one-job-per-key",
                format!("key {key:?} answered 201 Created {created} times"),
            );
        }
    }
    let mut final_by_id = HashMap::new();
    let mut dumped_keys = BTreeSet::new();
    for dump in dumps {
        let id = dump.job["id"].as_str().unwrap_or_default().to_owned();
        if !dumped_keys.insert(dump.key) {
            report.violation(
                "one-job-per-key",
                format!("key {:?} read back twice", dump.key),
            );
        }
        if final_by_id.insert(id.clone(), dump.job).is_some() {
            report.violation(
                "one-job-per-key",
                format!("job {id} is the job of two keys"),
            );
        }
        if let Some(ids) = ids_by_key.get(dump.key)
            && !ids.contains(&id)
        {
            report.violation(
                "one-job-per-key",
                format!(
                    "key {:?}: clients were answered {ids:?}, the read-back finds {id}",
                    dump.key
                ),
            );
        }
    }
    for key in ids_by_key.keys() {
        if !dumped_keys.contains(key) {
            report.violation(
                "one-job-per-key",
                format!("key {key:?} was acknowledged to a client but has no job at the end"),
            );
        }
    }
    if let Some(listed) = listing {
        let listed_set: BTreeSet<&str> = listed.iter().map(String::as_str).collect();
        if listed_set.len() != listed.len() {
            report.violation("one-job-per-key", "the job listing shows a job twice");
        }
        let dumped: BTreeSet<&str> = final_by_id.keys().map(String::as_str).collect();
        if listed_set != dumped {
            let extra: Vec<_> = listed_set.difference(&dumped).take(5).collect();
            let missing: Vec<_> = dumped.difference(&listed_set).take(5).collect();
            report.violation(
                "one-job-per-key",
                format!(
                    "the listing holds {} jobs, the keys {}: listed without a key {extra:?}, \
                     read back but not listed {missing:?}",
                    listed_set.len(),
                    dumped.len()
                ),
            );
        }
    }
    final_by_id
}

/// §2.5 over time: every succeeded view of a job has the final result and winner.
fn check_observations(
    report: &mut Report,
    requests: &HashMap<u64, Request<'_>>,
    responses: &[Response<'_>],
    final_by_id: &HashMap<String, &Value>,
) {
    for response in responses {
        let (Some(200 | 201), Some(body)) = (response.status, response.body) else {
            continue;
        };
        let Some(request) = requests.get(&response.seq) else {
            continue;
        };
        if is_gateway(request) {
            check_gateway_answer(report, response, body, final_by_id);
            continue;
        }
        let is_job_view = is_submit(request)
            || (request.method == "GET"
                && request.path.starts_with("/v1/jobs/")
                && request.path.matches('/').count() == 3);
        if !is_job_view {
            continue;
        }
        let Some(id) = body["id"].as_str() else {
            continue;
        };
        let state = body["state"].as_str().unwrap_or_default();
        if state != "succeeded" && body.get("result").is_some() {
            report.violation(
                "result-once",
                format!(
                    "request {}: job {id} is {state} yet shows a result",
                    response.seq
                ),
            );
        }
        if state != "succeeded" {
            continue;
        }
        let Some(last) = final_by_id.get(id) else {
            continue;
        };
        if last["state"] != "succeeded"
            || last["result"] != body["result"]
            || last["completed_by"] != body["completed_by"]
        {
            report.violation(
                "result-once",
                format!(
                    "request {}: job {id} was seen succeeded with {} by {}, and ends {} with {} by {}",
                    response.seq,
                    body["result"],
                    body["completed_by"],
                    last["state"],
                    last["result"],
                    last["completed_by"]
                ),
            );
        }
    }
}

/// §2.5 at the gateway: a `200` names its job and is the completion that job ends with.
fn check_gateway_answer(
    report: &mut Report,
    response: &Response<'_>,
    body: &Value,
    final_by_id: &HashMap<String, &Value>,
) {
    let Some(id) = response.job_id else {
        report.violation(
            "answers",
            format!(
                "request {}: a gateway {:?} without its onejob-job-id header",
                response.seq, response.status
            ),
        );
        return;
    };
    // A stream's events are recorded as text: only a JSON answer is one completion.
    if !body.is_object() {
        return;
    }
    // A job never read back is the one-job-per-key rule's finding.
    let Some(last) = final_by_id.get(id) else {
        return;
    };
    if last["state"] != "succeeded" || last["result"] != *body {
        report.violation(
            "result-once",
            format!(
                "request {}: the gateway answered job {id} with {} (id {}), and the job ends {} \
                 with {}",
                response.seq,
                body["object"],
                body["id"],
                last["state"],
                if last["result"] == *body {
                    "that answer".to_owned()
                } else {
                    format!("another result (id {})", last["result"]["id"])
                }
            ),
        );
    }
}

fn sha256_of(value: &Value) -> String {
    hex::encode(Sha256::digest(onejob_domain::fingerprint::canonical_bytes(
        value,
    )))
}

/// The job id an upstream idempotency key (`onejob:<job id>[:<n>]`) belongs to.
fn job_of_upstream_key(key: &str) -> Option<&str> {
    let rest = key.strip_prefix("onejob:")?;
    Some(rest.split(':').next().unwrap_or(rest))
}

fn check_job(report: &mut Report, dump: &Dump<'_>, side_effects: &[SideEffect<'_>]) {
    let job = dump.job;
    let id = job["id"].as_str().unwrap_or_default();
    let state = job["state"].as_str().unwrap_or_default();
    *report.stats.job_states.entry(state.to_owned()).or_default() += 1;
    report.stats.attempts += dump.attempts.len() as u64;
    for attempt in dump.attempts {
        let attempt_state = attempt["state"].as_str().unwrap_or_default().to_owned();
        *report
            .stats
            .attempt_states
            .entry(attempt_state)
            .or_default() += 1;
    }

    // §2.5 and §2.6: one winner, with exactly its provider's output.
    let succeeded: Vec<&Value> = dump
        .attempts
        .iter()
        .filter(|a| a["state"] == "succeeded")
        .collect();
    let won: Vec<&Value> = dump.events.iter().filter(|e| e["kind"] == "won").collect();
    if state == "succeeded" {
        let winner = job["completed_by"].as_str().unwrap_or_default();
        if succeeded.len() != 1 || succeeded[0]["id"] != winner {
            report.violation(
                "result-once",
                format!(
                    "job {id}: completed_by {winner}, succeeded attempts {:?}",
                    succeeded.iter().map(|a| &a["id"]).collect::<Vec<_>>()
                ),
            );
        }
        if won.len() != 1 || won[0]["attempt_id"] != winner {
            report.violation(
                "result-once",
                format!(
                    "job {id}: {} won events for winner {winner}: {won:?}",
                    won.len()
                ),
            );
        } else if won[0]["detail"]["sha256"].as_str() != Some(&sha256_of(&job["result"])) {
            report.violation(
                "result-once",
                format!(
                    "job {id}: the won event's sha256 {} is not the result's {}",
                    won[0]["detail"]["sha256"],
                    sha256_of(&job["result"])
                ),
            );
        }
        match winning_output(dump, winner, side_effects) {
            Ok(output) if output == &job["result"] => {}
            Ok(output) => report.violation(
                "winner-output",
                format!(
                    "job {id}: result {} but the winning attempt's task finished with {output}",
                    job["result"]
                ),
            ),
            Err(why) => report.violation("winner-output", format!("job {id}: {why}")),
        }
    } else {
        if !won.is_empty() || !succeeded.is_empty() || job.get("result").is_some() {
            report.violation(
                "result-once",
                format!("job {id} is {state} but has a winner, a won event or a result"),
            );
        }
    }

    // Proof agrees with the provider: an attempt recorded as failed did not in truth
    // succeed there (that would be a result lost and a duplicate sent next).
    for attempt in dump.attempts.iter().filter(|a| a["state"] == "failed") {
        let Some(task_id) = attempt["task_id"].as_str() else {
            continue;
        };
        let truth = side_effects
            .iter()
            .find(|e| e.task_id == Some(task_id))
            .and_then(|e| e.task)
            .map(|t| &t["status"]);
        if truth.is_some_and(|status| status == "succeeded") {
            report.violation(
                "proof",
                format!(
                    "job {id}: attempt {} is recorded failed but its task {task_id} succeeded \
                     at the provider",
                    attempt["id"]
                ),
            );
        }
    }

    check_guard(report, id, dump);
}

/// The output the fake provider finished the winning attempt's task with.
fn winning_output<'a>(
    dump: &Dump<'_>,
    winner: &str,
    side_effects: &'a [SideEffect<'a>],
) -> Result<&'a Value, String> {
    let attempt = dump
        .attempts
        .iter()
        .find(|a| a["id"] == winner)
        .ok_or_else(|| format!("the winner {winner} is not among its attempts"))?;
    let job_id = dump.job["id"].as_str().unwrap_or_default();
    let effect = match attempt["task_id"].as_str() {
        Some(task_id) => side_effects
            .iter()
            .find(|e| e.task_id == Some(task_id))
            .ok_or_else(|| format!("no side effect created the winner's task {task_id}"))?,
        None => {
            // The task id never reached the database (the worker died before the
            // acknowledgement): the attempt's only side effect, found by its upstream key.
            let mine: Vec<&SideEffect<'_>> = side_effects
                .iter()
                .filter(|e| {
                    e.provider == attempt["provider"]
                        && e.idempotency_key.and_then(job_of_upstream_key) == Some(job_id)
                })
                .collect();
            if mine.len() != 1 {
                return Err(format!(
                    "the winner has no task id and {} side effects carry its key",
                    mine.len()
                ));
            }
            mine[0]
        }
    };
    let task = effect
        .task
        .ok_or_else(|| "the winner's task status was not recorded".to_owned())?;
    if task["status"] != "succeeded" {
        return Err(format!(
            "the winner's task ended {} at the provider",
            task["status"]
        ));
    }
    if is_completion(&dump.job["result"]) {
        // A gateway job's result is the upstream's whole completion, not its content.
        let answer = &task["answer"];
        if answer.is_null() {
            return Err("the winner's answer at the provider was not recorded".to_owned());
        }
        return Ok(answer);
    }
    Ok(&task["result"])
}

/// Whether a job's result is an upstream's `chat.completion` (a gateway job's).
fn is_completion(result: &Value) -> bool {
    result["object"] == "chat.completion"
}

/// §2.3: replays the event log; no attempt starts beside a live one (a hedge only beside a
/// running one).
fn check_guard(report: &mut Report, job_id: &str, dump: &Dump<'_>) {
    let mut events: Vec<&Value> = dump.events.iter().collect();
    events.sort_by_key(|e| e["id"].as_i64().unwrap_or_default());
    let attempt = |id: &Value| dump.attempts.iter().find(|a| a["id"] == *id);
    // attempt id -> unknown?
    let mut live: BTreeMap<String, bool> = BTreeMap::new();
    let mut started = BTreeSet::new();
    for event in events {
        let Some(attempt_id) = event["attempt_id"].as_str() else {
            continue;
        };
        match event["kind"].as_str().unwrap_or_default() {
            "attempt_started" => {
                let hedge = attempt(&event["attempt_id"]).is_some_and(|a| a["hedge"] == true);
                let blocking: Vec<&String> = live
                    .iter()
                    .filter(|(other, unknown)| {
                        if !hedge || **unknown {
                            return true;
                        }
                        // A hedge may start only beside running attempts: acknowledged
                        // before the hedge started.
                        let hedge_started = attempt(&event["attempt_id"])
                            .and_then(|a| parse_time(a["started_at"].as_str()?));
                        let acknowledged = attempt(&Value::String((*other).clone()))
                            .and_then(|a| parse_time(a["acknowledged_at"].as_str()?));
                        match (acknowledged, hedge_started) {
                            (Some(acknowledged), Some(started)) => acknowledged > started,
                            _ => true,
                        }
                    })
                    .map(|(other, _)| other)
                    .collect();
                if !blocking.is_empty() {
                    report.violation(
                        "guard",
                        format!(
                            "job {job_id}: attempt {attempt_id} started while {blocking:?} \
                             were still live"
                        ),
                    );
                }
                live.insert(attempt_id.to_owned(), false);
                started.insert(attempt_id.to_owned());
            }
            "attempt_unknown" => {
                report.stats.became_unknown += 1;
                live.insert(attempt_id.to_owned(), true);
            }
            "won" | "race_lost" | "attempt_resolved" => {
                live.remove(attempt_id);
            }
            _ => {}
        }
    }
    for (index, attempt) in dump.attempts.iter().enumerate() {
        let id = attempt["id"].as_str().unwrap_or_default();
        if attempt["number"].as_u64() != Some(index as u64 + 1) {
            report.violation(
                "guard",
                format!(
                    "job {job_id}: attempt numbers are not 1..n ({})",
                    attempt["number"]
                ),
            );
        }
        if !started.contains(id) {
            report.violation(
                "guard",
                format!("job {job_id}: attempt {id} has no attempt_started event"),
            );
        }
        let started_at = attempt["started_at"].as_str().unwrap_or_default();
        for later in ["acknowledged_at", "finished_at"] {
            if let Some(at) = attempt[later].as_str()
                && parse_time(at) < parse_time(started_at)
            {
                report.violation(
                    "guard",
                    format!(
                        "job {job_id}: attempt {id} has {later} {at} before started_at {started_at}"
                    ),
                );
            }
        }
        let terminal = matches!(
            attempt["state"].as_str(),
            Some("succeeded" | "failed" | "cancelled" | "discarded")
        );
        if terminal == live.contains_key(id) {
            report.violation(
                "guard",
                format!(
                    "job {job_id}: attempt {id} is {} but its event log says it is {}",
                    attempt["state"],
                    if live.contains_key(id) {
                        "live"
                    } else {
                        "ended"
                    }
                ),
            );
        }
    }
}

/// Expectation `every-key-answered`: each key's last call (the highest `seq` under it) got
/// a success: `200`/`201` for a submission; for a gateway call, a `200` whose body is the
/// result its job (named by the answer's header) ends succeeded with. (A last call answered
/// as a stream does not count: the scenarios promising this retry without one.)
fn check_every_key_answered(
    report: &mut Report,
    requests: &HashMap<u64, Request<'_>>,
    responses: &[Response<'_>],
    final_by_id: &HashMap<String, &Value>,
) {
    let by_seq: HashMap<u64, &Response<'_>> = responses.iter().map(|r| (r.seq, r)).collect();
    let mut last_call: BTreeMap<&str, u64> = BTreeMap::new();
    for (seq, request) in requests {
        if let (true, Some(key)) = (is_keyed_call(request), request.key) {
            let last = last_call.entry(key).or_insert(*seq);
            *last = (*last).max(*seq);
        }
    }
    for (key, seq) in last_call {
        let request = &requests[&seq];
        let Some(response) = by_seq.get(&seq) else {
            report.violation(
                Expectation::EveryKeyAnswered.rule(),
                format!("key {key:?}: its last call (request {seq}) has no response recorded"),
            );
            continue;
        };
        let answered = match response.status {
            Some(200 | 201) if is_submit(request) => true,
            Some(200) => response
                .job_id
                .and_then(|id| final_by_id.get(id))
                .is_some_and(|job| {
                    job["state"] == "succeeded" && response.body == Some(&job["result"])
                }),
            _ => false,
        };
        if !answered {
            report.violation(
                Expectation::EveryKeyAnswered.rule(),
                format!(
                    "key {key:?}: its last call (request {seq}) was answered {}",
                    describe(response)
                ),
            );
        }
    }
}

/// A short account of an answer, for a violation's detail.
fn describe(response: &Response<'_>) -> String {
    let Some(status) = response.status else {
        return format!(
            "nothing ({})",
            response.error.unwrap_or("no error recorded")
        );
    };
    let said = response
        .body
        .map(|body| {
            body["error"]["message"]
                .as_str()
                .or(body["detail"].as_str())
                .map_or_else(|| body.to_string(), str::to_owned)
        })
        .unwrap_or_default();
    let said: String = said.chars().take(200).collect();
    match response.job_id {
        Some(job) => format!("{status} (job {job}): {said}"),
        None => format!("{status}: {said}"),
    }
}

/// Expectation `one-side-effect-per-key`: each key submitted or called has a job read back,
/// and that job exactly one side effect at the providers (by its upstream key).
fn check_one_side_effect_per_key(
    report: &mut Report,
    requests: &HashMap<u64, Request<'_>>,
    side_effects: &[SideEffect<'_>],
    dumps: &[Dump<'_>],
) {
    let mut per_job: HashMap<&str, usize> = HashMap::new();
    for effect in side_effects {
        if let Some(job) = effect.idempotency_key.and_then(job_of_upstream_key) {
            *per_job.entry(job).or_default() += 1;
        }
    }
    let keys: BTreeSet<&str> = requests
        .values()
        .filter(|r| is_keyed_call(r))
        .filter_map(|r| r.key)
        .collect();
    for key in keys {
        let Some(dump) = dumps.iter().find(|d| d.key == key) else {
            report.violation(
                Expectation::OneSideEffectPerKey.rule(),
                format!("key {key:?} has no job at the end"),
            );
            continue;
        };
        let id = dump.job["id"].as_str().unwrap_or_default();
        let count = per_job.get(id).copied().unwrap_or(0);
        if count != 1 {
            report.violation(
                Expectation::OneSideEffectPerKey.rule(),
                format!(
                    "key {key:?}: job {id} ({}) made {count} side effects at the provider",
                    dump.job["state"]
                ),
            );
        }
    }
}

/// Expectation `never-unknown`: no job or attempt read back `unknown`, and no
/// `attempt_unknown` event in any job's log.
fn check_never_unknown(report: &mut Report, dumps: &[Dump<'_>]) {
    for dump in dumps {
        let id = dump.job["id"].as_str().unwrap_or_default();
        if dump.job["state"] == "unknown" {
            report.violation(
                Expectation::NeverUnknown.rule(),
                format!("key {:?}: job {id} ends unknown", dump.key),
            );
        }
        for attempt in dump.attempts.iter().filter(|a| a["state"] == "unknown") {
            report.violation(
                Expectation::NeverUnknown.rule(),
                format!("job {id}: attempt {} ends unknown", attempt["id"]),
            );
        }
        for event in dump
            .events
            .iter()
            .filter(|e| e["kind"] == "attempt_unknown")
        {
            report.violation(
                Expectation::NeverUnknown.rule(),
                format!(
                    "job {id}: attempt {} became unknown ({})",
                    event["attempt_id"], event["detail"]
                ),
            );
        }
    }
}

fn parse_time(text: &str) -> Option<time::OffsetDateTime> {
    // `None` (unparsable) sorts first, so a broken timestamp shows up as out of order.
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()
}

/// §2.7: side effects belong to jobs, never outnumber their attempts, never share a task.
fn check_side_effects(report: &mut Report, side_effects: &[SideEffect<'_>], dumps: &[Dump<'_>]) {
    let attempts_of: HashMap<&str, usize> = dumps
        .iter()
        .map(|d| (d.job["id"].as_str().unwrap_or_default(), d.attempts.len()))
        .collect();
    let mut per_job: BTreeMap<&str, usize> = BTreeMap::new();
    let mut tasks = BTreeSet::new();
    for effect in side_effects {
        if let Some(task_id) = effect.task_id
            && !tasks.insert(task_id)
        {
            report.violation("side-effects", format!("task {task_id} was created twice"));
        }
        match effect.idempotency_key.and_then(job_of_upstream_key) {
            Some(job) if attempts_of.contains_key(job) => *per_job.entry(job).or_default() += 1,
            _ => report.violation(
                "side-effects",
                format!(
                    "a side effect at {} (key {:?}) belongs to no job",
                    effect.provider, effect.idempotency_key
                ),
            ),
        }
    }
    for (job, count) in per_job {
        let attempts = attempts_of[job];
        if count > attempts {
            report.violation(
                "side-effects",
                format!("job {job}: {count} side effects for {attempts} attempts"),
            );
        }
    }
}
