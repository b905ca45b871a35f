//! The statement interface: what each backend provides for the state changes, one SQL
//! statement per method, and no rules.
//!
//! The rules (which attempt may start, which result wins, what a failure does to its job)
//! live once, in `transitions/`, written against this trait. A backend implements it with
//! its own SQL dialect (PostgreSQL's `now()` and `FOR UPDATE`, SQLite's `strftime` and TEXT
//! ids) and says how a write transaction excludes others: PostgreSQL locks the job's row,
//! SQLite holds its single write lock from `BEGIN IMMEDIATE`. Every method taking a
//! transaction runs inside one the rules began with [`Statements::begin`], so the rules
//! decide what is atomic and the statements only what is said.

use std::time::Duration;

use async_trait::async_trait;
use onejob_domain::{AttemptState, JobState, Principal};
use serde_json::Value;
use sqlx::Transaction;
use uuid::Uuid;

use super::{AttemptRecord, AttemptStart, JobRecord, NewEvent, StoreError};

/// A write transaction of backend `S`.
pub(crate) type Tx<S> = Transaction<'static, <S as Statements>::Db>;

/// What the rules read of a job once they hold it: the fields a transition decides on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct JobHead {
    /// The job's state.
    pub state: JobState,
    /// Its version, for the result's compare-and-swap.
    pub version: i64,
    /// Attempts started in this recovery generation and before.
    pub attempts: i32,
    /// Controlled recoveries so far.
    pub recoveries: i32,
    /// The winning attempt, once there is one.
    pub completed_by: Option<Uuid>,
}

