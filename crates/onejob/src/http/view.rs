//! The JSON shapes the API answers with: the job view and event entries, and what of them
//! each caller may see ([`Audience`]).

use onejob_domain::{AttemptState, EventKind, JobState};
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;
use utoipa::{
    ToSchema,
    openapi::{ObjectBuilder, RefOr, Schema, Type},
};
use uuid::Uuid;

use crate::store::{AttemptRecord, EventRecord, JobRecord};

/// A string schema whose values are `names`.
fn names_schema(description: &str, names: impl IntoIterator<Item = &'static str>) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
        .enum_values(Some(names))
        .into()
}

/// The schema of a job state.
pub fn job_state_schema() -> RefOr<Schema> {
    names_schema("The job's state.", JobState::ALL.map(JobState::as_str))
}

/// The schema of an attempt state.
pub fn attempt_state_schema() -> RefOr<Schema> {
    names_schema(
        "The attempt's state.",
        AttemptState::ALL.map(AttemptState::as_str),
    )
}

/// The schema of an event kind.
pub fn event_kind_schema() -> RefOr<Schema> {
    names_schema("What happened.", EventKind::ALL.map(EventKind::as_str))
}

/// Who reads a view. A job's owner sees what happened to the job; onejob's internals (which
/// worker process ran an attempt, the provider's addresses, raw upstream answers) are for
/// operators: every error and event detail keeps them under `internal`, which only operator
/// keys are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// The job's owner (a normal API key).
    Owner,
    /// An operator key of the job's tenant.
    Operator,
}

impl Audience {
    /// The audience of a caller with (or without) an operator key.
    pub fn of(operator: bool) -> Self {
        if operator {
            Audience::Operator
        } else {
            Audience::Owner
        }
    }

    /// `value` as this audience may see it: for owners, without any `internal` member.
    pub fn shown(self, value: Value) -> Value {
        match self {
            Audience::Operator => value,
            Audience::Owner => without_internal(value),
        }
    }
}

/// `value` with every object member named `internal` removed, at any depth.
pub fn without_internal(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(key, _)| key != "internal")
                .map(|(key, member)| (key, without_internal(member)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_internal).collect()),
        other => other,
    }
}

/// How long a client should wait before polling a job again in this state; `None` once the
/// job is terminal.
pub fn poll_after_ms(state: JobState) -> Option<u64> {
    match state {
        JobState::Pending => Some(500),
        JobState::Running => Some(1000),
        JobState::Unknown => Some(5000),
        JobState::Succeeded | JobState::Failed | JobState::Cancelled => None,
    }
}

/// A job as the API shows it (docs/design.md §4).
#[derive(Debug, Serialize, ToSchema)]
pub struct JobView {
    /// The job id.
    pub id: Uuid,
    /// Its kind.
    pub kind: String,
    /// Its state.
    #[schema(schema_with = job_state_schema)]
    pub state: JobState,
    /// When it was accepted.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    /// When it last changed.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: OffsetDateTime,
    /// How many attempts it has had.
    pub attempts: i32,
    /// While not terminal: when to poll again. Absent once terminal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_after_ms: Option<u64>,
    /// The winning result; present only when succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why it failed; present only when failed. Its `hint` says what can be done next:
    /// retry the same job (`POST /v1/jobs/{id}/retry`), or use a new idempotency key for a
    /// different request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// The winning attempt; present only when succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed_by: Option<Uuid>,
    /// A later step of an agent run (a model call under the run's Idempotency-Key whose
    /// conversation extends the run's): its step, the number of conversation items it
    /// carries. Absent for every other job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<i32>,
    /// Answered by `GET /v1/jobs?idempotency_key=…` for a key whose agent run has later
    /// steps: every step of the run in order, this job (the run's first) included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<StepView>>,
}

/// One step of an agent run, as `GET /v1/jobs?idempotency_key=…` lists them.
#[derive(Debug, Serialize, ToSchema)]
pub struct StepView {
    /// The step: how many conversation items its call carried.
    pub step: i32,
    /// Its job.
    pub id: Uuid,
    /// Its job's state.
    #[schema(schema_with = job_state_schema)]
    pub state: JobState,
}

