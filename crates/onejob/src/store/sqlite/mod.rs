//! The SQLite store: onejob's embedded default, one file and zero setup.
//!
//! Differences from PostgreSQL, kept here rather than scattered:
//! * uuids, JSON and timestamps are TEXT; timestamps are RFC 3339 UTC with milliseconds
//!   (`strftime('%Y-%m-%dT%H:%M:%fZ')`), so they compare correctly as strings;
//! * SQLite has one writer at a time. Write transactions start with `BEGIN IMMEDIATE`, which
//!   takes the write lock up front: a read-then-write inside one is atomic across every
//!   connection and process, and waiting writers queue on `busy_timeout` instead of failing
//!   when they upgrade a read lock;
//! * the database runs in WAL mode with `synchronous = FULL`, so a committed job survives a
//!   power cut, and readers never block the writer.

use std::{str::FromStr, sync::Arc, time::Duration};

use async_trait::async_trait;
use onejob_domain::{AttemptState, EventKind, Fingerprint, JobState, KeyHash, Principal};
use serde_json::Value;
use sqlx::{
    Sqlite, SqlitePool, Transaction,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
};
use time::{OffsetDateTime, format_description::well_known::Rfc3339};
use tokio::sync::Notify;
use uuid::Uuid;

use super::{
    AttemptRecord, EventRecord, Intake, JobRecord, NewEvent, NewJob, Store, StoreError,
    StoreOptions,
    batch::Batcher,
    records::{storable, storable_text},
};

/// The column list every job query returns, in [`SqliteJobRow`] order.
macro_rules! job_columns {
    () => {
        "id, tenant, user_id, key_hash, kind, fingerprint, params, state, version, attempts, \
         recoveries, completed_by, result, error, created_at, updated_at"
    };
}

/// The current time as onejob stores it: RFC 3339 UTC with milliseconds.
macro_rules! now {
    () => {
        "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
    };
}

/// The current time plus a `strftime` modifier bound at `$param` (`'+1.500 seconds'`).
macro_rules! now_plus {
    ($param:literal) => {
        concat!("strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ", $param, ")")
    };
}

/// The column list every attempt query returns, in [`SqliteAttemptRow`] order.
macro_rules! attempt_columns {
    () => {
        "id, job_id, number, provider, state, hedge, task_id, worker, lease_expires_at, \
         deadline_at, started_at, acknowledged_at, finished_at, unknown_since, upstream_key, key_spent, \
         error"
    };
}

mod certificates;
mod dispatch;
mod intake;
mod keys;
mod listing;
mod retention;
mod statements;

/// How long a writer waits for SQLite's write lock before the store reports itself busy.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// A [`Store`] on SQLite.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// Readers: WAL lets them run beside the writer.
    pool: SqlitePool,
    /// The one writing connection of this process. SQLite admits one writer at a time
    /// anyway; queueing this process's writers here (a fair, immediate hand-over) instead of
    /// in SQLite's busy handler (sleep and retry) keeps write latency low under contention.
    /// Other processes on the same file still meet it through `busy_timeout`.
    writer: SqlitePool,
    /// Wakes this process's workers; SQLite has no cross-process notifications, so other
    /// processes on the same file find work by polling.
    wake: Arc<Notify>,
    /// Group commit of submissions, on the writer.
    intake: Arc<Batcher<NewJob, Intake>>,
    /// Group commit of `replayed` events, on the writer.
    replays: Arc<Batcher<NewEvent, ()>>,
}

impl SqliteStore {
    /// Opens (creating if missing) the database file named by `url` (`sqlite://onejob.db`).
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self, StoreError> {
        let connect = SqliteConnectOptions::from_str(url)
            .map_err(StoreError::from)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT);
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect.clone())
            .await?;
        let pool = SqlitePoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await?;
        let wake = Arc::new(Notify::new());
        Ok(Self {
            intake: Arc::new(intake::intake_batcher(writer.clone(), wake.clone())),
            replays: Arc::new(intake::replay_batcher(writer.clone())),
            pool,
            writer,
            wake,
        })
    }

    /// The readers' pool (for tests and tools).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Begins a write transaction holding SQLite's write lock from its first statement.
    async fn begin_write(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        Ok(self.writer.begin_with("BEGIN IMMEDIATE").await?)
    }
}

