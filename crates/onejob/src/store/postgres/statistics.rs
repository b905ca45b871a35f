//! The statistics the hot paths' cached plans are made from: `jobs`, `attempts` and
//! `job_events` are each analyzed when they hold rows their statistics do not account for.
//!
//! onejob's sessions keep one generic plan per statement for the connection's life (intake's
//! and the worker's connections live long). A plan made on a table that holds rows but has
//! no statistics (after a restore, with autovacuum off, or in the minute before autovacuum's
//! first analyze), or on one analyzed while it was empty, is a plan for a table of no rows:
//! intake then looks keys up through the owner's index `jobs_owner_recent` and reads every
//! job of the owner for each submission (2,257 against 544 submissions/s in
//! bench/journal.md), and the worker's statements that read attempts by `id = ANY($1)` scan
//! the whole of `attempts` each time (17,041 sequential scans reading 160.9 M rows in a run
//! of 20,000 jobs, slowing it from 1,146 to 553 jobs/s). Nothing replans them: with
//! autovacuum off nothing analyzes the tables again, and the connections are never replaced.
//! Once a table has statistics of enough rows, the planner picks its indexes, and the
//! proportions it reads from them no longer change with size.
//!
//! So intake (each new connection and each batch) and the worker (each batch of first
//! attempts) poke a [`Watch`], which has a table analyzed when it holds more than twice the
//! rows its statistics were taken from, until they were taken from enough rows. An `ANALYZE`
//! also invalidates every session's cached plans on the table: they are replanned with the
//! statistics at their next use.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use sqlx::PgPool;

use crate::store::{
    StoreError,
    bound::{Bound, Bounded},
};

/// How long an `ANALYZE` may take (it samples a fixed number of rows, whatever the table's
/// size; on a cold cache that is still many random reads).
const ANALYZE_WITHIN: Duration = Duration::from_secs(60);

/// The tables watched, each with the statement that analyzes it.
const TABLES: [(&str, &str); 3] = [
    ("jobs", "ANALYZE jobs"),
    ("attempts", "ANALYZE attempts"),
    ("job_events", "ANALYZE job_events"),
];

/// What the planner believes each watched table holds (`pg_class.reltuples`: -1 before any
/// `ANALYZE` or `VACUUM`), and how many rows it holds, counted up to `$1`
/// ([`Watch::ENOUGH`]: a bounded read, so a check costs the same on large tables), in the
/// order of [`TABLES`].
const SIZES: &str = "SELECT \
     (SELECT reltuples::float8 FROM pg_class WHERE oid = 'jobs'::regclass), \
     (SELECT count(*) FROM (SELECT 1 FROM jobs LIMIT $1) AS s), \
     (SELECT reltuples::float8 FROM pg_class WHERE oid = 'attempts'::regclass), \
     (SELECT count(*) FROM (SELECT 1 FROM attempts LIMIT $1) AS s), \
     (SELECT reltuples::float8 FROM pg_class WHERE oid = 'job_events'::regclass), \
     (SELECT count(*) FROM (SELECT 1 FROM job_events LIMIT $1) AS s)";

/// A watch over the statistics of the tables the hot paths read, until they describe tables
/// of some size: shared by the store's intake and worker, which poke it, checking at most once
/// a [`Watch::EVERY`].
///
/// A check has a table analyzed when it holds more than twice the rows its statistics were
/// taken from (any rows at all for a table never analyzed, or analyzed while empty), one
/// check at a time. A table whose statistics were taken from [`Watch::ENOUGH`] rows or more
/// is no longer watched, nor one an `ANALYZE` left unanalyzed (PostgreSQL skips it for a
/// role that does not own the table: autovacuum keeps it then, as before); the watch stops
/// when none is left.
#[derive(Clone)]
pub(super) struct Watch {
    analyzer: PgPool,
    /// The bound of its statements.
    bound: Bound,
    state: Arc<Mutex<WatchState>>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch").finish_non_exhaustive()
    }
}

/// Where a [`Watch`] stands.
#[derive(Default)]
struct WatchState {
    /// When the last check was made.
    checked: Option<Instant>,
    /// Whether a check (and its `ANALYZE`s) is running.
    running: bool,
    /// Which tables of [`TABLES`] are no longer watched.
    done: [bool; 3],
}

