//! The rows the store reads and writes, as plain Rust values shared by both databases.

use std::time::Duration;

use onejob_domain::{AttemptState, EventKind, Fingerprint, JobState, KeyHash, Principal};
use serde_json::{Value, json};
use time::OffsetDateTime;
use uuid::Uuid;

mod keys;
mod payloads;

pub use keys::{ApiKeyRecord, ApiKeySummary, NewApiKey, Revocation};
pub use payloads::{payload_digest, storable, storable_text, with_member};

/// A job to create (or to find, if its key was used before).
#[derive(Debug, Clone)]
pub struct NewJob {
    /// The id the job gets if it is created (a UUIDv7).
    pub id: Uuid,
    /// Who submits it.
    pub owner: Principal,
    /// SHA-256 of the idempotency key.
    pub key_hash: KeyHash,
    /// The job's kind.
    pub kind: String,
    /// The fingerprint of `{"kind", "params"}`.
    pub fingerprint: Fingerprint,
    /// The parameters, already validated.
    pub params: Value,
    /// The caller's request as sent, for a gateway job: what is forwarded upstream (see
    /// [`JobRecord::request_body`]).
    pub request_body: Option<String>,
    /// Who is acting, for the event log (`key:<api key id>`).
    pub actor: String,
    /// The agent run this job is a later step of, where it is one ([`RunStep`]); its
    /// `key_hash` is then the step's key (`KeyHash::step`).
    pub run: Option<RunStep>,
    /// The job's first attempt, to start in the transaction that creates it, for a worker of
    /// this process that runs it at once ([`StartAtIntake`]); `None`: the job waits for
    /// dispatch. Whether it was started is seen from the created job
    /// ([`NewJob::started_attempt`]).
    pub start: Option<StartAtIntake>,
}

/// A later step of an agent run: a model call under the run's Idempotency-Key whose
/// conversation extends the conversation of the run's jobs before it (docs/gateway.md,
/// "Agent runs"). The run's first call is the job under the key itself, with no `RunStep`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunStep {
    /// The hash of the run's Idempotency-Key (its first job's `key_hash`).
    pub key: KeyHash,
    /// The step: how many conversation items the call carries.
    pub step: i32,
}

/// A first attempt started by intake, in the transaction that creates its job: the job is
/// committed `running` with its attempt number 1 `starting`, leased to `worker`, and is never
/// due for dispatch, so no other worker (of this node or another) can start it. The attempt
/// guard holds by construction: nobody saw the job before it had its attempt. Used by the
/// gateway when this process's own worker has a free slot for the job.
#[derive(Debug, Clone)]
pub struct StartAtIntake {
    /// The attempt's id.
    pub attempt_id: Uuid,
    /// The kind's primary provider.
    pub provider: String,
    /// The worker that runs it (its lease holder).
    pub worker: String,
    /// The lease length.
    pub lease: Duration,
    /// The attempt's deadline, from the job's creation.
    pub timeout: Duration,
}

impl NewJob {
    /// The first attempt intake started with `record`, the job this submission created: as
    /// written beside it when the store started it (the job is `running` with one attempt),
    /// `None` when the job waits for dispatch instead. Its times are the job's creation time
    /// plus the lease and the timeout, as the statement that wrote it computed them.
    pub fn started_attempt(&self, record: &JobRecord) -> Option<AttemptRecord> {
        let start = self.start.as_ref()?;
        if record.id != self.id || record.attempts != 1 || record.state != JobState::Running {
            return None;
        }
        let at = record.created_at;
        Some(AttemptRecord {
            id: start.attempt_id,
            job_id: record.id,
            number: 1,
            provider: start.provider.clone(),
            state: AttemptState::Starting,
            hedge: false,
            task_id: None,
            worker: Some(start.worker.clone()),
            lease_expires_at: Some(at + start.lease),
            deadline_at: Some(at + start.timeout),
            started_at: at,
            acknowledged_at: None,
            finished_at: None,
            unknown_since: None,
            upstream_key: Some(format!("onejob:{}", record.id)),
            key_spent: false,
            error: None,
            reconcile_checks: 0,
        })
    }

