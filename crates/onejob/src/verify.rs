//! `onejob verify`: run a kind's contract cases against one provider, and the certificate
//! that records the result (docs/design.md §6). Storing it is a use case
//! ([`crate::jobs::Jobs::verify`]): this module never sees the store.
//!
//! Each case renders the kind's prompt template over its params, counts the prompt with the
//! provider's own tokenizer against the model's context limit, sends the full round trip at
//! temperature 0, and checks the answer: the kind's output schema, exactly the schema's
//! top-level keys (every required one, nothing it does not list), and the case's
//! `must_contain` substrings (case-insensitive). The run passes only if every case passes.
//! Passing runs certify the provider for failover and hedging until the kind's template or
//! output schema changes.

use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{
    config::ContractCase,
    kind::Kind,
    provider::{AttemptRequest, Provider, Submitted, TaskStatus, model_api::render_prompt},
    store::CertificateRecord,
};

/// How one contract case went.
#[derive(Debug, Clone, Serialize)]
pub struct CaseReport {
    /// The case's name.
    pub name: String,
    /// Whether it passed.
    pub passed: bool,
    /// Prompt tokens, where a tokenizer could count them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<usize>,
    /// Which tokenizer counted them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
    /// Round-trip time in milliseconds.
    pub latency_ms: u64,
    /// The output received, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Why it failed (empty when it passed).
    pub problems: Vec<String>,
}

/// The provider's limits a run checks prompts against.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Limits {
    /// The model's context window in tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_limit: Option<u32>,
    /// Tokens reserved for the answer (`max_tokens`), counted against the window too.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

impl Limits {
    /// The limits configured for `provider`.
    pub fn of(config: &crate::config::Config, provider: &str) -> Self {
        config
            .providers
            .iter()
            .find(|p| p.name == provider)
            .map(|p| Limits {
                context_limit: p.context_limit,
                max_tokens: p.max_tokens,
            })
            .unwrap_or_default()
    }
}

/// The temperature every contract case runs at.
pub const VERIFY_TEMPERATURE: f64 = 0.0;

/// Whether the provider deduplicates by idempotency key, as one case sent twice under one
/// key showed.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct IdempotencyCheck {
    /// The header the key was forwarded in.
    pub header: String,
    /// True when the second send answered with the first one's task (or answer id).
    pub deduplicated: bool,
    /// What was compared.
    pub evidence: String,
}

/// Whether the provider's lookup by idempotency key works.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LookupCheck {
    /// True when the key just sent found its task and a key never sent found nothing.
    pub passed: bool,
    /// What went wrong (empty when it passed).
    pub problems: Vec<String>,
}

/// A whole verification run.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// The provider.
    pub provider: String,
    /// The kind.
    pub kind: String,
    /// Whether every case passed.
    pub passed: bool,
    /// The kind's template hash the run was made against.
    pub template_hash: String,
    /// The kind's output schema hash the run was made against.
    pub schema_hash: String,
    /// The limits checked against.
    pub limits: Limits,
    /// The temperature the cases ran at.
    pub temperature: f64,
    /// One entry per contract case.
    pub cases: Vec<CaseReport>,
    /// The deduplication check, where the provider forwards an idempotency key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency: Option<IdempotencyCheck>,
    /// The lookup check, where the provider can look tasks up by key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lookup: Option<LookupCheck>,
}

/// Runs every contract case of `kind` against `provider`.
pub async fn run(
    kind: &Kind,
    provider_name: &str,
    provider: &dyn Provider,
    limits: Limits,
) -> VerifyReport {
    let mut cases = Vec::new();
    let mut first_trip = None;
    for case in &kind.contract {
        let (report, trip) = run_case(kind, provider, limits, case).await;
        cases.push(report);
        if first_trip.is_none() {
            first_trip = trip.map(|trip| (case, trip));
        }
    }
    let (idempotency, lookup) = match (&first_trip, provider.idempotency_header()) {
        (Some((case, trip)), Some(header)) => (
            Some(check_dedupe(kind, provider, &case.params, trip, header).await),
            check_lookup(kind, provider, trip).await,
        ),
        _ => (None, None),
    };
    let passed = !cases.is_empty()
        && cases.iter().all(|c| c.passed)
        && lookup.as_ref().is_none_or(|l| l.passed);
    VerifyReport {
        provider: provider_name.to_owned(),
        kind: kind.name.clone(),
        passed,
        template_hash: kind.template_hash(),
        schema_hash: kind.schema_hash(),
        limits,
        temperature: VERIFY_TEMPERATURE,
        cases,
        idempotency,
        lookup,
    }
}

/// What one round trip of a case got back.
#[derive(Debug, Clone)]
struct Trip {
    /// The key it was sent under.
    key: String,
    /// The task the upstream created (asynchronous APIs).
    task_id: Option<String>,
    /// The upstream's id of its answer (synchronous APIs), where it gives one.
    receipt: Option<String>,
    output: Value,
}