impl Watch {
    /// How often at most the watch checks.
    pub(super) const EVERY: Duration = Duration::from_secs(1);

    /// Rows a table's statistics must have been taken from for it to be no longer watched.
    pub(super) const ENOUGH: i64 = 1000;

    /// A watch that has tables analyzed on a connection of `analyzer`, its statements
    /// bounded by `bound` (an `ANALYZE` by [`ANALYZE_WITHIN`]).
    pub(super) fn new(analyzer: PgPool, bound: Bound) -> Self {
        Self {
            analyzer,
            bound,
            state: Arc::default(),
        }
    }

    /// If a check is due, makes it in the background on a connection of the analyzer's
    /// pool (so that no submission or attempt waits for it), and has each table analyzed
    /// whose statistics describe a table less than half its size. Failures are logged, never
    /// returned: without statistics onejob still works, slower.
    pub(super) fn poke(&self) {
        if self.due() {
            let watch = self.clone();
            tokio::spawn(async move { watch.check().await });
        }
    }

    /// Checks, and analyzes the tables that hold more than twice the rows their statistics
    /// were taken from.
    async fn check(self) {
        self.check_once().await;
        self.lock().running = false;
    }

    async fn check_once(&self) {
        let sizes = match self.sizes().await {
            Ok(sizes) => sizes,
            Err(error) => {
                tracing::warn!(%error, "could not check the tables' statistics");
                return;
            }
        };
        let done = self.lock().done;
        for (at, ((table, statement), (believed, held))) in TABLES.iter().zip(sizes).enumerate() {
            if done[at] {
                continue;
            }
            if believed >= Self::ENOUGH as f64 {
                self.lock().done[at] = true;
                continue;
            }
            if held as f64 <= 2.0 * believed.max(0.0) {
                continue;
            }
            tracing::info!(
                table,
                rows = held,
                "a table holds rows its statistics do not account for: analyzing it"
            );
            let analyzed =
                match Bounded::acquire(&self.analyzer, &self.bound.with(ANALYZE_WITHIN)).await {
                    Ok(mut connection) => {
                        connection
                            .run("an ANALYZE", async |connection| {
                                sqlx::query(*statement).execute(connection).await?;
                                Ok(())
                            })
                            .await
                    }
                    Err(error) => Err(error),
                };
            if let Err(error) = analyzed {
                tracing::warn!(%error, table, "could not analyze");
                continue;
            }
            match self.sizes().await {
                Ok(after) if after[at].0 <= 0.0 => {
                    tracing::warn!(
                        table,
                        "still unanalyzed after an ANALYZE (is onejob's role not its owner?): \
                         leaving its statistics to autovacuum"
                    );
                    self.lock().done[at] = true;
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "could not check the tables' statistics"),
            }
        }
    }

    /// What the planner believes each table holds, and the rows it holds up to
    /// [`Self::ENOUGH`], in the order of [`TABLES`].
    async fn sizes(&self) -> Result<[(f64, i64); 3], StoreError> {
        let (jobs, jobs_held, attempts, attempts_held, events, events_held): (
            f64,
            i64,
            f64,
            i64,
            f64,
            i64,
        ) = Bounded::acquire(&self.analyzer, &self.bound)
            .await?
            .run("a statement", async |connection| {
                Ok(sqlx::query_as(SIZES)
                    .bind(Self::ENOUGH)
                    .fetch_one(connection)
                    .await?)
            })
            .await?;
        Ok([
            (jobs, jobs_held),
            (attempts, attempts_held),
            (events, events_held),
        ])
    }

    /// Whether a check is due, and if so, records it as made now.
    fn due(&self) -> bool {
        let mut state = self.lock();
        let now = Instant::now();
        if state.done.iter().all(|done| *done)
            || state.running
            || state
                .checked
                .is_some_and(|at| now.duration_since(at) < Self::EVERY)
        {
            return false;
        }
        state.checked = Some(now);
        state.running = true;
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WatchState> {
        self.state.lock().expect("statistics watch lock poisoned")
    }
}
