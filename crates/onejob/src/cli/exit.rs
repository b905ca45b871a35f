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
    eprintln!("onejob: {}", Chain(error.as_ref()));
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
        _ => {}
    }
    if remote.json
        && let Error::Problem { body, .. } = client_error
    {
        println!("{}", serde_json::to_string_pretty(body)?);
    }
    Ok(Exit::of_error(client_error).into())
}
