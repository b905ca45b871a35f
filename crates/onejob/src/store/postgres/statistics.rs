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
//!
//! **On Citus** the statistics that matter are the shards', on the worker nodes: the
//! coordinator plans a statement about one tenant only as far as its shard, and the worker
//! node plans the shard's statement each time it runs, from the shard's statistics. So no
//! plan outlives the statistics there, but a shard never analyzed (autovacuum off on its
//! worker, or in the minute before its first pass) is planned without any: a key lookup
//! then reads every job of the owner through `jobs_owner_recent` (20,105 buffers for one
//! key among 20,000 jobs of one owner, against 4 once analyzed, checked on Citus 13.2). The
//! coordinator's own table is an empty shell whose `pg_class.reltuples` stays 0 after any
//! `ANALYZE`, so the watch reads the shards' instead ([`CITUS_SIZES`]: one statement on each
//! worker node) and has a table analyzed when one of its shards holds more than twice the
//! rows its statistics were taken from; the coordinator passes an `ANALYZE` of a distributed
//! table on to every shard. A shard may still be empty when the table as a whole is
//! described by enough rows and fill later (one tenant's shard), so on Citus the watch goes
//! on, once a [`Watch::EVERY_SETTLED`], after the tables are.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use sqlx::PgPool;

use super::Variant;
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

/// What one check of the shards' statistics on Citus reads, one row per table of [`TABLES`]
/// in their order: the rows the statistics of all its shards were taken from (each shard's
/// `pg_class.reltuples`, -1 before any `ANALYZE` counted as 0), and whether one of its shards
/// holds more than twice the rows its statistics were taken from (`pg_stat_user_tables.n_live_tup`,
/// the rows inserted and deleted as its worker node counts them, against `reltuples`) while
/// they were taken from fewer than `$1` ([`Watch::ENOUGH`]). Each worker node reports its own
/// shards (`run_command_on_workers`: Citus's own sessions see the shards, which it hides
/// from others'); a worker node that does not answer is left out of this check.
const CITUS_SIZES: &str = "SELECT coalesce(sum(greatest(s.believed, 0)), 0)::float8, \
     coalesce(bool_or(s.believed < $1 AND s.held > 2 * greatest(s.believed, 0)), false) \
     FROM generate_series(0, 2) AS t (at) \
     LEFT JOIN (SELECT (e ->> 0)::int AS at, (e ->> 1)::float8 AS believed, \
                       (e ->> 2)::float8 AS held \
                FROM run_command_on_workers($shards$ \
                  SELECT coalesce(json_agg(json_build_array( \
                    CASE p.logicalrelid WHEN 'jobs'::regclass THEN 0 \
                      WHEN 'attempts'::regclass THEN 1 ELSE 2 END, \
                    c.reltuples, coalesce(u.n_live_tup, 0))), '[]') \
                  FROM pg_dist_shard p \
                  JOIN pg_class c ON c.oid = to_regclass(shard_name(p.logicalrelid, p.shardid)) \
                  LEFT JOIN pg_stat_user_tables u ON u.relid = c.oid \
                  WHERE p.logicalrelid IN ('jobs'::regclass, 'attempts'::regclass, \
                                           'job_events'::regclass) $shards$) AS w, \
                json_array_elements(CASE WHEN w.success THEN w.result::json \
                                         ELSE '[]'::json END) AS e) AS s ON s.at = t.at \
     GROUP BY t.at ORDER BY t.at";

/// What a check reads of one table: the rows its statistics were taken from (-1: never
/// analyzed), and whether it holds rows they do not account for (more than twice as many;
/// on Citus, in one of its shards).
#[derive(Clone, Copy, Debug)]
struct Sizes {
    believed: f64,
    stale: bool,
}

/// A watch over the statistics of the tables the hot paths read, until they describe tables
/// of some size: shared by the store's intake and worker, which poke it, checking at most once
/// a [`Watch::EVERY`] (on Citus, once a [`Watch::EVERY_SETTLED`] after that: see the module
/// doc).
///
/// A check has a table analyzed when it holds more than twice the rows its statistics were
/// taken from (any rows at all for a table never analyzed, or analyzed while empty), one
/// check at a time. A table whose statistics were taken from [`Watch::ENOUGH`] rows or more
/// is no longer watched, nor one an `ANALYZE` left unanalyzed (PostgreSQL skips it for a
/// role that does not own the table: autovacuum keeps it then, as before); the watch stops
/// when none is left.
#[derive(Clone)]
pub(super) struct Watch {
    /// The variant of the dialect: on Citus the shards' statistics are read.
    variant: Variant,
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
    /// Which tables of [`TABLES`] are no longer watched (on Citus: described by enough
    /// rows, checked less often).
    done: [bool; 3],
    /// Which tables of [`TABLES`] an `ANALYZE` left unanalyzed (onejob's role does not own
    /// them): never analyzed again, on Citus too.
    refused: [bool; 3],
}