/// Sends the case of `first` again under the same key and compares what comes back.
async fn check_dedupe(
    kind: &Kind,
    provider: &dyn Provider,
    params: &Value,
    first: &Trip,
    header: &str,
) -> IdempotencyCheck {
    let again = round_trip(kind, provider, params, &first.key).await;
    let (deduplicated, evidence) = match again {
        Err(problem) => (
            false,
            format!("the second send under one key failed: {problem}"),
        ),
        Ok(second) => match (
            &first.task_id,
            &second.task_id,
            &first.receipt,
            &second.receipt,
        ) {
            (Some(a), Some(b), _, _) => (
                a == b,
                if a == b {
                    format!("the second send under one key answered the same task ({a})")
                } else {
                    format!("the second send under one key created another task ({a}, then {b})")
                },
            ),
            (None, None, Some(a), Some(b)) => {
                let same = a == b && first.output == second.output;
                (
                    same,
                    if same {
                        format!("the second send under one key got the same answer ({a})")
                    } else {
                        format!("the second send under one key got another answer ({a}, then {b})")
                    },
                )
            }
            _ => (
                false,
                "the answers carry no task or answer id to compare, so deduplication is not \
                 proven"
                    .to_owned(),
            ),
        },
    };
    IdempotencyCheck {
        header: header.to_owned(),
        deduplicated,
        evidence,
    }
}

/// Looks up the key `trip` was sent under, and a key never sent; `None` if the provider has
/// no lookup.
async fn check_lookup(kind: &Kind, provider: &dyn Provider, trip: &Trip) -> Option<LookupCheck> {
    let found = provider.task_by_idempotency_key(kind, &trip.key).await;
    if matches!(found, Err(crate::provider::ProviderError::Unsupported(_))) {
        return None;
    }
    let mut problems = Vec::new();
    match (found, &trip.task_id) {
        (Ok(Some(found)), Some(task_id)) if &found == task_id => {}
        (Ok(Some(found)), expected) => problems.push(format!(
            "looking up the key just sent found task {found}, not {expected:?}"
        )),
        (Ok(None), _) => problems.push(
            "looking up the key just sent found nothing: the reconciler would wrongly \
             conclude that requests never arrived"
                .to_owned(),
        ),
        (Err(error), _) => problems.push(format!("looking up the key just sent failed: {error}")),
    }
    let never_sent = format!("onejob-verify:never-sent:{}", Uuid::now_v7());
    match provider.task_by_idempotency_key(kind, &never_sent).await {
        Ok(None) => {}
        Ok(Some(task)) => problems.push(format!(
            "looking up a key never sent found task {task}: the lookup must answer 404 for it"
        )),
        Err(error) => problems.push(format!(
            "looking up a key never sent failed ({error}); it must answer 404"
        )),
    }
    Some(LookupCheck {
        passed: problems.is_empty(),
        problems,
    })
}

/// The certificate that records `report`, a run of `kind`'s contract against
/// `provider_name` made with the provider's current `settings_hash`.
pub fn certificate(
    kind: &Kind,
    provider_name: &str,
    report: &VerifyReport,
    settings_hash: &str,
) -> CertificateRecord {
    let mut report_json = serde_json::to_value(report).unwrap_or(Value::Null);
    if kind.contract.is_empty() {
        report_json["note"] = json!("the kind has no [[kind.contract]] cases: nothing to certify");
    }
    CertificateRecord {
        id: Uuid::now_v7(),
        provider: provider_name.to_owned(),
        kind: kind.name.clone(),
        template_hash: report.template_hash.clone(),
        schema_hash: report.schema_hash.clone(),
        settings_hash: settings_hash.to_owned(),
        passed: report.passed,
        report: report_json,
        created_at: OffsetDateTime::now_utc(),
    }
}

async fn run_case(
    kind: &Kind,
    provider: &dyn Provider,
    limits: Limits,
    case: &ContractCase,
) -> (CaseReport, Option<Trip>) {
    let mut report = CaseReport {
        name: case.name.clone(),
        passed: false,
        prompt_tokens: None,
        tokenizer: None,
        latency_ms: 0,
        output: None,
        problems: Vec::new(),
    };
    if let Err(errors) = kind.check_params(&case.params) {
        for error in errors {
            report.problems.push(format!(
                "the case's params fail the params schema at {}: {}",
                error.path, error.message
            ));
        }
        return (report, None);
    }
    // Everything the model reads counts: the system message (if any) and the prompt; for a
    // gateway kind, the text of every message.
    let text = if kind.is_gateway() {
        Ok(message_text(&case.params))
    } else {
        render_prompt(kind, &case.params)
    }
    .map(|prompt| {
        match case
            .params
            .get("system")
            .and_then(serde_json::Value::as_str)
        {
            Some(system) => format!("{system}\n{prompt}"),
            None => prompt,
        }
    });
    match text {
        Ok(text) => match provider.count_tokens(&text).await {
            Ok(Some(count)) => {
                let answer = limits.max_tokens.unwrap_or(0) as usize;
                if let Some(limit) = limits
                    .context_limit
                    .filter(|l| count.tokens + answer > *l as usize)
                {
                    report.problems.push(format!(
                        "the prompt is {} tokens ({}){}, over the context limit of {limit}",
                        count.tokens,
                        count.tokenizer,
                        if answer > 0 {
                            format!(" plus {answer} for the answer")
                        } else {
                            String::new()
                        }
                    ));
                }
                report.prompt_tokens = Some(count.tokens);
                report.tokenizer = Some(count.tokenizer);
            }
            Ok(None) if limits.context_limit.is_some() => report.problems.push(
                "no tokenizer is reachable for this provider, so the context limit cannot be \
                 checked"
                    .into(),
            ),
            Ok(None) => {}
            Err(error) => report
                .problems
                .push(format!("counting tokens failed: {error}")),
        },
        Err(error) => report.problems.push(error.to_string()),
    }
    let started = Instant::now();
    let key = format!("onejob-verify:{}", Uuid::now_v7());
    let trip = round_trip(kind, provider, &case.params, &key).await;
    report.latency_ms = started.elapsed().as_millis() as u64;
    let trip = match trip {
        Ok(trip) => {
            report
                .problems
                .extend(check_output(kind, case, &trip.output));
            report.output = Some(trip.output.clone());
            Some(trip)
        }
        Err(problem) => {
            report.problems.push(problem);
            None
        }
    };
    report.passed = report.problems.is_empty();
    (report, trip)
}