    /// The first attempt intake starts with this job, as the store's start of one attempt
    /// takes it.
    pub(crate) fn attempt_start(&self) -> Option<AttemptStart> {
        let start = self.start.as_ref()?;
        Some(AttemptStart {
            job_id: self.id,
            expected_attempts: 0,
            provider: start.provider.clone(),
            hedge: false,
            worker: start.worker.clone(),
            lease: start.lease,
            timeout: start.timeout,
            max_attempts: 1,
            upstream_key: format!("onejob:{}", self.id),
        })
    }

    /// The `attempt_started` event of the first attempt intake starts with this job.
    pub(crate) fn started_event(&self) -> Option<NewEvent> {
        let start = self.start.as_ref()?;
        Some(NewEvent {
            tenant: Some(self.owner.tenant.clone()),
            job_id: self.id,
            attempt_id: Some(start.attempt_id),
            kind: EventKind::AttemptStarted,
            actor: None,
            detail: json!({ "number": 1, "provider": start.provider, "hedge": false }),
        })
    }
    /// Whether a read-back job is this same intent: same owner, kind and fingerprint.
    pub fn matches(&self, existing: &JobRecord) -> bool {
        existing.owner == self.owner
            && existing.kind == self.kind
            && existing.fingerprint == self.fingerprint
    }

    /// The `created` event for the job this submission created.
    ///
    /// A created job is this submission's own row, so the event is built from the
    /// submission alone (the PostgreSQL batch writes it in the statement that inserts the job).
    pub fn created_event(&self) -> NewEvent {
        NewEvent {
            tenant: Some(self.owner.tenant.clone()),
            job_id: self.id,
            attempt_id: None,
            kind: EventKind::Created,
            actor: Some(self.actor.clone()),
            detail: self.detail_of_run(
                json!({ "kind": self.kind, "fingerprint": self.fingerprint.to_string() }),
            ),
        }
    }

    /// `detail` with the step of the agent run this job is in, where it is a later step.
    fn detail_of_run(&self, mut detail: Value) -> Value {
        if let Some(run) = &self.run {
            detail["step"] = json!(run.step);
        }
        detail
    }

    /// A submission of `acme`/`alice` of `kind` under `key`, with `{"prompt": key}`, for
    /// unit tests.
    #[cfg(test)]
    pub(crate) fn for_test(kind: &str, key: &str) -> Self {
        let params = json!({ "prompt": key });
        Self {
            id: Uuid::now_v7(),
            owner: Principal::new("acme", "alice"),
            key_hash: onejob_domain::IdempotencyKey::parse(key).unwrap().hash(),
            kind: kind.into(),
            fingerprint: Fingerprint::of(kind, &params, None),
            params,
            request_body: None,
            run: None,
            actor: "test".into(),
            start: None,
        }
    }

    /// The `replayed` event for the existing job this submission matched.
    pub fn replayed_event(&self, record: &JobRecord) -> NewEvent {
        NewEvent {
            tenant: Some(record.owner.tenant.clone()),
            job_id: record.id,
            attempt_id: None,
            kind: EventKind::Replayed,
            actor: Some(self.actor.clone()),
            detail: self.detail_of_run(json!({ "state": record.state })),
        }
    }
}

/// What [`super::Store::create_or_replay`] found.
#[derive(Debug, Clone)]
pub enum Intake {
    /// The job was created now.
    Created(JobRecord),
    /// The key and fingerprint were seen before: this is that job.
    Replayed(JobRecord),
    /// The key is taken by a job with another kind or fingerprint; nothing was written.
    Conflict(JobRecord),
}

