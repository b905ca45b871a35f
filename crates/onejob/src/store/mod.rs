//! Storage: one [`Store`] trait, with a PostgreSQL and a SQLite implementation side by side.
//!
//! The database is the arbiter of the design's invariants: the unique constraint on
//! `(tenant, user_id, key_hash)` decides which of two racing submissions creates the job,
//! check constraints and triggers keep a job's intent immutable and its result written once.
//!
//! The rules are written once and the SQL twice. The state changes ([`Transitions`]: start,
//! acknowledge, complete, fail, mark unknown, settle, cancel, recover) live in
//! `transitions/`, generic over the statement interface (`statements.rs`) that each backend
//! implements with its own dialect; the rest of [`Store`] is one statement (or one read)
//! per method, so each backend writes it directly. Both backends pass the same conformance
//! suite (`tests/store/`).

mod batch;
mod error;
pub mod postgres;
mod records;
pub mod sqlite;
mod statements;
mod transitions;

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use onejob_domain::{AttemptState, EventKind, KeyHash, Principal};
use uuid::Uuid;

pub use error::{Chain, StoreError};
pub use records::{
    Acknowledged, ApiKeyRecord, ApiKeySummary, AttemptRecord, AttemptStart, CancelOutcome,
    CertificateRecord, Completion, EventRecord, FailOutcome, Intake, JobFilter, JobRecord,
    NewApiKey, NewEvent, NewJob, Pruned, RecoverOutcome, Resolution, RetryPolicy, Revocation,
    Scope, StartOutcome, StartRefusal, UnknownBy, Unsuccessful, payload_digest, storable,
    storable_text,
};
pub use transitions::Transitions;

