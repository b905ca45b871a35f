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

use serde_json::Value;
use sqlx::{
    Arguments, Decode, Row as _, Sqlite, SqliteConnection, SqlitePool, Type,
    sqlite::{
        SqliteArguments, SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow,
        SqliteSynchronous,
    },
};
use time::{OffsetDateTime, UtcOffset, format_description::well_known::Rfc3339};
use uuid::Uuid;

use super::{
    Acknowledged, AttemptRecord, Completion, FirstAttempts, Intake, JobRecord, NewEvent, NewJob,
    Store, StoreError, StoreOptions, Woken, WorkSignal,
    backend::{Arg, Backend},
    batch::Batcher,
    bound::Bound,
    grouped::{Fence, Writer, fences},
    settled::Settled,
    sql::Sql,
    transitions::start_first_in_one_transaction,
    transitions::{Ack, Offer},
};

#[macro_use]
mod sql;
mod intake;
mod retention;

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
    wake: WorkSignal,
    /// Group commit of submissions, on the writer.
    intake: Arc<Batcher<NewJob, Intake>>,
    /// Group commit of `replayed` events, on the writer.
    replays: Arc<Batcher<NewEvent, ()>>,
    /// Settled jobs kept for replays.
    settled: Arc<Settled>,
    /// Send fences, checked many at once.
    fences: Arc<Batcher<Fence, bool>>,
    /// Group commit of acknowledgements, on the writer.
    acks: Arc<Batcher<Ack, Acknowledged>>,
    /// Group commit of completions, on the writer.
    offers: Arc<Batcher<Offer, Completion>>,
    /// Unbounded: SQLite's waits are bounded by `busy_timeout`.
    bound: Bound,
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
        let wake = WorkSignal::default();
        let bound = Bound::unbounded();
        let grouped = Writer::<Self>::new(writer.clone(), bound.clone(), Some(wake.clone()));
        Ok(Self {
            fences: Arc::new(fences::<Self>(pool.clone(), bound.clone())),
            acks: Arc::new(grouped.batcher()),
            offers: Arc::new(grouped.batcher()),
            settled: Arc::new(Settled::new(options.finished_after)),
            intake: Arc::new(intake::intake_batcher(writer.clone(), wake.clone())),
            replays: Arc::new(intake::replay_batcher(writer.clone())),
            pool,
            writer,
            wake,
            bound,
        })
    }

    /// The readers' pool (for tests and tools).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

impl Backend for SqliteStore {
    type Db = Sqlite;

    const NAME: &'static str = "sqlite";

    const SQL: Sql = sql::SQL;

    fn readers(&self) -> &SqlitePool {
        &self.pool
    }

    fn writers(&self) -> &SqlitePool {
        &self.writer
    }

    const BEGIN: Option<&'static str> = Some("BEGIN IMMEDIATE");

    fn bound(&self) -> &Bound {
        &self.bound
    }

    fn settled(&self) -> &Settled {
        &self.settled
    }

    fn log_replayed(&self, event: NewEvent) -> bool {
        self.replays.enqueue(event).is_ok()
    }

    fn fences(&self) -> &Batcher<Fence, bool> {
        &self.fences
    }

    fn acks(&self) -> &Batcher<Ack, Acknowledged> {
        &self.acks
    }

    fn offers(&self) -> &Batcher<Offer, Completion> {
        &self.offers
    }

    fn dispatch_changed(&self) {
        self.wake.anything();
    }

    async fn until_work(&self, max_wait: Duration) -> Woken {
        self.wake.wait(max_wait).await
    }

    async fn migrate_schema(&self) -> Result<(), StoreError> {
        sqlx::migrate!("./migrations/sqlite")
            .run(&self.writer)
            .await?;
        Ok(())
    }

    async fn intake(&self, job: NewJob) -> Result<Intake, StoreError> {
        // A replay needs no job write: read first (readers run beside the writer in WAL
        // mode). The unique constraint still decides every creation, in the batch.
        if let Some(existing) = self.job_by_key(&job.owner, &job.key_hash).await? {
            if !job.matches(&existing) {
                return Ok(Intake::Conflict(existing));
            }
            self.replays.submit(job.replayed_event(&existing)).await?;
            return Ok(Intake::Replayed(existing));
        }
        self.intake.submit(job).await
    }

    type Args = SqliteArguments;

    type Exec<'c> = &'c mut SqliteConnection;

    async fn start_first(
        &self,
        batch: &FirstAttempts,
    ) -> Result<Vec<(JobRecord, AttemptRecord)>, StoreError> {
        let kinds: Vec<&str> = batch.kinds.iter().map(|k| k.kind.as_str()).collect();
        let kinds = serde_json::to_string(&kinds).map_err(|e| corrupt("kinds", e))?;
        let kinds = Arg::Text(Some(&kinds));
        start_first_in_one_transaction(self, batch, sql::DUE_FIRST, kinds).await
    }

    fn exec(conn: &mut SqliteConnection) -> &mut SqliteConnection {
        conn
    }