/// A stored job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    /// The job id.
    pub id: Uuid,
    /// Its owner.
    pub owner: Principal,
    /// SHA-256 of its idempotency key.
    pub key_hash: KeyHash,
    /// Its kind.
    pub kind: String,
    /// The fingerprint of its kind and params.
    pub fingerprint: Fingerprint,
    /// Its parameters (never changed after creation).
    pub params: Value,
    /// A gateway job's request as the caller sent it (never changed after creation): the
    /// body forwarded upstream, in the caller's key order and number spelling. `params` is
    /// the intent (and the fingerprint's source); this is only what is sent. `None` for other
    /// jobs.
    pub request_body: Option<String>,
    /// The agent run it is a later step of, where it is one.
    pub run: Option<RunStep>,
    /// Its state.
    pub state: JobState,
    /// Bumped by every change; completion compares and swaps it.
    pub version: i64,
    /// How many attempts it has had.
    pub attempts: i32,
    /// How many controlled recoveries it has had (each grants `max_attempts` more).
    pub recoveries: i32,
    /// The winning attempt, once it succeeded.
    pub completed_by: Option<Uuid>,
    /// The winning result (only when succeeded).
    pub result: Option<Value>,
    /// Why it failed (only when failed).
    pub error: Option<Value>,
    /// When it was accepted.
    pub created_at: OffsetDateTime,
    /// When it last changed.
    pub updated_at: OffsetDateTime,
}

/// An event to append to a job's log.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// The job.
    pub job_id: Uuid,
    /// The attempt it is about, if any.
    pub attempt_id: Option<Uuid>,
    /// What happened.
    pub kind: EventKind,
    /// Who did it.
    pub actor: Option<String>,
    /// Details (never a job's parameter values).
    pub detail: Value,
    /// The job's tenant, when the writer has it at hand; `None` makes the store read it
    /// with the job (every event row carries its job's tenant, its distribution column on
    /// a distributed database).
    pub tenant: Option<String>,
}

/// An entry of a job's event log.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRecord {
    /// Position in the global log (increasing).
    pub id: i64,
    /// The job.
    pub job_id: Uuid,
    /// The attempt it is about, if any.
    pub attempt_id: Option<Uuid>,
    /// What happened.
    pub kind: EventKind,
    /// Who did it.
    pub actor: Option<String>,
    /// Details.
    pub detail: Value,
    /// When.
    pub at: OffsetDateTime,
}

/// A stored attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRecord {
    /// The attempt id.
    pub id: Uuid,
    /// Its job.
    pub job_id: Uuid,
    /// 1, 2, … within the job.
    pub number: i32,
    /// The provider it was sent to.
    pub provider: String,
    /// Its state.
    pub state: AttemptState,
    /// Whether it was started as a hedge beside a running attempt.
    pub hedge: bool,
    /// The provider's task id, once known.
    pub task_id: Option<String>,
    /// The worker holding its lease.
    pub worker: Option<String>,
    /// When its lease runs out unless renewed.
    pub lease_expires_at: Option<OffsetDateTime>,
    /// When its outcome becomes unknown if no answer came.
    pub deadline_at: Option<OffsetDateTime>,
    /// When it started.
    pub started_at: OffsetDateTime,
    /// When the provider acknowledged it.
    pub acknowledged_at: Option<OffsetDateTime>,
    /// When it reached a final state.
    pub finished_at: Option<OffsetDateTime>,
    /// When its outcome became unknown.
    pub unknown_since: Option<OffsetDateTime>,
    /// The idempotency key it forwarded upstream (where its provider takes one).
    pub upstream_key: Option<String>,
    /// Whether the provider answered a definite failure under that key, so the job's next
    /// attempt there sends a new one (see `worker::plan::upstream_key`).
    pub key_spent: bool,
    /// Why it failed, or why its outcome is unknown.
    pub error: Option<Value>,
    /// How many times the reconciler claimed it for a check (while `unknown`).
    pub reconcile_checks: i32,
}

