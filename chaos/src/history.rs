//! The history of one fault run, as JSON lines: every client request and response, every
//! side effect the fake provider saw (with the task's final status), the faults injected,
//! what the scenario promises beyond DESIGN §2 ([`Expectation`]), and a final read-back of
//! every job (view, attempts, event log) and of the job listing.
//!
//! A [`History`] is written while the run goes (one line per [`Record`], flushed as it
//! goes, so a history survives a test that panics half-way) and read back by
//! [`read_history`] for the offline [`crate::checker`].

use std::{
    fs::File,
    io::{BufRead, BufReader, BufWriter, Write},
    path::{Path, PathBuf},
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One line of a history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    /// A client sent a request.
    Request {
        /// Milliseconds since the run started.
        t_ms: u64,
        /// Which request this is (unique in the history); its response has the same `seq`.
        seq: u64,
        /// Which client (task) sent it.
        client: String,
        /// Which onejob node it went to.
        node: usize,
        /// `GET`, `POST`, …
        method: String,
        /// The path and query.
        path: String,
        /// The `Idempotency-Key` header, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        /// The JSON body, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body: Option<Value>,
    },
    /// The answer to the request with the same `seq` (or why there was none).
    Response {
        /// Milliseconds since the run started.
        t_ms: u64,
        /// The request's `seq`.
        seq: u64,
        /// The HTTP status; `None` when no answer came (connection refused, reset, timeout).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
        /// `Content-Type`, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content_type: Option<String>,
        /// `Retry-After`, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after: Option<String>,
        /// `Idempotent-Replayed`, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replayed: Option<String>,
        /// The body: JSON when it parses, else the text as a JSON string.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body: Option<Value>,
        /// The transport error, when no answer came; for a client that went away on
        /// purpose, where it went away (see [`crate::client::Vanish`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The `onejob-job-id` header: the job a gateway answer (`/v1/chat/completions`, …)
        /// belongs to, which it names nowhere else. Absent in histories written before it
        /// was recorded, and on answers without it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job_id: Option<String>,
    },
    /// One side effect at the fake provider: a submit it received and ran (a task, or a
    /// chat completion).
    SideEffect {
        /// Which fake provider (its configured name).
        provider: String,
        /// The fake's input hash.
        input_hash: String,
        /// The input it received.
        input: Value,
        /// The upstream idempotency key onejob forwarded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idempotency_key: Option<String>,
        /// The task it created.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task_id: Option<String>,
        /// The task's status document at the end of the run (`result` once succeeded); for
        /// a chat completion, its cached answer in that shape (see
        /// [`crate::readback::record_side_effects`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task: Option<Value>,
    },
    /// What the scenario promises beyond DESIGN §2's rules, for its history in particular:
    /// each [`Expectation`] becomes a rule of the checker of its own. A history without
    /// this record is held to DESIGN §2 only.
    Expect {
        /// The promises.
        expectations: Vec<Expectation>,
    },
    /// A fault the run injected (for the reader; the checker does not need them).
    Fault {
        /// Milliseconds since the run started.
        t_ms: u64,
        /// What was done.
        what: String,
    },
    /// Every job id the principal's listing (`GET /v1/jobs`, all pages) shows after the run:
    /// with the [`Record::Job`] read-backs by key, it shows that no job exists without a key
    /// and none twice.
    Listing {
        /// The ids, newest first.
        job_ids: Vec<String>,
    },
    /// The final read-back of one job, through the API, after the run.
    Job {
        /// The idempotency key it was submitted under.
        key: String,
        /// The job view (`GET /v1/jobs/{id}`).
        job: Value,
        /// Its attempts (`GET /v1/jobs/{id}/attempts`).
        attempts: Vec<Value>,
        /// Its event log (`GET /v1/jobs/{id}/events`), oldest first.
        events: Vec<Value>,
    },
}

/// A promise a scenario makes about its own history (a [`Record::Expect`]); the checker
/// reports a broken one under the rule of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Expectation {
    /// Every key's last call was answered: `200`/`201` for `POST /v1/jobs`, and for a gateway
    /// call a `200` whose body is the read-back job's result (its job succeeded). A scenario
    /// whose callers go away and come back promises that every retry gets the answer.
    EveryKeyAnswered,
    /// Every key has a job read back, and each job exactly one side effect at the provider:
    /// every intent reached the upstream once, however its callers behaved.
    OneSideEffectPerKey,
    /// No job or attempt is read back `unknown`, and no attempt ever became `unknown` (no
    /// `attempt_unknown` event): a run without crashes, whose every attempt was run to its
    /// end (DESIGN §2.11).
    NeverUnknown,
}

impl Expectation {
    /// The name of the rule that checks it (its serialised name).
    pub fn rule(self) -> &'static str {
        match self {
            Expectation::EveryKeyAnswered => "every-key-answered",
            Expectation::OneSideEffectPerKey => "one-side-effect-per-key",
            Expectation::NeverUnknown => "never-unknown",
        }
    }
}

/// Why a history could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The file could not be opened, written or read.
    #[error("history file {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not a [`Record`].
    #[error("history file {path}, line {line}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// Why.
        source: serde_json::Error,
    },
}

/// A history being written.
pub struct History {
    path: PathBuf,
    started: Instant,
    next_seq: AtomicU64,
    out: Mutex<BufWriter<File>>,
}

impl History {
    /// Creates (truncates) the history file at `path`.
    pub fn create(path: impl Into<PathBuf>) -> Result<History, HistoryError> {
        let path = path.into();
        let file = File::create(&path).map_err(|source| HistoryError::Io {
            path: path.clone(),
            source,
        })?;
        Ok(History {
            path,
            started: Instant::now(),
            next_seq: AtomicU64::new(1),
            out: Mutex::new(BufWriter::new(file)),
        })
    }

    /// Where the history is written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Milliseconds since the history was created.
    pub fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// A fresh request sequence number.
    pub fn next_seq(&self) -> u64 {
        self.next_seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Appends one record (a line) and flushes it.
    pub fn write(&self, record: &Record) {
        let line = serde_json::to_string(record).expect("a record serialises");
        let mut out = self.out.lock().expect("history lock");
        // A history that cannot be written makes the run worthless: fail loudly.
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .unwrap_or_else(|e| panic!("writing {}: {e}", self.path.display()));
    }

    /// Records what the scenario promises beyond DESIGN §2 (a [`Record::Expect`]).
    pub fn expect(&self, expectations: &[Expectation]) {
        self.write(&Record::Expect {
            expectations: expectations.to_vec(),
        });
    }

    /// Records an injected fault.
    pub fn fault(&self, what: impl Into<String>) {
        self.write(&Record::Fault {
            t_ms: self.now_ms(),
            what: what.into(),
        });
    }
}

/// Reads every record of a history file.
pub fn read_history(path: &Path) -> Result<Vec<Record>, HistoryError> {
    let io = |source| HistoryError::Io {
        path: path.to_owned(),
        source,
    };
    let reader = BufReader::new(File::open(path).map_err(io)?);
    let mut records = Vec::new();
    for (index, line) in reader.lines().enumerate() {
        let line = line.map_err(io)?;
        if line.trim().is_empty() {
            continue;
        }
        records.push(
            serde_json::from_str(&line).map_err(|source| HistoryError::Parse {
                path: path.to_owned(),
                line: index + 1,
                source,
            })?,
        );
    }
    Ok(records)
}
