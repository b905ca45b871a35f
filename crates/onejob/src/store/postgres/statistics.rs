//! The statistics intake's cached plans are made from: `jobs` is analyzed when intake finds
//! it holding rows its statistics do not account for.
//!
//! Intake's sessions keep one generic plan per statement for the connection's life. Made on
//! a `jobs` table that holds rows but has no statistics (after a restore, with autovacuum
//! off, or in the minute before autovacuum's first analyze), or on one analyzed while it was
//! empty, that plan looks keys up through the owner's index `jobs_owner_recent`: without
//! statistics both indexes are estimated to return one row, and the narrower one costs a
//! hair less. It then reads every job of the owner for each submission (bench/journal.md
//! has how much slower that is: 2,257 against 544 submissions/s). Once `jobs` has statistics
//! of enough rows, the planner picks the key's unique index. So each new intake connection
//! and each intake batch pokes a [`Watch`], which has `jobs` analyzed when it holds rows
//! its statistics do not account for, until they were taken from enough rows (a table
//! analyzed while empty gets its rows only later, and with autovacuum off nothing else
//! would analyze it again). An `ANALYZE` also replans every session's cached plans on
//! `jobs`.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use sqlx::PgPool;

/// What the planner believes `jobs` holds (`pg_class.reltuples`: -1 before any `ANALYZE` or
/// `VACUUM`), and how many rows it holds, counted up to `$1` ([`Watch::ENOUGH`]: a bounded
/// read, so a check costs the same on a large table).
const SIZES: &str = "SELECT c.reltuples::float8, \
                            (SELECT count(*) FROM (SELECT 1 FROM jobs LIMIT $1) AS s) \
                     FROM pg_class c WHERE c.oid = 'jobs'::regclass";

/// Intake's watch over `jobs`' statistics until they describe a table of some size: shared
/// by intake's writers and its new connections, which poke it, checking at most once a
/// [`Watch::EVERY`].
///
/// A check has `jobs` analyzed when it holds more than twice the rows its statistics were
/// taken from (any rows at all for a table never analyzed, or analyzed while empty), one
/// `ANALYZE` at a time. Once they were taken from [`Watch::ENOUGH`] rows or more, the
/// proportions the planner reads from them (one owner's share of the jobs, the key's
/// uniqueness) no longer change with size, and the watch stops; so it does too if an
/// `ANALYZE` left `jobs` unanalyzed (PostgreSQL skips it for a role that does not own the
/// table), leaving `jobs` to autovacuum as before.
#[derive(Clone)]
pub(super) struct Watch {
    analyzer: PgPool,
    state: Arc<Mutex<WatchState>>,
}

/// Where a [`Watch`] stands.
#[derive(Default)]
struct WatchState {
    /// When the last check was made.
    checked: Option<Instant>,
    /// Whether a check (and its `ANALYZE`) is running.
    running: bool,
    /// Whether the watch has stopped.
    done: bool,
}

impl Watch {
    /// How often at most the writers check.
    pub(super) const EVERY: Duration = Duration::from_secs(1);

    /// Rows the statistics must have been taken from for the watch to stop.
    pub(super) const ENOUGH: i64 = 1000;

    /// A watch that has `jobs` analyzed on a connection of `analyzer`.
    pub(super) fn new(analyzer: PgPool) -> Self {
        Self {
            analyzer,
            state: Arc::default(),
        }
    }

    /// If a check is due, makes it in the background on a connection of the analyzer's
    /// pool (so that no submission waits for it), and has `jobs` analyzed if its statistics
    /// describe a table less than half its size. Failures are logged, never returned:
    /// without statistics intake still works, slower.
    pub(super) fn poke(&self) {
        if self.due() {
            let watch = self.clone();
            tokio::spawn(async move { watch.check().await });
        }
    }

    /// Checks, and analyzes `jobs` if it holds more than twice the rows its statistics were
    /// taken from.
    async fn check(self) {
        self.check_once().await;
        self.lock().running = false;
    }

    async fn check_once(&self) {
        let (believed, held) = match self.sizes().await {
            Ok(sizes) => sizes,
            Err(error) => {
                tracing::warn!(%error, "could not check jobs' statistics");
                return;
            }
        };
        if believed >= Self::ENOUGH as f64 {
            self.lock().done = true;
            return;
        }
        if held as f64 <= 2.0 * believed.max(0.0) {
            return;
        }
        let result = async {
            analyze(&self.analyzer).await?;
            self.sizes().await
        }
        .await;
        match result {
            Ok((believed, _)) if believed <= 0.0 => {
                tracing::warn!(
                    "jobs is still unanalyzed after an ANALYZE (is onejob's role not its \
                     owner?): leaving its statistics to autovacuum"
                );
                self.lock().done = true;
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "could not analyze jobs"),
        }
    }

    /// What the planner believes `jobs` holds, and the rows it holds up to [`Self::ENOUGH`].
    async fn sizes(&self) -> Result<(f64, i64), sqlx::Error> {
        sqlx::query_as(SIZES)
            .bind(Self::ENOUGH)
            .fetch_one(&self.analyzer)
            .await
    }

    /// Whether a check is due, and if so, records it as made now.
    fn due(&self) -> bool {
        let mut state = self.lock();
        let now = Instant::now();
        if state.done
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

/// Analyzes `jobs`.
///
/// `ANALYZE` samples at most 30,000 rows (at the default statistics target) whatever the
/// table's size, and does not block writers. It also invalidates every session's cached
/// plans on `jobs`, so every connection replans with the statistics. Without the right to
/// analyze `jobs` (not its owner), PostgreSQL skips it with a warning; onejob then relies
/// on autovacuum, as before.
async fn analyze(pool: &PgPool) -> Result<(), sqlx::Error> {
    tracing::info!("jobs holds rows its statistics do not account for: analyzing it");
    sqlx::query("ANALYZE jobs").execute(pool).await?;
    Ok(())
}
