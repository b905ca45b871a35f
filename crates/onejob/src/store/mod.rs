//! Storage: one [`Store`] trait, with a PostgreSQL and a SQLite implementation side by side.
//!
//! The database is the arbiter of the design's invariants: the unique constraint on
//! `(tenant, user_id, key_hash)` decides which of two racing submissions creates the job,
//! check constraints and triggers keep a job's intent immutable and its result written once.
//!
//! The rules are written once and the SQL twice. A database brings two things. Its dialect
//! (`dialect.rs`): its statements' text (`sql.rs`, filled by `postgres/sql.rs` and
//! `sqlite/sql.rs`), how it begins a write transaction, binds a value and reads a column
//! (`postgres/dialect.rs`, `sqlite/dialect.rs`); nothing in it runs. And its backend
//! (`backend.rs`): the pools and time bound its statements run on, and the operations whose
//! shape differs (intake's group commit, the first attempts' batch, retention's pass,
//! waiting for work, migrations). The runtime services that do not differ (the replay cache,
//! the fences and the group commits of acknowledgements and completions) are made in one
//! place (`engine.rs`) and held once per store. Everything else is written once over that
//! interface and implemented for every backend: the state changes ([`Transitions`], over
//! the statements in `statements.rs`), [`Dispatch`], [`Listings`], [`Keys`],
//! [`Certificates`] and the reads of [`Store`]. Citus is PostgreSQL's dialect unchanged,
//! with work across tenants spread shard by shard (`postgres/citus.rs`), not a third store.
//! Both backends pass the same conformance suite (`tests/store/`).

#[macro_use]
mod sql;
#[macro_use]
mod dialect;
mod backend;
mod batch;
mod bound;
mod certificates;
mod dispatch;
mod engine;
mod error;
mod grouped;
mod keys;
mod listing;
pub mod postgres;
mod records;
mod retention;
mod rows;
mod settled;
mod spanning;
pub mod sqlite;
mod statements;
mod tenants;
mod transitions;
mod wake;

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use onejob_domain::{KeyHash, Principal};
use uuid::Uuid;

pub use certificates::Certificates;
pub use dispatch::Dispatch;
pub use error::{Chain, StoreError};
pub use keys::Keys;
pub use listing::Listings;
pub use records::{
    Acknowledged, ApiKeyRecord, ApiKeySummary, AttemptRecord, AttemptStart, CancelOutcome,
    CertificateRecord, Completion, EventRecord, FailOutcome, FirstAttempts, FirstStart, Intake,
    JobFilter, JobRecord, NewApiKey, NewEvent, NewJob, Pruned, RecoverOutcome, Resolution,
    RetryPolicy, Revocation, RunStep, Scope, StartAtIntake, StartOutcome, StartRefusal, UnknownBy,
    Unsuccessful, payload_digest, storable, storable_text,
};
pub use retention::Retention;
pub use transitions::Transitions;
pub use wake::{Woken, WorkSignal};

use backend::{Backend, read_all, read_optional};

/// Everything onejob keeps durably: the jobs and their intake here, the rest by noun in the
/// supertraits. One implementation per database; the state changes come with it, written
/// once ([`Transitions`]).
#[async_trait]
pub trait Store:
    Transitions + Dispatch + Keys + Listings + Certificates + Retention + Send + Sync + 'static
{
    /// Which database this is (`"postgres"` or `"sqlite"`), for logs and `/readyz`.
    fn backend(&self) -> &'static str;

    /// Applies the pending schema migrations; says how many there were.
    async fn migrate(&self) -> Result<Migrated, StoreError>;

    /// Checks that the database answers and, where writes can stall without an error
    /// (PostgreSQL: a primary whose synchronous standby is gone), that this node can commit.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Creates the job, or finds the one already under its `(owner, key_hash)`.
    ///
    /// The insert does nothing on conflict and the winner is read back, so concurrent
    /// submissions of one key (on any number of nodes) all see the same job. The read-back
    /// job is compared with `job` (owner, kind, fingerprint): a match is a replay and appends
    /// a `replayed` event; a mismatch is a [`Intake::Conflict`] and changes nothing.
    /// A created job gets its `created` event in the same transaction. A succeeded or
    /// cancelled job a replay found before is kept in memory for a short time, and a replay
    /// of it answered from there (`settled.rs`). A job retention deletes meanwhile is
    /// [`StoreError::Vanished`]: its key names nothing, and the caller submits again.
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

    /// The later steps of the owner's agent run under `run_key` (the hash of the run's
    /// Idempotency-Key: its first call is the job under that key itself), in step order.
    async fn run_steps(
        &self,
        owner: &Principal,
        run_key: &KeyHash,
    ) -> Result<Vec<JobRecord>, StoreError>;

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

    /// The owner's job's attempts, oldest first; `None` if the job is not the owner's.
    async fn attempts(
        &self,
        owner: &Principal,
        job_id: Uuid,
    ) -> Result<Option<Vec<AttemptRecord>>, StoreError> {
        if self.job(owner, job_id).await?.is_none() {
            return Ok(None);
        }
        self.job_attempts(job_id).await.map(Some)
    }

    /// An attempt and its job, if the job belongs to `tenant` (operator scope).
    async fn attempt_in_tenant(
        &self,
        tenant: &str,
        attempt_id: Uuid,
    ) -> Result<Option<(AttemptRecord, JobRecord)>, StoreError>;
}

