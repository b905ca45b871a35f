//! The rows the store reads and writes, as plain Rust values shared by both databases.

use onejob_domain::{EventKind, Fingerprint, JobState, KeyHash, Principal};
use serde_json::{Value, json};
use time::OffsetDateTime;
use uuid::Uuid;

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
    /// Who is acting, for the event log (`key:<api key id>`).
    pub actor: String,
}

impl NewJob {
    /// Whether a read-back job is this same intent: same owner, kind and fingerprint.
    pub fn matches(&self, existing: &JobRecord) -> bool {
        existing.owner == self.owner
            && existing.kind == self.kind
            && existing.fingerprint == self.fingerprint
    }

    /// The `created` event for the job this submission created.
    pub fn created_event(&self, record: &JobRecord) -> NewEvent {
        NewEvent {
            job_id: record.id,
            attempt_id: None,
            kind: EventKind::Created,
            actor: Some(self.actor.clone()),
            detail: json!({ "kind": record.kind, "fingerprint": record.fingerprint.to_string() }),
        }
    }

    /// The `replayed` event for the existing job this submission matched.
    pub fn replayed_event(&self, record: &JobRecord) -> NewEvent {
        NewEvent {
            job_id: record.id,
            attempt_id: None,
            kind: EventKind::Replayed,
            actor: Some(self.actor.clone()),
            detail: json!({ "state": record.state }),
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
    /// Its state.
    pub state: JobState,
    /// Bumped by every change; completion compares and swaps it.
    pub version: i64,
    /// How many attempts it has had.
    pub attempts: i32,
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

/// An API key to store.
#[derive(Debug, Clone)]
pub struct NewApiKey {
    /// Its public id (the middle part of `oj_<id>_<secret>`).
    pub id: String,
    /// The principal it authenticates.
    pub principal: Principal,
    /// Random per-key salt.
    pub salt: [u8; 16],
    /// SHA-256(salt || secret).
    pub secret_hash: [u8; 32],
    /// Whether it may use operator endpoints.
    pub operator: bool,
}

/// A stored API key.
#[derive(Debug, Clone)]
pub struct ApiKeyRecord {
    /// Its public id.
    pub id: String,
    /// The principal it authenticates.
    pub principal: Principal,
    /// Its salt.
    pub salt: Vec<u8>,
    /// SHA-256(salt || secret).
    pub secret_hash: Vec<u8>,
    /// Whether it may use operator endpoints.
    pub operator: bool,
}