impl From<JobRecord> for JobView {
    fn from(job: JobRecord) -> Self {
        let succeeded = job.state == JobState::Succeeded;
        let failed = job.state == JobState::Failed;
        JobView {
            id: job.id,
            kind: job.kind,
            state: job.state,
            created_at: job.created_at,
            updated_at: job.updated_at,
            attempts: job.attempts,
            poll_after_ms: poll_after_ms(job.state),
            result: job.result.filter(|_| succeeded),
            // The job view is the owner's: details stay on the attempts and events.
            error: job
                .error
                .filter(|_| failed)
                .map(without_internal)
                .map(|error| with_hint(error, job.id)),
            completed_by: job.completed_by.filter(|_| succeeded),
            step: job.run.map(|run| run.step),
            steps: None,
        }
    }
}

/// A failed job's `error` with a `hint` saying what its owner can do next: a failed job
/// is not a dead end, but its key stays bound to it, so asking again under that key only
/// replays the failure.
fn with_hint(error: Value, job_id: Uuid) -> Value {
    let hint = format!(
        "POST /v1/jobs/{job_id}/retry runs this same job again with a fresh attempt budget; \
         to ask for something different, use a new Idempotency-Key (this one stays bound to \
         this job)"
    );
    match error {
        Value::Object(mut map) => {
            map.insert("hint".to_owned(), Value::String(hint));
            Value::Object(map)
        }
        other => serde_json::json!({ "message": other, "hint": hint }),
    }
}

/// One entry of a job's event log.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventView {
    /// Position in the log.
    pub id: i64,
    /// What happened.
    #[schema(schema_with = event_kind_schema)]
    pub kind: EventKind,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub at: OffsetDateTime,
    /// The attempt it is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt_id: Option<Uuid>,
    /// Who did it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// Details.
    pub detail: Value,
}

impl EventView {
    /// The event as `audience` may see it.
    pub fn seen_by(event: EventRecord, audience: Audience) -> Self {
        EventView {
            id: event.id,
            kind: event.kind,
            at: event.at,
            attempt_id: event.attempt_id,
            actor: event.actor,
            detail: audience.shown(event.detail),
        }
    }
}

/// One page of a job's event log.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventsView {
    /// The job.
    pub job_id: Uuid,
    /// Oldest first.
    pub events: Vec<EventView>,
    /// Pass as `after` for the next page; `null` on the last.
    pub next_after: Option<i64>,
}

/// One attempt as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptView {
    /// The attempt id.
    pub id: Uuid,
    /// Its job.
    pub job_id: Uuid,
    /// 1, 2, … within the job.
    pub number: i32,
    /// The provider it went to.
    pub provider: String,
    /// Its state.
    #[schema(schema_with = attempt_state_schema)]
    pub state: AttemptState,
    /// Whether it was a hedge beside a running attempt.
    pub hedge: bool,
    /// The provider's task id, once known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The worker that ran it (operator keys only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// When it started.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub started_at: OffsetDateTime,
    /// When the provider acknowledged it.
    #[serde(
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub acknowledged_at: Option<OffsetDateTime>,
    /// When its outcome becomes unknown without an answer.
    #[serde(
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub deadline_at: Option<OffsetDateTime>,
    /// When it reached a final state.
    #[serde(
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub finished_at: Option<OffsetDateTime>,
    /// Why it failed or is unknown (with `internal` details for operator keys only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}

impl AttemptView {
    /// The attempt as `audience` may see it.
    pub fn seen_by(a: AttemptRecord, audience: Audience) -> Self {
        let operator = audience == Audience::Operator;
        AttemptView {
            id: a.id,
            job_id: a.job_id,
            number: a.number,
            provider: a.provider,
            state: a.state,
            hedge: a.hedge,
            task_id: a.task_id,
            worker: a.worker.filter(|_| operator),
            started_at: a.started_at,
            acknowledged_at: a.acknowledged_at,
            deadline_at: a.deadline_at,
            finished_at: a.finished_at,
            error: a.error.map(|error| audience.shown(error)),
        }
    }
}

/// A job's attempts.
#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptsView {
    /// The job.
    pub job_id: Uuid,
    /// Oldest first.
    pub attempts: Vec<AttemptView>,
}

/// A page of the caller's jobs.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobList {
    /// Newest first.
    pub jobs: Vec<JobView>,
    /// Pass as `before` for the next page; `null` on the last.
    pub next_before: Option<Uuid>,
}

/// Attempts across jobs.
#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptList {
    /// Newest first.
    pub attempts: Vec<AttemptView>,
}