/// What a migration found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migrated {
    /// Migrations the database had before.
    pub before: usize,
    /// Migrations applied now.
    pub applied: usize,
}

impl Migrated {
    /// The database held no onejob schema and now holds it whole.
    pub fn created(&self) -> bool {
        self.before == 0 && self.applied > 0
    }
}

#[async_trait]
impl<B: Backend + Retention> Store for B {
    fn backend(&self) -> &'static str {
        B::NAME
    }

    async fn migrate(&self) -> Result<Migrated, StoreError> {
        self.migrate_schema().await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.ready().await
    }

    async fn create_or_replay(&self, job: NewJob) -> Result<Intake, StoreError> {
        // A replay of a job that can no longer change is answered from memory (settled.rs),
        // while its event finds room in the queue of events to write; when that is full (the
        // database is slow to take writes), it is answered as any replay is, through intake.
        if let Some(kept) = self.settled().get(&job.owner, &job.key_hash) {
            if !job.matches(&kept) {
                return Ok(Intake::Conflict(kept));
            }
            if self.log_replayed(job.replayed_event(&kept)) {
                return Ok(Intake::Replayed(kept));
            }
        }
        let intake = self.intake(job).await?;
        if let Intake::Replayed(found) = &intake {
            self.settled().keep(found);
        }
        Ok(intake)
    }

    async fn append_event(&self, event: NewEvent) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        tx.insert_event(&event).await?;
        tx.commit().await
    }

    async fn job(&self, owner: &Principal, id: Uuid) -> Result<Option<JobRecord>, StoreError> {
        let values = args![id, &owner.tenant, &owner.user];
        let row = read_optional(self, B::SQL.owned_job, values).await?;
        row.as_ref().map(rows::job::<B>).transpose()
    }

    async fn job_by_key(
        &self,
        owner: &Principal,
        key_hash: &KeyHash,
    ) -> Result<Option<JobRecord>, StoreError> {
        let values = args![&owner.tenant, &owner.user, &key_hash.0[..]];
        let row = read_optional(self, B::SQL.job_by_key, values).await?;
        row.as_ref().map(rows::job::<B>).transpose()
    }

    async fn run_steps(
        &self,
        owner: &Principal,
        run_key: &KeyHash,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let values = args![&owner.tenant, &owner.user, &run_key.0[..]];
        let rows = read_all(self, B::SQL.run_steps, values).await?;
        rows.iter().map(rows::job::<B>).collect()
    }

    async fn events(
        &self,
        owner: &Principal,
        job_id: Uuid,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Option<Vec<EventRecord>>, StoreError> {
        // (The job is looked up by its owner, the events by its tenant: both on one shard.)
        if self.job(owner, job_id).await?.is_none() {
            return Ok(None);
        }
        let values = args![job_id, after, limit, &owner.tenant];
        let events = read_all(self, B::SQL.events_after, values).await?;
        rows::all::<B, _>(&events, rows::event::<B>).map(Some)
    }

    async fn attempts(
        &self,
        owner: &Principal,
        job_id: Uuid,
    ) -> Result<Option<Vec<AttemptRecord>>, StoreError> {
        if self.job(owner, job_id).await?.is_none() {
            return Ok(None);
        }
        let values = args![job_id, &owner.tenant];
        let attempts = read_all(self, B::SQL.job_attempts_in_tenant, values).await?;
        rows::all::<B, _>(&attempts, rows::attempt::<B>).map(Some)
    }

    async fn attempt_in_tenant(
        &self,
        tenant: &str,
        attempt_id: Uuid,
    ) -> Result<Option<(AttemptRecord, JobRecord)>, StoreError> {
        let values = args![attempt_id, tenant];
        let row = read_optional(self, B::SQL.attempt_in_tenant, values).await?;
        let Some(attempt) = row.as_ref().map(rows::attempt::<B>).transpose()? else {
            return Ok(None);
        };
        let values = args![attempt.job_id, tenant];
        let job = read_optional(self, B::SQL.job_in_tenant, values).await?;
        Ok(job
            .as_ref()
            .map(rows::job::<B>)
            .transpose()?
            .map(|job| (attempt, job)))
    }
}

/// Settings for opening a store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Most connections the pool opens.
    pub max_connections: u32,
    /// How long a caller waits for a pooled connection before the store reports itself
    /// unavailable.
    pub acquire_timeout: Duration,
    /// Retention's `finished_after` where it is on (`[retention]`, on any node of this
    /// database): replays are never answered from memory for a job retention may delete
    /// meanwhile (`settled.rs`).
    pub finished_after: Option<Duration>,
    /// How long one statement or commit may take on PostgreSQL before its outcome counts as
    /// unknown: the caller is answered retryably (HTTP 503), the connection is discarded,
    /// and `/readyz` reports that this node cannot commit (see `bound.rs`). SQLite is not
    /// bounded this way (its `busy_timeout` bounds its waits).
    pub write_timeout: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            max_connections: 16,
            acquire_timeout: Duration::from_secs(5),
            finished_after: None,
            write_timeout: bound::WRITE_TIMEOUT,
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

/// The URL with any password replaced by `***`, for error messages and logs (also a URL
/// the `url` crate cannot parse, such as PostgreSQL's list of hosts `h1:5432,h2:5432`).
pub use onejob_pg_connect::redact;