    fn arguments(args: &[Arg<'_>]) -> Result<SqliteArguments, StoreError> {
        arguments(args)
    }

    fn rows_affected(done: &sqlx::sqlite::SqliteQueryResult) -> u64 {
        done.rows_affected()
    }

    fn uuid(row: &SqliteRow, column: &str) -> Result<Uuid, StoreError> {
        parse_uuid(get(row, column)?)
    }

    fn opt_uuid(row: &SqliteRow, column: &str) -> Result<Option<Uuid>, StoreError> {
        get::<Option<&str>>(row, column)?
            .map(parse_uuid)
            .transpose()
    }

    fn text(row: &SqliteRow, column: &str) -> Result<String, StoreError> {
        get(row, column)
    }

    fn opt_text(row: &SqliteRow, column: &str) -> Result<Option<String>, StoreError> {
        get(row, column)
    }

    fn int(row: &SqliteRow, column: &str) -> Result<i64, StoreError> {
        get(row, column)
    }

    fn int32(row: &SqliteRow, column: &str) -> Result<i32, StoreError> {
        get(row, column)
    }

    fn opt_float(row: &SqliteRow, column: &str) -> Result<Option<f64>, StoreError> {
        get(row, column)
    }

    fn flag(row: &SqliteRow, column: &str) -> Result<bool, StoreError> {
        get(row, column)
    }

    fn bytes(row: &SqliteRow, column: &str) -> Result<Vec<u8>, StoreError> {
        get(row, column)
    }

    fn json(row: &SqliteRow, column: &str) -> Result<Value, StoreError> {
        parse_json(get(row, column)?)
    }

    fn opt_json(row: &SqliteRow, column: &str) -> Result<Option<Value>, StoreError> {
        get::<Option<&str>>(row, column)?
            .map(parse_json)
            .transpose()
    }

    fn time(row: &SqliteRow, column: &str) -> Result<OffsetDateTime, StoreError> {
        parse_time(get(row, column)?)
    }

    fn opt_time(row: &SqliteRow, column: &str) -> Result<Option<OffsetDateTime>, StoreError> {
        get::<Option<&str>>(row, column)?
            .map(parse_time)
            .transpose()
    }
}

/// A column decoded as SQLite's storage class for `T`.
fn get<'r, T>(row: &'r SqliteRow, column: &str) -> Result<T, StoreError>
where
    T: Decode<'r, Sqlite> + Type<Sqlite>,
{
    Ok(row.try_get(column)?)
}

fn corrupt(what: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {detail}"))
}

fn parse_uuid(text: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(text).map_err(|e| corrupt("uuid", e))
}

fn parse_json(text: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text).map_err(|e| corrupt("json", e))
}

fn parse_time(text: &str) -> Result<OffsetDateTime, StoreError> {
    OffsetDateTime::parse(text, &Rfc3339).map_err(|e| corrupt("timestamp", e))
}

/// A list bound as the JSON array `json_each` reads.
fn list(values: impl Iterator<Item = Value>) -> String {
    Value::Array(values.collect()).to_string()
}

/// The values bound as SQLite stores them: ids, JSON and times as TEXT (times RFC 3339 in
/// UTC), the rest as themselves.
fn arguments(args: &[Arg<'_>]) -> Result<SqliteArguments, StoreError> {
    let mut arguments = SqliteArguments::default();
    for arg in args {
        match *arg {
            Arg::Id(id) => arguments.add(id.map(|id| id.to_string())),
            Arg::Ids(ids) => arguments.add(list(ids.iter().map(|id| Value::from(id.to_string())))),
            Arg::OptIds(ids) => arguments.add(list(
                ids.iter().map(|id| id.map(|id| id.to_string()).into()),
            )),
            Arg::Texts(texts) => arguments.add(list(texts.iter().map(|&text| text.into()))),
            Arg::Ints(values) => arguments.add(list(values.iter().map(|&value| value.into()))),
            Arg::Jsons(values) => {
                arguments.add(list(values.iter().map(|value| value.to_string().into())))
            }
            Arg::Text(text) => arguments.add(text),
            Arg::Int(value) => arguments.add(value),
            Arg::Int32(value) => arguments.add(value),
            Arg::Float(value) => arguments.add(value),
            Arg::Bool(value) => arguments.add(value),
            Arg::Bytes(bytes) => arguments.add(bytes),
            Arg::Json(value) => arguments.add(value.map(Value::to_string)),
            Arg::Time(at) => {
                let text = at
                    .to_offset(UtcOffset::UTC)
                    .format(&Rfc3339)
                    .map_err(|e| corrupt("timestamp", e))?;
                arguments.add(text)
            }
        }
        .map_err(|e| StoreError::from(sqlx::Error::Encode(e)))?;
    }
    Ok(arguments)
}

/// A migrated store on a new file in a temporary directory, for unit tests (the directory
/// goes when the returned guard is dropped).
#[cfg(test)]
pub(super) async fn fresh() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("onejob.db").display());
    let store = SqliteStore::connect(&url, &StoreOptions::default())
        .await
        .unwrap();
    store.migrate().await.unwrap();
    (dir, store)
}