/// A `strftime` modifier adding `duration` to now, bound as a parameter.
fn plus(duration: Duration) -> String {
    format!("+{:.3} seconds", duration.as_secs_f64())
}

/// A `strftime` modifier subtracting `duration` from now.
fn minus(duration: Duration) -> String {
    format!("-{:.3} seconds", duration.as_secs_f64())
}

/// A state column parsed; an unknown spelling is corrupt data.
fn parse_state<T: FromStr>(text: &str) -> Result<T, StoreError>
where
    T::Err: std::fmt::Display,
{
    text.parse::<T>()
        .map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn corrupt(what: &str) -> impl FnOnce(String) -> StoreError + '_ {
    move |detail| StoreError::Corrupt(format!("{what}: {detail}"))
}

pub(super) fn parse_uuid(text: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(text).map_err(|e| corrupt("uuid")(e.to_string()))
}

pub(super) fn parse_json(text: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text).map_err(|e| corrupt("json")(e.to_string()))
}

pub(super) fn parse_time(text: &str) -> Result<OffsetDateTime, StoreError> {
    OffsetDateTime::parse(text, &Rfc3339).map_err(|e| corrupt("timestamp")(e.to_string()))
}

#[derive(sqlx::FromRow)]
struct SqliteJobRow {
    id: String,
    tenant: String,
    user_id: String,
    key_hash: Vec<u8>,
    kind: String,
    fingerprint: Vec<u8>,
    params: String,
    state: String,
    version: i64,
    attempts: i32,
    recoveries: i32,
    completed_by: Option<String>,
    result: Option<String>,
    error: Option<String>,
    created_at: String,
    updated_at: String,
}

impl TryFrom<SqliteJobRow> for JobRecord {
    type Error = StoreError;

    fn try_from(row: SqliteJobRow) -> Result<Self, StoreError> {
        Ok(JobRecord {
            id: parse_uuid(&row.id)?,
            owner: Principal::new(row.tenant, row.user_id),
            key_hash: KeyHash(
                row.key_hash
                    .try_into()
                    .map_err(|_| StoreError::Corrupt("key_hash is not 32 bytes".into()))?,
            ),
            kind: row.kind,
            fingerprint: Fingerprint::from_slice(&row.fingerprint)
                .ok_or_else(|| StoreError::Corrupt("fingerprint is not 32 bytes".into()))?,
            params: parse_json(&row.params)?,
            state: row
                .state
                .parse::<JobState>()
                .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            version: row.version,
            attempts: row.attempts,
            recoveries: row.recoveries,
            completed_by: row.completed_by.as_deref().map(parse_uuid).transpose()?,
            result: row.result.as_deref().map(parse_json).transpose()?,
            error: row.error.as_deref().map(parse_json).transpose()?,
            created_at: parse_time(&row.created_at)?,
            updated_at: parse_time(&row.updated_at)?,
        })
    }
}

#[derive(sqlx::FromRow)]
struct SqliteAttemptRow {
    id: String,
    job_id: String,
    number: i32,
    provider: String,
    state: String,
    hedge: bool,
    task_id: Option<String>,
    worker: Option<String>,
    lease_expires_at: Option<String>,
    deadline_at: Option<String>,
    started_at: String,
    acknowledged_at: Option<String>,
    finished_at: Option<String>,
    unknown_since: Option<String>,
    upstream_key: Option<String>,
    key_spent: bool,
    error: Option<String>,
}

impl TryFrom<SqliteAttemptRow> for AttemptRecord {
    type Error = StoreError;

    fn try_from(row: SqliteAttemptRow) -> Result<Self, StoreError> {
        let time = |t: Option<String>| t.as_deref().map(parse_time).transpose();
        Ok(AttemptRecord {
            id: parse_uuid(&row.id)?,
            job_id: parse_uuid(&row.job_id)?,
            number: row.number,
            provider: row.provider,
            state: row
                .state
                .parse::<AttemptState>()
                .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            hedge: row.hedge,
            task_id: row.task_id,
            worker: row.worker,
            lease_expires_at: time(row.lease_expires_at)?,
            deadline_at: time(row.deadline_at)?,
            started_at: parse_time(&row.started_at)?,
            acknowledged_at: time(row.acknowledged_at)?,
            finished_at: time(row.finished_at)?,
            unknown_since: time(row.unknown_since)?,
            upstream_key: row.upstream_key,
            key_spent: row.key_spent,
            error: row.error.as_deref().map(parse_json).transpose()?,
        })
    }
}