/// The statement interface one backend implements (see the module doc).
#[async_trait]
pub(crate) trait Statements: Send + Sync + 'static {
    /// The sqlx database this backend speaks.
    type Db: sqlx::Database;

    /// Begins a write transaction that excludes other writers of the rows it locks.
    async fn begin(&self) -> Result<Tx<Self>, StoreError>;

    /// Tells this process's workers that a job may have become due. PostgreSQL's trigger
    /// notifies every node on its own; SQLite has only this.
    fn dispatch_changed(&self);

    /// Locks the job for a start unless another transaction holds it: `None` when it is
    /// held (PostgreSQL's `SKIP LOCKED`) or missing. With the head, whether the job is due.
    async fn lock_due_job(
        tx: &mut Tx<Self>,
        job_id: Uuid,
    ) -> Result<Option<(JobHead, bool)>, StoreError>;

    /// Whether a job with this id exists.
    async fn job_exists(tx: &mut Tx<Self>, job_id: Uuid) -> Result<bool, StoreError>;

    /// Locks the job (waiting for other holders) and reads its head; `None` if missing.
    async fn lock_job(tx: &mut Tx<Self>, job_id: Uuid) -> Result<Option<JobHead>, StoreError>;

    /// Locks the owner's job and reads all of it; `None` if it is not the owner's.
    async fn lock_owned_job(
        tx: &mut Tx<Self>,
        owner: &Principal,
        job_id: Uuid,
    ) -> Result<Option<JobRecord>, StoreError>;

    /// The whole job, read again inside the transaction.
    async fn reload_job(tx: &mut Tx<Self>, job_id: Uuid) -> Result<JobRecord, StoreError>;

    /// The job of an attempt (which never changes, so it needs no lock); `None` if the
    /// attempt does not exist.
    async fn job_of(tx: &mut Tx<Self>, attempt_id: Uuid) -> Result<Option<Uuid>, StoreError>;

    /// An attempt's state.
    async fn attempt_state(tx: &mut Tx<Self>, attempt_id: Uuid)
    -> Result<AttemptState, StoreError>;

    /// The job's `starting`, `running` and `unknown` attempts, oldest first.
    async fn open_attempts(
        tx: &mut Tx<Self>,
        job_id: Uuid,
    ) -> Result<Vec<(Uuid, AttemptState)>, StoreError>;

    /// The states of all the job's attempts.
    async fn attempt_states(
        tx: &mut Tx<Self>,
        job_id: Uuid,
    ) -> Result<Vec<AttemptState>, StoreError>;

    /// The job's `starting` and `running` attempts, oldest first.
    async fn live_attempts(
        tx: &mut Tx<Self>,
        job_id: Uuid,
    ) -> Result<Vec<AttemptRecord>, StoreError>;

    /// The provider of the job's latest attempt.
    async fn last_provider(tx: &mut Tx<Self>, job_id: Uuid) -> Result<Option<String>, StoreError>;

    /// Inserts attempt `number` of `start`'s job, `starting`, with its lease and deadline
    /// counted from the database's clock.
    async fn insert_attempt(
        tx: &mut Tx<Self>,
        start: &AttemptStart,
        number: i32,
    ) -> Result<AttemptRecord, StoreError>;

    /// The job is `running` with one more attempt, and not due.
    async fn mark_job_started(tx: &mut Tx<Self>, job_id: Uuid) -> Result<(), StoreError>;

    /// Stores the attempt's task id unless one is stored; returns the attempt's state.
    async fn keep_task_id(
        tx: &mut Tx<Self>,
        attempt_id: Uuid,
        task_id: Option<&str>,
    ) -> Result<AttemptState, StoreError>;

    /// The acknowledged attempt becomes `running`.
    async fn mark_running(tx: &mut Tx<Self>, attempt_id: Uuid) -> Result<(), StoreError>;

    /// A `starting` attempt acknowledged after its job was cancelled ends `cancelled`, its
    /// key spent.
    async fn cancel_acknowledged(tx: &mut Tx<Self>, attempt_id: Uuid) -> Result<(), StoreError>;

    /// A `running` job becomes due again `after` from now, for a hedge.
    async fn schedule_hedge(
        tx: &mut Tx<Self>,
        job_id: Uuid,
        after: Duration,
    ) -> Result<(), StoreError>;

    /// An open attempt ends `discarded`.
    async fn discard_attempt(tx: &mut Tx<Self>, attempt_id: Uuid) -> Result<(), StoreError>;

    /// The compare-and-swap of the result: the job succeeds with `output` by `attempt_id` if
    /// it is still at `version`, open and without a winner, and the attempt, if still open,
    /// ends `succeeded`. Whether both happened (if not, the caller rolls back).
    async fn swap_result(
        tx: &mut Tx<Self>,
        job_id: Uuid,
        version: i64,
        output: &Value,
        attempt_id: Uuid,
    ) -> Result<bool, StoreError>;

    /// The job's `unknown` attempts other than `winner` end `discarded`; returns them.
    async fn discard_unknown_siblings(
        tx: &mut Tx<Self>,
        job_id: Uuid,
        winner: Uuid,
    ) -> Result<Vec<Uuid>, StoreError>;

    /// An attempt ends in `state` (failed, rejected, cancelled…) with `error`.
    async fn end_attempt(
        tx: &mut Tx<Self>,
        attempt_id: Uuid,
        state: AttemptState,
        error: &Value,
        key_spent: bool,
    ) -> Result<(), StoreError>;

    /// Sets a job's recomputed state: due after `backoff` when `pending`, with `error` (or
    /// none), version bumped.
    async fn set_job_state(
        tx: &mut Tx<Self>,
        job_id: Uuid,
        state: JobState,
        backoff: Duration,
        error: Option<&Value>,
    ) -> Result<(), StoreError>;

    /// A job without attempt budget ends `failed` with `error`.
    async fn fail_job(tx: &mut Tx<Self>, job_id: Uuid, error: &Value) -> Result<(), StoreError>;

    /// A live attempt ends `discarded` with `error`, if `grace` is `None` (its own worker)
    /// or its lease is still expired (or its deadline more than `grace` past) now. Whether it
    /// changed.
    async fn discard_live(
        tx: &mut Tx<Self>,
        attempt_id: Uuid,
        error: &Value,
        grace: Option<Duration>,
    ) -> Result<bool, StoreError>;

    /// A live attempt becomes `unknown` with `why`, due for reconciliation now, on the same
    /// condition as [`Statements::discard_live`]. Whether it changed.
    async fn make_unknown(
        tx: &mut Tx<Self>,
        attempt_id: Uuid,
        why: &Value,
        grace: Option<Duration>,
    ) -> Result<bool, StoreError>;

    /// The job ends `cancelled`, not due, and its `unknown` attempts with it; returns those.
    async fn cancel_job_row(tx: &mut Tx<Self>, job_id: Uuid) -> Result<Vec<Uuid>, StoreError>;

    /// A failed job goes back to `pending`, due now, in a new recovery generation.
    async fn recover_job_row(tx: &mut Tx<Self>, job_id: Uuid) -> Result<(), StoreError>;

    /// Appends an event to the job's log.
    async fn insert_event(tx: &mut Tx<Self>, event: &NewEvent) -> Result<(), StoreError>;
}