/// A request to start an attempt, checked by the store against the attempt guard.
#[derive(Debug, Clone)]
pub struct AttemptStart {
    /// The job.
    pub job_id: Uuid,
    /// The job's attempt count the plan was made for; a different count refuses as stale.
    pub expected_attempts: i32,
    /// The provider to send it to.
    pub provider: String,
    /// A hedge starts beside a running attempt; anything else needs no live attempt at all.
    pub hedge: bool,
    /// The worker that will run it (its lease holder).
    pub worker: String,
    /// The lease length.
    pub lease: Duration,
    /// The attempt's deadline, from now.
    pub timeout: Duration,
    /// The kind's `max_attempts` (per recovery generation).
    pub max_attempts: u32,
    /// The idempotency key the attempt will forward upstream.
    pub upstream_key: String,
}

/// A batch of first attempts to start ([`super::Transitions::start_first_attempts`]): due
/// jobs that never had an attempt, of the kinds a worker serves, each started on its kind's
/// primary provider.
#[derive(Debug, Clone)]
pub struct FirstAttempts {
    /// Most jobs to start.
    pub limit: u32,
    /// The worker that will run them (their lease holder).
    pub worker: String,
    /// The lease length.
    pub lease: Duration,
    /// How each kind's first attempt starts; jobs of other kinds are left alone.
    pub kinds: Vec<FirstStart>,
}

/// How a kind's first attempt starts.
#[derive(Debug, Clone)]
pub struct FirstStart {
    /// The kind.
    pub kind: String,
    /// Its primary provider.
    pub provider: String,
    /// The attempt's deadline, from now.
    pub timeout: Duration,
}

/// What [`super::Transitions::start_attempt`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum StartOutcome {
    /// The attempt exists, in state `starting`, leased to the worker.
    Started(Box<AttemptRecord>),
    /// No attempt was created.
    Refused(StartRefusal),
}

/// Why no attempt was started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartRefusal {
    /// Another transaction holds the job right now (PostgreSQL `SKIP LOCKED`).
    Busy,
    /// No such job.
    NotFound,
    /// The job is not due for dispatch (or is final).
    NotDue(JobState),
    /// The job's attempt count moved since the plan was made.
    Stale,
    /// An attempt is `starting` or `unknown`: nothing may start beside it.
    Blocked {
        /// The blocking attempt.
        attempt_id: Uuid,
        /// Its state.
        state: AttemptState,
    },
    /// An attempt is running and this start is not a hedge (or a hedge found none running).
    NotHedgeable,
    /// The job used up `max_attempts`.
    Exhausted,
}

/// What [`super::Transitions::complete_attempt`] did with a result.
#[derive(Debug, Clone, PartialEq)]
pub enum Completion {
    /// The result won the compare-and-swap and is the job's result.
    Won,
    /// The result came too late and was discarded; a `race_lost` event records it.
    Discarded {
        /// The attempt that won, if one did.
        winner: Option<Uuid>,
        /// The job's state when the result arrived.
        job_state: JobState,
    },
    /// The resolution required an `unknown` attempt and this one is not; nothing changed.
    NotUnknown(AttemptState),
}

/// Who ends an attempt and on what condition: a worker ends its own live attempt; the
/// reconciler and operators end only `unknown` ones, and their events name them.
#[derive(Debug, Clone, Default)]
pub struct Resolution {
    /// The event's actor (`key:<id>` for an operator, `reconciler`); `None` for the worker.
    pub actor: Option<String>,
    /// Only act if the attempt is `unknown`.
    pub only_unknown: bool,
    /// Only act if the attempt is still `starting`: the worker ending an attempt it never
    /// sent, which nobody else may have acted on yet.
    pub only_starting: bool,
    /// Why, kept in the event detail (`provider status`, `settle_unknown_after`, …).
    pub note: Option<String>,
}

impl Resolution {
    /// A worker ending its own attempt.
    pub fn worker() -> Self {
        Self::default()
    }

    /// A worker ending an attempt it did not send, while it is still `starting`.
    pub fn not_sent(note: impl Into<String>) -> Self {
        Self {
            only_starting: true,
            note: Some(note.into()),
            ..Self::default()
        }
    }