/// Sends the case upstream under `key` at temperature 0 and waits (within the kind's
/// attempt timeout) for the output.
async fn round_trip(
    kind: &Kind,
    provider: &dyn Provider,
    params: &Value,
    key: &str,
) -> Result<Trip, String> {
    let request = AttemptRequest {
        job_id: Uuid::nil(),
        attempt_id: Uuid::now_v7(),
        kind,
        params,
        request_body: None,
        idempotency_key: key.to_owned(),
        temperature: Some(VERIFY_TEMPERATURE),
    };
    let deadline = tokio::time::Instant::now() + kind.attempt_timeout;
    let submitted = tokio::time::timeout_at(deadline, provider.submit(&request, None))
        .await
        .map_err(|_| {
            format!(
                "no answer within attempt_timeout ({:?})",
                kind.attempt_timeout
            )
        })?
        .map_err(|e| e.to_string())?;
    let task_id = match submitted {
        Submitted::Output {
            output, receipt, ..
        } => {
            return Ok(Trip {
                key: key.to_owned(),
                task_id: None,
                receipt,
                output,
            });
        }
        Submitted::Accepted { task_id } => task_id,
    };
    loop {
        let status = tokio::time::timeout_at(deadline, provider.status(&task_id)).await;
        match status {
            Ok(Ok(TaskStatus::Succeeded(output))) => {
                let output = if kind.is_gateway() {
                    kind.endpoint.task_output(output, params)
                } else {
                    output
                };
                return Ok(Trip {
                    key: key.to_owned(),
                    task_id: Some(task_id),
                    receipt: None,
                    output,
                });
            }
            Ok(Ok(TaskStatus::Failed(message))) => {
                return Err(format!("the task failed: {message}"));
            }
            Ok(Ok(TaskStatus::Running) | Err(_)) | Err(_) => {}
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("task {task_id} still running at attempt_timeout"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The text of a gateway request: its `input`, `prompt` or `instructions` text, and its
/// messages (string contents and text parts), one per line.
fn message_text(request: &Value) -> String {
    let mut lines = Vec::new();
    // Embeddings, Responses and image requests: their `input` or `prompt` text.
    for field in ["input", "prompt", "instructions"] {
        match request.get(field) {
            Some(Value::String(text)) => lines.push(text.clone()),
            Some(Value::Array(items)) => {
                lines.extend(items.iter().filter_map(Value::as_str).map(str::to_owned))
            }
            _ => {}
        }
    }
    for message in request
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match message.get("content") {
            Some(Value::String(text)) => lines.push(text.clone()),
            Some(Value::Array(parts)) => lines.extend(
                parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .map(str::to_owned),
            ),
            _ => {}
        }
    }
    lines.join("\n")
}

/// The contract's checks on one output.
pub fn check_output(kind: &Kind, case: &ContractCase, output: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if let Err(errors) = kind.check_output(output) {
        problems.extend(
            errors
                .into_iter()
                .map(|e| format!("output schema at {}: {}", e.path, e.message)),
        );
    }
    if let (Some(schema), Some(object)) = (&kind.output_schema, output.as_object()) {
        let source = schema.source();
        let listed: Vec<&str> = source
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let required: Vec<&str> = source
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for key in object.keys() {
            if !listed.is_empty() && !listed.contains(&key.as_str()) {
                problems.push(format!(
                    "extra top-level key {key:?} the output schema does not list"
                ));
            }
        }
        for key in required {
            if !object.contains_key(key) {
                problems.push(format!("missing top-level key {key:?}"));
            }
        }
    }
    let text = output.to_string().to_lowercase();
    for needle in &case.must_contain {
        if !text.contains(&needle.to_lowercase()) {
            problems.push(format!("the output does not contain {needle:?}"));
        }
    }
    problems
}
