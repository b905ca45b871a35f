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

use sqlx::{
    SqlitePool,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
};

use super::{
    AttemptRecord, FirstAttempts, Intake, JobRecord, Migrated, NewEvent, NewJob, Store, StoreError,
    StoreOptions, Woken, WorkSignal,
    backend::{Arg, Backend, Variant},
    batch::Batcher,
    bound::Bound,
    engine::Services,
    grouped::Writer,
    transitions::start_first_in_one_transaction,
};
use dialect::corrupt;

#[macro_use]
mod sql;
mod dialect;
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
    /// The replay cache, fences and group commits (acknowledgements and completions, on
    /// the writer), as every store has them.
    services: Arc<Services>,
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
        let grouped = Writer::<Self>::new(
            writer.clone(),
            bound.clone(),
            Some(wake.clone()),
            Variant::Single,
        );
        Ok(Self {
            services: Arc::new(Services::start(
                pool.clone(),
                bound.clone(),
                &grouped,
                options.finished_after,
            )),
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
    fn readers(&self) -> &SqlitePool {
        &self.pool
    }

    fn writers(&self) -> &SqlitePool {
        &self.writer
    }

    fn bound(&self) -> &Bound {
        &self.bound
    }

    fn services(&self) -> &Services {
        &self.services
    }

    fn log_replayed(&self, event: NewEvent) -> bool {
        self.replays.enqueue(event).is_ok()
    }

    fn dispatch_changed(&self) {
        self.wake.anything();
    }

    async fn until_work(&self, max_wait: Duration) -> Woken {
        self.wake.wait(max_wait).await
    }

    async fn migrate_schema(&self) -> Result<Migrated, StoreError> {
        let before = sql::applied_migrations(&self.writer).await?;
        sqlx::migrate!("./migrations/sqlite")
            .run(&self.writer)
            .await?;
        Ok(Migrated {
            before,
            applied: sql::applied_migrations(&self.writer).await? - before,
        })
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

    async fn start_first(
        &self,
        batch: &FirstAttempts,
    ) -> Result<Vec<(JobRecord, AttemptRecord)>, StoreError> {
        let kinds: Vec<&str> = batch.kinds.iter().map(|k| k.kind.as_str()).collect();
        let kinds = serde_json::to_string(&kinds).map_err(|e| corrupt("kinds", e))?;
        let kinds = Arg::Text(Some(&kinds));
        start_first_in_one_transaction(self, batch, sql::DUE_FIRST, kinds).await
    }
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
