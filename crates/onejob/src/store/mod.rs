//! Storage: one [`Store`] trait, with a PostgreSQL and a SQLite implementation side by side.
//!
//! The database is the arbiter of the design's invariants: the unique constraint on
//! `(tenant, user_id, key_hash)` decides which of two racing submissions creates the job,
//! check constraints and triggers keep a job's intent immutable and its result written once.
//! Both implementations pass the same conformance suite (`tests/api/store_conformance.rs`).

mod batch;
mod error;
pub mod postgres;
mod records;
pub mod sqlite;

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use onejob_domain::{AttemptState, EventKind, KeyHash, Principal};
use serde_json::Value;
use uuid::Uuid;

pub use error::{Chain, StoreError};
pub use records::{
    Acknowledged, ApiKeyRecord, ApiKeySummary, AttemptRecord, AttemptStart, CancelOutcome,
    CertificateRecord, Completion, EventRecord, FailOutcome, Intake, JobFilter, JobRecord,
    NewApiKey, NewEvent, NewJob, Pruned, RecoverOutcome, Resolution, RetryPolicy, Revocation,
    Scope, StartOutcome, StartRefusal, UnknownBy, Unsuccessful, payload_digest, storable,
    storable_text,
};

/// Everything onejob keeps durably. One implementation per database.
#[async_trait]
pub trait Store: Send + Sync + 'static {
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
    /// [`Store::start_attempt`] decides.
    async fn due_jobs(&self, limit: u32) -> Result<Vec<Uuid>, StoreError>;

    /// A job by id, whoever owns it.
    async fn job_for_dispatch(&self, id: Uuid) -> Result<Option<JobRecord>, StoreError>;

    /// All attempts of a job, oldest first.
    async fn job_attempts(&self, job_id: Uuid) -> Result<Vec<AttemptRecord>, StoreError>;

    /// Starts an attempt if the attempt guard allows it, in one atomic step: the job is due,
    /// its attempt count is the expected one and under `max_attempts`, no attempt of it is
    /// `starting` or `unknown`, and one is `running` exactly when this start is a hedge.
    /// The job becomes `running`; `attempt_started` (and `failover` when the provider changes)
    /// is logged.
    async fn start_attempt(&self, start: &AttemptStart) -> Result<StartOutcome, StoreError>;

    /// The provider acknowledged a `starting` attempt. Its task id (if any) is stored
    /// whatever the attempt's state. A `starting` attempt becomes `running` (with
    /// `hedge_after`, the job becomes due again for a hedge at that time), or `cancelled`
    /// if its job was cancelled meanwhile ([`Acknowledged::JobCancelled`]: the caller asks
    /// the provider to cancel). Any other state is [`Acknowledged::NotStarting`]: the
    /// attempt is no longer the caller's.
    async fn acknowledge_attempt(
        &self,
        attempt_id: Uuid,
        task_id: Option<&str>,
        hedge_after: Option<Duration>,
    ) -> Result<Acknowledged, StoreError>;

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

    /// Offers an attempt's validated output as the job's result. Exactly one attempt per job
    /// wins, by `UPDATE … WHERE id = $1 AND version = $2 AND completed_by IS NULL`; any
    /// other is `discarded` with a `race_lost` event recording only the payload's size and
    /// hash.
    async fn complete_attempt(
        &self,
        attempt_id: Uuid,
        output: &Value,
        by: &Resolution,
    ) -> Result<Completion, StoreError>;

    /// Records a definite failure (or cancellation). The job goes back to `pending` (due
    /// after the backoff) while its attempt budget lasts, else `failed`; it stays
    /// `running`/`unknown` while another attempt is open. An attempt of a cancelled job ends
    /// `cancelled`.
    async fn fail_attempt(
        &self,
        attempt_id: Uuid,
        end: Unsuccessful,
        error: &Value,
        retry: RetryPolicy,
        by: &Resolution,
    ) -> Result<FailOutcome, StoreError>;

    /// A live attempt's outcome became unknown (deadline, lost lease, shutdown): it blocks new
    /// attempts until resolved. `why` (`{"reason": …}`, with operator-only details under
    /// `internal`) becomes the attempt's error and its event's detail. If the job already has a winner (or was cancelled), the
    /// attempt is `discarded` instead. A rescuer ([`UnknownBy::Rescuer`]) acts only if the
    /// lease is still expired (or the deadline long past) when the update runs. Returns
    /// whether it became `unknown`.
    async fn mark_unknown(
        &self,
        attempt_id: Uuid,
        why: &Value,
        by: UnknownBy,
    ) -> Result<bool, StoreError>;

    /// Settles a `pending` job with no open attempt and no attempt budget left under
    /// `max_attempts` (lowered since it last ran) as `failed`, with an `exhausted` event
    /// saying why. False if the job is not in that situation.
    async fn settle_exhausted(&self, job_id: Uuid, max_attempts: u32) -> Result<bool, StoreError>;

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

    /// Cancels the owner's job unless it already succeeded or failed: its `unknown` attempts
    /// become `cancelled`, and its live attempts are returned so their provider can be asked
    /// to cancel. Cancelling a cancelled job again answers it unchanged. `None` if the job is
    /// not the owner's.
    async fn cancel_job(
        &self,
        owner: &Principal,
        job_id: Uuid,
        actor: &str,
    ) -> Result<Option<CancelOutcome>, StoreError>;

    /// Controlled recovery of the owner's `failed` job: back to `pending`, due now, version
    /// bumped, with a fresh attempt budget; a `recovered` event names the actor.
    async fn recover_job(
        &self,
        owner: &Principal,
        job_id: Uuid,
        actor: &str,
    ) -> Result<Option<RecoverOutcome>, StoreError>;

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