    /// Someone resolving an `unknown` attempt with proof (or by decision).
    pub fn of_unknown(actor: impl Into<String>, note: impl Into<String>) -> Self {
        Self {
            actor: Some(actor.into()),
            only_unknown: true,
            note: Some(note.into()),
            ..Self::default()
        }
    }

    /// Whether this resolution may end an attempt in `state`: the worker ends its live
    /// attempts (and unknown ones, with a real answer), everyone else only unknown ones.
    pub fn may_end(&self, state: AttemptState) -> bool {
        match state {
            AttemptState::Starting => !self.only_unknown,
            AttemptState::Running => !self.only_unknown && !self.only_starting,
            AttemptState::Unknown => !self.only_starting,
            _ => false,
        }
    }

    /// An event about `attempt_id` with this resolution's actor.
    pub fn event(
        &self,
        job_id: Uuid,
        attempt_id: Uuid,
        kind: EventKind,
        detail: Value,
    ) -> NewEvent {
        NewEvent {
            tenant: None,
            job_id,
            attempt_id: Some(attempt_id),
            kind,
            actor: self.actor.clone(),
            detail,
        }
    }
}

/// Whether a job that made `attempts` attempts after `recoveries` recoveries may make another:
/// each recovery grants `max_attempts` more.
pub fn within_budget(attempts: i32, recoveries: i32, max_attempts: u32) -> bool {
    let budget = i64::from(max_attempts) * (i64::from(recoveries.max(0)) + 1);
    i64::from(attempts) < budget
}

/// How a definitely unsuccessful attempt ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsuccessful {
    /// It failed, and the provider itself answered that failure under the attempt's
    /// upstream key: the next attempt on that provider sends a new key, because an upstream
    /// caching answers by key would replay the failure.
    Failed,
    /// It failed without the provider answering a failure under its key: never received
    /// (lookup), not reached (connection refused), settled without proof, or decided by an
    /// operator. The key stays in force, so a late copy of the request and the next attempt
    /// deduplicate upstream instead of running twice.
    FailedKeyKept,
    /// It was cancelled (an operator's decision, or the job's cancellation).
    Cancelled,
}

impl Unsuccessful {
    /// The attempt state it ends in.
    pub fn state(self) -> AttemptState {
        match self {
            Unsuccessful::Failed | Unsuccessful::FailedKeyKept => AttemptState::Failed,
            Unsuccessful::Cancelled => AttemptState::Cancelled,
        }
    }

    /// Whether the next attempt on the provider needs a new upstream key.
    pub fn spends_key(self) -> bool {
        !matches!(self, Unsuccessful::FailedKeyKept)
    }
}

/// What [`super::Transitions::acknowledge_attempt`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acknowledged {
    /// The attempt is `running` now; its task id (if any) is stored.
    Running,
    /// The job was cancelled while the attempt was `starting`: the attempt is `cancelled`
    /// (its task id stored), and the provider should be asked to cancel the task.
    JobCancelled,
    /// The attempt was no longer `starting` (rescued as unknown, or resolved): its task id
    /// was stored all the same, but the worker no longer owns it and must not act on it.
    NotStarting(AttemptState),
}

/// Who makes a live attempt `unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownBy {
    /// The worker running it (deadline, ambiguous answer, shutdown).
    Worker,
    /// A lease rescuer: only if, at that moment, the attempt's lease has expired or its
    /// deadline passed more than `grace` ago (a renewal that won the row first wins).
    Rescuer {
        /// How long past its deadline a live attempt may stay live.
        grace: Duration,
    },
}

/// What [`super::Transitions::fail_attempt`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailOutcome {
    /// Recorded; the job is now in this state.
    Recorded(JobState),
    /// The attempt was not open (or not `unknown` when that was required); nothing changed.
    NotOpen(AttemptState),
}

/// What [`super::Transitions::cancel_job`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum CancelOutcome {
    /// The job is cancelled (now or before). `live` are the attempts still running upstream,
    /// to be asked to cancel where their provider can.
    Cancelled {
        /// The job.
        job: JobRecord,
        /// Attempts that were `starting` or `running`.
        live: Vec<AttemptRecord>,
    },
    /// The job already succeeded or failed.
    Final(JobRecord),
}