impl Watch {
    /// How often at most the watch checks.
    pub(super) const EVERY: Duration = Duration::from_secs(1);

    /// How often the watch checks on Citus once every table is described by enough rows.
    pub(super) const EVERY_SETTLED: Duration = Duration::from_secs(60);

    /// Rows a table's statistics must have been taken from for it to be no longer watched.
    pub(super) const ENOUGH: i64 = 1000;

    /// A watch that has tables analyzed on a connection of `analyzer`, its statements
    /// bounded by `bound` (an `ANALYZE` by [`ANALYZE_WITHIN`]), on a database of `variant`
    /// (on Citus it reads the shards' statistics and goes on once the tables are settled).
    pub(super) fn new(analyzer: PgPool, bound: Bound, variant: Variant) -> Self {
        Self {
            variant,
            analyzer,
            bound,
            state: Arc::default(),
        }
    }

    /// Whether it keeps watching a table described by enough rows (on Citus, where a
    /// shard may still be empty and fill later: see the module doc).
    fn watches_settled(&self) -> bool {
        match self.variant {
            Variant::Citus => true,
            Variant::Single => false,
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
        for (at, ((table, statement), size)) in TABLES.iter().zip(sizes).enumerate() {
            let (done, refused) = {
                let state = self.lock();
                (state.done[at], state.refused[at])
            };
            if refused || (done && !self.watches_settled()) {
                continue;
            }
            if size.believed >= Self::ENOUGH as f64 {
                self.lock().done[at] = true;
            }
            if !size.stale {
                continue;
            }
            tracing::info!(
                table,
                believed = size.believed,
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
                Ok(after) if after[at].believed <= 0.0 => {
                    tracing::warn!(
                        table,
                        "still unanalyzed after an ANALYZE (is onejob's role not its owner?): \
                         leaving its statistics to autovacuum"
                    );
                    let mut state = self.lock();
                    state.done[at] = true;
                    state.refused[at] = true;
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "could not check the tables' statistics"),
            }
        }
    }

    /// What each table's statistics were taken from, and whether it holds rows they do not
    /// account for, in the order of [`TABLES`]: on one PostgreSQL, `pg_class.reltuples`
    /// against the rows it holds counted up to [`Self::ENOUGH`]; on Citus, its shards'
    /// ([`CITUS_SIZES`]).
    async fn sizes(&self) -> Result<[Sizes; 3], StoreError> {
        match self.variant {
            Variant::Citus => self.shards_sizes().await,
            Variant::Single => self.tables_sizes().await,
        }
    }

    /// [`Watch::sizes`] on Citus: the shards' ([`CITUS_SIZES`]).
    async fn shards_sizes(&self) -> Result<[Sizes; 3], StoreError> {
        let mut connection = Bounded::acquire(&self.analyzer, &self.bound).await?;
        {
            let rows: Vec<(f64, bool)> = connection
                .run("a statement", async |connection| {
                    Ok(sqlx::query_as(CITUS_SIZES)
                        .bind(Self::ENOUGH)
                        .fetch_all(connection)
                        .await?)
                })
                .await?;
            let [jobs, attempts, events] = rows[..] else {
                return Err(StoreError::Corrupt(format!(
                    "the shards' statistics: {} rows for 3 tables",
                    rows.len()
                )));
            };
            let size = |(believed, stale)| Sizes { believed, stale };
            Ok([size(jobs), size(attempts), size(events)])
        }
    }

    /// [`Watch::sizes`] on one PostgreSQL: the tables' ([`SIZES`]).
    async fn tables_sizes(&self) -> Result<[Sizes; 3], StoreError> {
        let mut connection = Bounded::acquire(&self.analyzer, &self.bound).await?;
        let (jobs, jobs_held, attempts, attempts_held, events, events_held): (
            f64,
            i64,
            f64,
            i64,
            f64,
            i64,
        ) = connection
            .run("a statement", async |connection| {
                Ok(sqlx::query_as(SIZES)
                    .bind(Self::ENOUGH)
                    .fetch_one(connection)
                    .await?)
            })
            .await?;
        let size = |believed: f64, held: i64| Sizes {
            believed,
            stale: held as f64 > 2.0 * believed.max(0.0),
        };
        Ok([
            size(jobs, jobs_held),
            size(attempts, attempts_held),
            size(events, events_held),
        ])
    }

    /// Whether a check is due, and if so, records it as made now.
    fn due(&self) -> bool {
        let mut state = self.lock();
        let now = Instant::now();
        let settled = state.done.iter().all(|done| *done);
        let every = if settled {
            Self::EVERY_SETTLED
        } else {
            Self::EVERY
        };
        if (settled && (!self.watches_settled() || state.refused.iter().all(|refused| *refused)))
            || state.running
            || state
                .checked
                .is_some_and(|at| now.duration_since(at) < every)
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
