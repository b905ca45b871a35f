//! How jobs and attempts are shown to a person: a job as an aligned block of fields, an
//! attempt as one short phrase, JSON values on one line.

use std::fmt::Write;

use onejob_client::{Attempt, Job};
use serde_json::Value;
use time::{OffsetDateTime, format_description::well_known::Rfc3339};

/// A timestamp as RFC 3339.
pub fn timestamp(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_else(|_| at.to_string())
}

/// A JSON value on one line.
pub fn compact(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// The job as aligned `name  value` lines, with `submitted  created|replayed` first when it
/// was just submitted.
pub fn job_block(job: &Job, replayed: Option<bool>) -> String {
    let mut out = String::new();
    let mut line = |name: &str, value: &str| {
        let _ = writeln!(out, "{name:<13} {value}");
    };
    if let Some(replayed) = replayed {
        line(
            "submitted",
            if replayed {
                "replayed (this key already named the job)"
            } else {
                "created"
            },
        );
    }
    line("job", &job.id.to_string());
    line("kind", &job.kind);
    line("state", job.state.as_str());
    line("attempts", &job.attempts.to_string());
    line("created", &timestamp(job.created_at));
    line("updated", &timestamp(job.updated_at));
    if let Some(result) = &job.result {
        line("result", &compact(result));
    }
    if let Some(error) = &job.error {
        line("error", &compact(error));
    }
    if let Some(winner) = job.completed_by {
        line("completed_by", &winner.to_string());
    }
    out
}

/// An attempt as `#1 fake running` (with `hedge` and the task id where there are).
pub fn attempt_phrase(attempt: &Attempt) -> String {
    let mut phrase = format!("#{} {} {}", attempt.number, attempt.provider, attempt.state);
    if attempt.hedge {
        phrase.push_str(" (hedge)");
    }
    phrase
}

/// All attempts as one phrase: `#1 fake failed, #2 fake-backup running`, or `none`.
pub fn attempts_phrase(attempts: &[Attempt]) -> String {
    if attempts.is_empty() {
        return "none".to_owned();
    }
    attempts
        .iter()
        .map(attempt_phrase)
        .collect::<Vec<_>>()
        .join(", ")
}