/// What [`super::Transitions::recover_job`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum RecoverOutcome {
    /// The failed job is `pending` again, due now, with a fresh attempt budget.
    Recovered(JobRecord),
    /// The job is not `failed`; nothing changed.
    NotFailed(JobRecord),
}

/// One `onejob verify` run of a provider against a kind's contract.
#[derive(Debug, Clone, PartialEq)]
pub struct CertificateRecord {
    /// Its id.
    pub id: Uuid,
    /// The provider.
    pub provider: String,
    /// The kind.
    pub kind: String,
    /// SHA-256 of the kind's prompt template when verified.
    pub template_hash: String,
    /// SHA-256 of the kind's canonical output schema when verified.
    pub schema_hash: String,
    /// SHA-256 of the provider's request-shaping settings when verified.
    pub settings_hash: String,
    /// Whether every contract case passed.
    pub passed: bool,
    /// The per-case report.
    pub report: Value,
    /// When.
    pub created_at: OffsetDateTime,
}

/// Whether a definitely failed attempt may be followed by another.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// The kind's `max_attempts`.
    pub max_attempts: u32,
    /// Wait before the next attempt is due.
    pub backoff: Duration,
}

/// The detail of the `attempt_resolved` event of an `unknown` attempt discarded because
/// `winner` won its job.
pub fn sibling_discarded(winner: Uuid) -> Value {
    json!({
        "outcome": "discarded",
        "note": "another attempt of the job won; this one's outcome no longer matters",
        "winner": winner,
    })
}

/// A job settled as failed because it has no attempt budget left (its kind's `max_attempts`
/// was lowered below the attempts it already made), with nothing open.
#[derive(Debug, Clone)]
pub struct Exhausted {
    job_id: Uuid,
    attempts: i32,
    max_attempts: u32,
}

impl Exhausted {
    /// The settlement of `job_id` after `attempts` attempts, with `max_attempts` allowed.
    pub fn new(job_id: Uuid, attempts: i32, max_attempts: u32) -> Self {
        Self {
            job_id,
            attempts,
            max_attempts,
        }
    }

    fn reason(&self) -> String {
        format!(
            "no attempt budget left: the job made {} attempts and its kind now allows {} \
             (max_attempts); retry it (POST /v1/jobs/{{id}}/retry) for a fresh budget",
            self.attempts, self.max_attempts
        )
    }

    /// The job's `error`.
    pub fn job_error(&self) -> Value {
        json!({
            "message": "no attempt succeeded",
            "attempts": self.attempts,
            "last_error": { "message": self.reason() },
        })
    }

    /// Its `exhausted` event.
    pub fn event(&self) -> NewEvent {
        NewEvent {
            tenant: None,
            job_id: self.job_id,
            attempt_id: None,
            kind: EventKind::Exhausted,
            actor: None,
            detail: json!({
                "attempts": self.attempts,
                "max_attempts": self.max_attempts,
                "note": self.reason(),
            }),
        }
    }
}

/// What one pruning pass deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Jobs deleted.
    pub jobs: u64,
    /// Their attempts.
    pub attempts: u64,
    /// Their events.
    pub events: u64,
    /// Another store was pruning at the time: nothing was looked at.
    pub busy: bool,
}

/// Which of a principal's jobs to list, newest first.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    /// Only jobs in this state.
    pub state: Option<JobState>,
    /// Only jobs of this kind.
    pub kind: Option<String>,
    /// Only jobs older than this one (ids are UUIDv7, so they sort by creation).
    pub before: Option<Uuid>,
    /// At most this many.
    pub limit: u32,
}

/// Whose records a listing covers: one principal's, or (for operators) a whole tenant's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// The tenant.
    pub tenant: String,
    /// The user; `None` for the whole tenant.
    pub user: Option<String>,
}