/// Everything onejob keeps durably. One implementation per database; the state changes
/// come with it, written once ([`Transitions`]).
#[async_trait]
pub trait Store: Transitions + Send + Sync + 'static {
    /// Which database this is (`"postgres"` or `"sqlite"`), for logs and `/readyz`.
    fn backend(&self) -> &'static str;

    /// Applies the pending schema migrations.
    async fn migrate(&self) -> Result<(), StoreError>;

    /// Checks that the database answers.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Creates the job, or finds the one already under its `(owner, key_hash)`.
    ///
    /// The insert does nothing on conflict and the winner is read back, so concurrent
    /// submissions of one key (on any number of nodes) all see the same job. The read-back
    /// job is compared with `job` (owner, kind, fingerprint): a match is a replay and appends
    /// a `replayed` event; a mismatch is a [`Intake::Conflict`] and changes nothing.
    /// A created job gets its `created` event in the same transaction.
    async fn create_or_replay(&self, job: NewJob) -> Result<Intake, StoreError>;

    /// Appends an event to a job's log.
    async fn append_event(&self, event: NewEvent) -> Result<(), StoreError>;

    /// The owner's job with this id; `None` if it does not exist or belongs to someone else.
    async fn job(&self, owner: &Principal, id: Uuid) -> Result<Option<JobRecord>, StoreError>;

    /// The owner's job under this key hash.
    async fn job_by_key(
        &self,
        owner: &Principal,
        key_hash: &KeyHash,
    ) -> Result<Option<JobRecord>, StoreError>;

    /// One page of the event log of the owner's job, oldest first: the events with an id
    /// above `after` (from the start when `None`), at most `limit` of them. `None` if the
    /// job is not the owner's.
    async fn events(
        &self,
        owner: &Principal,
        job_id: Uuid,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Option<Vec<EventRecord>>, StoreError>;

    /// Stores a new API key (its salted hash only).
    async fn insert_api_key(&self, key: NewApiKey) -> Result<(), StoreError>;

    /// The API key with this public id, unless revoked.
    async fn api_key(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError>;

    /// Every API key, revoked ones included, oldest first (`onejob keys list`).
    async fn api_keys(&self) -> Result<Vec<ApiKeySummary>, StoreError>;

    /// Revokes the API key with this public id (sets its `revoked_at`, once): from then on
    /// [`Store::api_key`] does not find it.
    async fn revoke_api_key(&self, id: &str) -> Result<Revocation, StoreError>;

    /// The owner's job's attempts, oldest first; `None` if the job is not the owner's.
    async fn attempts(
        &self,
        owner: &Principal,
        job_id: Uuid,
    ) -> Result<Option<Vec<AttemptRecord>>, StoreError>;

    // ----- Dispatch: used by workers, never with a client's principal. -----

    /// Ids of jobs whose dispatch time has come, oldest first. Only candidates:
    /// [`Transitions::start_attempt`] decides.
    async fn due_jobs(&self, limit: u32) -> Result<Vec<Uuid>, StoreError>;

    /// A job by id, whoever owns it.
    async fn job_for_dispatch(&self, id: Uuid) -> Result<Option<JobRecord>, StoreError>;

    /// All attempts of a job, oldest first.
    async fn job_attempts(&self, job_id: Uuid) -> Result<Vec<AttemptRecord>, StoreError>;

    /// The fence before an attempt's irreversible send: whether `worker` still holds its
    /// `starting` attempt with at least `margin` of lease left, and its job is not cancelled.
    /// A rescuer makes an attempt unknown only once its lease expired (a conditional update
    /// on the database's clock), so an owner that finds `margin` left cannot lose the attempt
    /// for that long.
    async fn owns_attempt(
        &self,
        attempt_id: Uuid,
        worker: &str,
        margin: Duration,
    ) -> Result<bool, StoreError>;

    /// Renews the lease of every live attempt `worker` holds; returns those of them whose
    /// job was cancelled meanwhile (the worker stops them).
    async fn heartbeat(&self, worker: &str, lease: Duration) -> Result<Vec<Uuid>, StoreError>;

    /// Claims up to `limit` `unknown` attempts due for reconciliation and pushes each one's
    /// next check back (doubling from `backoff`, at most `max_backoff`), so nodes reconciling
    /// side by side do not ask twice.
    async fn claim_unknown(
        &self,
        limit: u32,
        backoff: Duration,
        max_backoff: Duration,
    ) -> Result<Vec<AttemptRecord>, StoreError>;

    /// Stores a task id learned late (from a lookup by idempotency key, or a re-send), in
    /// whatever state the attempt is; a task id already stored is kept.
    async fn set_task_id(&self, attempt_id: Uuid, task_id: &str) -> Result<(), StoreError>;

    /// An attempt and its job, if the job belongs to `tenant` (operator scope).
    async fn attempt_in_tenant(
        &self,
        tenant: &str,
        attempt_id: Uuid,
    ) -> Result<Option<(AttemptRecord, JobRecord)>, StoreError>;

    /// The owner's jobs matching `filter`, newest first.
    async fn list_jobs(
        &self,
        owner: &Principal,
        filter: &JobFilter,
    ) -> Result<Vec<JobRecord>, StoreError>;

    /// Attempts in `scope` (optionally only in `state`), newest first, at most `limit`.
    async fn list_attempts(
        &self,
        scope: &Scope,
        state: Option<AttemptState>,
        limit: u32,
    ) -> Result<Vec<AttemptRecord>, StoreError>;

    /// Events in `scope` (optionally only of `kind`), newest first, at most `limit`.
    async fn recent_events(
        &self,
        scope: &Scope,
        kind: Option<EventKind>,
        limit: u32,
    ) -> Result<Vec<EventRecord>, StoreError>;

    /// How many attempts are `unknown` right now, across all tenants (for metrics).
    async fn count_unknown(&self) -> Result<u64, StoreError>;

    /// Records a verification run.
    async fn insert_certificate(&self, certificate: &CertificateRecord) -> Result<(), StoreError>;

    /// Every verification run, newest first.
    async fn certificates(&self) -> Result<Vec<CertificateRecord>, StoreError>;

    /// One page of verification runs, newest first (by id, a UUIDv7): the runs older than
    /// `before` (from the newest when `None`), at most `limit` of them.
    async fn certificates_page(
        &self,
        before: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<CertificateRecord>, StoreError>;

    /// Live attempts (id and provider) whose lease expired, or whose deadline passed more
    /// than `grace` ago.
    async fn expired_attempts(&self, grace: Duration) -> Result<Vec<(Uuid, String)>, StoreError>;

    /// Pushes a due job's dispatch time `delay` into the future, if the job is still at
    /// `version` (a job that changed meanwhile keeps its new dispatch time).
    async fn defer_dispatch(
        &self,
        job_id: Uuid,
        version: i64,
        delay: Duration,
    ) -> Result<bool, StoreError>;

    /// How long until the earliest job with a dispatch time is due (zero if one is due now);
    /// `None` if no job waits for dispatch.
    async fn next_due_in(&self) -> Result<Option<Duration>, StoreError>;

    /// Deletes up to `limit` jobs that finished (succeeded, failed, cancelled) more than
    /// `older_than` ago, with their attempts and events, in one transaction; their keys then
    /// name nothing. Only one store prunes at a time (a second caller meanwhile deletes
    /// nothing and says so); the event log refuses every other delete.
    async fn prune_finished(&self, older_than: Duration, limit: u32) -> Result<Pruned, StoreError>;

    /// Waits until work may have become due (a wake-up from this or another node), or
    /// `max_wait`.
    async fn wait_for_work(&self, max_wait: Duration);
}

/// Ends a transaction that changed nothing and answers `value`. Rolling back explicitly
/// releases its row locks (PostgreSQL) or the write lock (SQLite) now, instead of whenever
/// the dropped transaction's deferred rollback runs, which would make other workers see the
/// job as busy for no reason.
pub(crate) async fn release<DB: sqlx::Database, T>(
    tx: sqlx::Transaction<'static, DB>,
    value: T,
) -> Result<T, StoreError> {
    tx.rollback().await?;
    Ok(value)
}

/// Settings for opening a store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Most connections the pool opens.
    pub max_connections: u32,
    /// How long a caller waits for a pooled connection before the store reports itself
    /// unavailable.
    pub acquire_timeout: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            max_connections: 16,
            acquire_timeout: Duration::from_secs(5),
        }
    }
}

/// Opens the store named by a database URL (`postgres://…` or `sqlite://…`).
///
/// Fails with [`StoreError::Unavailable`] when the database cannot be reached and with
/// [`StoreError::UnsupportedUrl`] for any other scheme.
pub async fn open(url: &str, options: &StoreOptions) -> Result<Arc<dyn Store>, StoreError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(postgres::PgStore::connect(url, options).await?))
    } else if url.starts_with("sqlite:") {
        Ok(Arc::new(sqlite::SqliteStore::connect(url, options).await?))
    } else {
        Err(StoreError::UnsupportedUrl(redact(url)))
    }
}

/// The URL with any password replaced by `***`, for error messages and logs.
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}