#[derive(sqlx::FromRow)]
struct SqliteEventRow {
    id: i64,
    job_id: String,
    attempt_id: Option<String>,
    kind: String,
    actor: Option<String>,
    detail: String,
    at: String,
}

impl TryFrom<SqliteEventRow> for EventRecord {
    type Error = StoreError;

    fn try_from(row: SqliteEventRow) -> Result<Self, StoreError> {
        Ok(EventRecord {
            id: row.id,
            job_id: parse_uuid(&row.job_id)?,
            attempt_id: row.attempt_id.as_deref().map(parse_uuid).transpose()?,
            kind: row
                .kind
                .parse::<EventKind>()
                .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            actor: row.actor,
            detail: parse_json(&row.detail)?,
            at: parse_time(&row.at)?,
        })
    }
}

async fn insert_event(
    tx: &mut Transaction<'static, Sqlite>,
    event: &NewEvent,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO job_events (job_id, attempt_id, kind, actor, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .bind(event.job_id.to_string())
    .bind(event.attempt_id.map(|id| id.to_string()))
    .bind(event.kind.as_str())
    .bind(event.actor.as_deref().map(storable_text))
    .bind(storable(&event.detail).to_string())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        sqlx::migrate!("./migrations/sqlite")
            .run(&self.writer)
            .await?;
        Ok(())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn create_or_replay(&self, job: NewJob) -> Result<Intake, StoreError> {
        // A replay needs no job write: read first (readers run beside the writer in WAL
        // mode). The unique constraint still decides every creation, in the batch.
        if let Some(existing) = intake::by_key(&self.pool, &job.owner, &job.key_hash).await? {
            if !job.matches(&existing) {
                return Ok(Intake::Conflict(existing));
            }
            self.replays.submit(job.replayed_event(&existing)).await?;
            return Ok(Intake::Replayed(existing));
        }
        self.intake.submit(job).await
    }

    async fn append_event(&self, event: NewEvent) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        insert_event(&mut tx, &event).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn job(&self, owner: &Principal, id: Uuid) -> Result<Option<JobRecord>, StoreError> {
        let row: Option<SqliteJobRow> = sqlx::query_as(concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE id = ?1 AND tenant = ?2 AND user_id = ?3"
        ))
        .bind(id.to_string())
        .bind(&owner.tenant)
        .bind(&owner.user)
        .fetch_optional(&self.pool)
        .await?;
        row.map(JobRecord::try_from).transpose()
    }

    async fn job_by_key(
        &self,
        owner: &Principal,
        key_hash: &KeyHash,
    ) -> Result<Option<JobRecord>, StoreError> {
        intake::by_key(&self.pool, owner, key_hash).await
    }

    async fn events(
        &self,
        owner: &Principal,
        job_id: Uuid,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Option<Vec<EventRecord>>, StoreError> {
        if self.job(owner, job_id).await?.is_none() {
            return Ok(None);
        }
        let rows: Vec<SqliteEventRow> = sqlx::query_as(
            "SELECT id, job_id, attempt_id, kind, actor, detail, at FROM job_events \
             WHERE job_id = ?1 AND (?2 IS NULL OR id > ?2) ORDER BY id LIMIT ?3",
        )
        .bind(job_id.to_string())
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(EventRecord::try_from)
            .collect::<Result<_, _>>()
            .map(Some)
    }

    async fn attempt_in_tenant(
        &self,
        tenant: &str,
        attempt_id: Uuid,
    ) -> Result<Option<(AttemptRecord, JobRecord)>, StoreError> {
        let row: Option<SqliteAttemptRow> = sqlx::query_as(concat!(
            "SELECT ",
            attempt_columns!(),
            " FROM attempts WHERE id = ?1"
        ))
        .bind(attempt_id.to_string())
        .fetch_optional(&self.pool)
        .await?;
        let Some(attempt) = row.map(AttemptRecord::try_from).transpose()? else {
            return Ok(None);
        };
        let job: Option<SqliteJobRow> = sqlx::query_as(concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE id = ?1 AND tenant = ?2"
        ))
        .bind(attempt.job_id.to_string())
        .bind(tenant)
        .fetch_optional(&self.pool)
        .await?;
        Ok(job
            .map(JobRecord::try_from)
            .transpose()?
            .map(|job| (attempt, job)))
    }
}
