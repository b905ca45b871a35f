//! The exit codes of the commands that talk to a onejob server (`submit`, `status`, `watch`,
//! `jobs`, `attempts`), and how a client error becomes one (reported on stderr first).

use std::process::ExitCode;

use onejob_client::{Error, JobState};

use super::remote::RemoteArgs;
use crate::store::Chain;

/// The exit codes, as `--help` shows them.
pub const EXIT_CODES: &str = "\
Exit codes:
  0  success (with --wait and for watch: the job succeeded)
  1  usage error, or an unexpected error (bad params file, invalid request, 409, …)
  2  the job failed
  3  the job was cancelled
  4  the idempotency key already names a job with other params or another kind (422)
  5  not found (404)
  6  unauthorized or forbidden: missing, wrong or non-operator API key (401, 403)
  7  server unavailable: unreachable, timed out, or 429/502/503/504 after the client's retries
  8  gave up waiting (--timeout passed); the job goes on";

/// How a remote command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It did what it was asked; a waited-for job succeeded.
    Success,
    /// Usage error or unexpected error.
    Error,
    /// The job failed.
    JobFailed,
    /// The job was cancelled.
    JobCancelled,
    /// The idempotency key names a job with other params or another kind (`422`).
    KeyReused,
    /// `404`.
    NotFound,
    /// `401` or `403`.
    Denied,
    /// Unreachable, timed out, or `429`, `502`, `503`, `504`.
    Unavailable,
    /// The job had not finished when the wait gave up.
    StillRunning,
}

impl Exit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Error => 1,
            Exit::JobFailed => 2,
            Exit::JobCancelled => 3,
            Exit::KeyReused => 4,
            Exit::NotFound => 5,
            Exit::Denied => 6,
            Exit::Unavailable => 7,
            Exit::StillRunning => 8,
        }
    }

    /// How waiting for a job that ended in `state` ends.
    pub fn of_state(state: JobState) -> Exit {
        match state {
            JobState::Succeeded => Exit::Success,
            JobState::Failed => Exit::JobFailed,
            JobState::Cancelled => Exit::JobCancelled,
            JobState::Pending | JobState::Running | JobState::Unknown => Exit::StillRunning,
            _ => Exit::Error,
        }
    }

    /// The code a client error exits with.
    pub fn of_error(error: &Error) -> Exit {
        match error {
            Error::KeyReused { .. } => Exit::KeyReused,
            Error::WaitTimedOut { .. } => Exit::StillRunning,
            _ if error.is_unavailable() => Exit::Unavailable,
            _ => match error.status() {
                Some(404) => Exit::NotFound,
                Some(401 | 403) => Exit::Denied,
                _ => Exit::Error,
            },
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit.code())
    }
}

/// Ends a remote command: a client error is reported on stderr (with `--json`, a problem
/// document is also printed on stdout) and exits with its code; any other error goes on to
/// the binary's edge (exit 1).
pub fn finish(remote: &RemoteArgs, result: anyhow::Result<Exit>) -> anyhow::Result<ExitCode> {
    let error = match result {
        Ok(exit) => return Ok(exit.into()),
        Err(error) => error,
    };
    let Some(client_error) = error.downcast_ref::<Error>() else {
        return Err(error);
    };
    match client_error {
        // The client's own wording shows the wait to the nanosecond.
        Error::WaitTimedOut { job, waited } => eprintln!(
            "onejob: job {} is still {} after waiting {}; it goes on",
            job.id,
            job.state,
            super::display::duration(*waited)
        ),
        _ => eprintln!("onejob: {}", Chain(error.as_ref())),
    }
    match client_error {
        Error::KeyReused { .. } => eprintln!(
            "onejob: retry with the original params, or name the new intent with a new key"
        ),
        Error::Transport { .. } => eprintln!(
            "onejob: is onejob running at {}? (set --url or ONEJOB_URL)",
            remote.url
        ),
        Error::Problem { status: 401, .. } => {
            eprintln!("onejob: pass an API key with --api-key or ONEJOB_API_KEY")
        }
        Error::Problem { body, .. } => {
            for line in problem_details(body) {
                eprintln!("onejob: {line}");
            }
        }
        _ => {}
    }
    if remote.json
        && let Error::Problem { body, .. } = client_error
    {
        println!("{}", serde_json::to_string_pretty(body)?);
    }
    Ok(Exit::of_error(client_error).into())
}

/// What a problem document says beyond its detail, one line each: the field errors of a
/// schema refusal (`/prompt: "prompt" is a required property`) and the kinds an unknown
/// kind could have been (`known kinds: chat.completion, image.generate`).
fn problem_details(body: &serde_json::Value) -> Vec<String> {
    let mut lines: Vec<String> = body["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|error| {
            let message = error["message"].as_str()?;
            Some(match error["path"].as_str() {
                Some("") | None => format!("  (the params): {message}"),
                Some(path) => format!("  {path}: {message}"),
            })
        })
        .collect();
    if let Some(kinds) = body["known_kinds"].as_array() {
        let kinds: Vec<&str> = kinds.iter().filter_map(serde_json::Value::as_str).collect();
        lines.push(if kinds.is_empty() {
            "no kinds are configured on this server".to_owned()
        } else {
            format!("known kinds: {}", kinds.join(", "))
        });
    }
    lines
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::problem_details;

    #[test]
    fn a_problem_shows_its_field_errors_and_the_known_kinds() {
        let body = json!({
            "detail": "params fail the kind's schema at /prompt",
            "errors": [{"path": "/prompt", "message": "expected a string"}, {"path": "", "message": "too big"}],
        });
        assert_eq!(
            problem_details(&body),
            ["  /prompt: expected a string", "  (the params): too big"]
        );
        let body = json!({"known_kinds": ["chat.completion", "image.generate"]});
        assert_eq!(
            problem_details(&body),
            ["known kinds: chat.completion, image.generate"]
        );
        assert!(problem_details(&json!({"detail": "x"})).is_empty());
    }
}
