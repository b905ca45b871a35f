//! The PostgreSQL store: production, and several onejob nodes sharing one database.
//!
//! Every statement is a static string with bound parameters. Intake relies on
//! `INSERT … ON CONFLICT DO NOTHING` on the key's unique index: under READ COMMITTED a
//! conflicting insert waits for the other transaction, and the read-back that follows (a new
//! statement, so a new snapshot) sees the winner's committed row.

use std::{sync::Arc, time::Duration};

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::{
    AttemptRecord, FirstAttempts, Intake, JobRecord, Migrated, NewEvent, NewJob, StoreError,
    StoreOptions, Woken,
    backend::Backend,
    batch::Batcher,
    bound::{Bound, Bounded, WRITE_TIMEOUT},
    engine::Services,
    grouped::Writer,
    spanning::ByShard,
    tenants::Tenants,
    transitions::OnlyAttempt,
};
use connect::Hosts;

mod acknowledgement;
mod by_shard;
pub mod citus;
mod completion;
mod connect;
mod dialect;
mod first;
mod intake;
pub mod online;
mod relaxed;
mod retention;
mod sql;
mod statistics;
mod wake;

/// The channel workers LISTEN on: intake notifies it after each batch that created jobs (the
/// payload: the sending store's id), and a trigger when a job's dispatch time is set again
/// (failover, retry, recovery; an empty payload).
pub const DISPATCH_CHANNEL: &str = "onejob_dispatch";

/// How long `/readyz`'s probe write may take to commit before the node reports that it
/// cannot commit.
const PROBE_WITHIN: Duration = Duration::from_secs(2);

/// How long after a statement or commit ran out of its bound `/readyz` reports that the node
/// cannot commit, without probing.
const STALLED_RECENTLY: Duration = Duration::from_secs(3);

/// The variant of the PostgreSQL dialect a store speaks ([`Variant`]), found when it
/// connects ([`PgStore::connect`]). Every choice the PostgreSQL store makes differently on
/// Citus (the schema's distribution, intake, first starts, group commits, retention, the
/// relaxed writer's events, the statistics watch, wake-ups) is made on this one value,
/// with a `match` wherever the two differ in what runs.
pub(crate) use super::dialect::Variant;

/// A [`Store`] on PostgreSQL.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    wake: wake::Wake,
    intake: Arc<Batcher<NewJob, Intake>>,
    /// The replay cache, fences and group commits, as every store has them.
    services: Arc<Services>,
    /// Writes nobody waits for (`replayed` events, wake-ups).
    relaxed: relaxed::Relaxed,
    /// How long each statement and commit may take, and those that did not finish in time.
    bound: Bound,
    /// The watch over the hot tables' statistics, poked by intake and the worker.
    statistics: statistics::Watch,
    /// The hosts of a URL naming several (or asking for a writable session), which keep
    /// every pool of this store on the host that accepts writes; `None` for a plain URL.
    /// Held, not read: their watcher runs as long as the store.
    _hosts: Option<Arc<Hosts>>,
    /// The TLS tunnel to a single host whose certificate rustls cannot read, if it needs
    /// one ([`connections`]; with several hosts, [`Hosts`] keeps theirs). Held, not read.
    _tunnel: Option<Arc<connect::Tunnel>>,
    /// One PostgreSQL, or a Citus coordinator (work spanning tenants then runs tenant by
    /// tenant: [`citus`]).
    variant: Variant,
    /// The tenants of the jobs and attempts this store created or started lately (used on
    /// Citus, where they keep a job's statements on its shard).
    tenants: Arc<Tenants>,
}

impl PgStore {
    /// Connects a pool to `url` and checks that one connection can be opened.
    ///
    /// `url` may list several hosts, `postgres://u@h1:5432,h2:5432/db`, with libpq's
    /// `target_session_attrs` (`any`, `read-write`, `primary`): the store then uses the
    /// first host whose session matches and follows a failover ([`connections`]).
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self, StoreError> {
        let (connected, variant) = connect::connect(url, options, async |probe| {
            warn_without_autovacuum(probe).await;
            Ok(match citus::installed(probe).await? {
                true => Variant::Citus,
                false => Variant::Single,
            })
        })
        .await?;
        let connect::Connected {
            pool,
            bound,
            hosts,
            tunnel,
        } = connected;
        Ok(Self {
            _tunnel: tunnel,
            ..Self::following(pool, hosts, options, bound, variant)
        })
    }

    /// Wraps an existing pool (inside a Tokio runtime: it starts the intake writers); its
    /// statements and commits are bounded by the default `write_timeout`. The pool's
    /// database is taken to be a plain PostgreSQL (not Citus: [`PgStore::connect`] finds
    /// that out).
    pub fn from_pool(pool: PgPool) -> Self {
        Self::following(
            pool,
            None,
            &StoreOptions::default(),
            Bound::within(WRITE_TIMEOUT),
            Variant::Single,
        )
    }

    /// Wraps `pool`, whose side pools follow `hosts` when given, every statement and commit
    /// bounded by `bound`, speaking `variant`.
    fn following(
        pool: PgPool,
        hosts: Option<Arc<Hosts>>,
        options: &StoreOptions,
        bound: Bound,
        variant: Variant,
    ) -> Self {
        let writer = match variant {
            Variant::Citus => Writer::<Self>::new(pool.clone(), bound.clone(), None, variant),
            Variant::Single => Writer::<Self>::new(pool.clone(), bound.clone(), None, variant)
                .at_once_on(completion::at_once_pool(&pool, hosts.as_ref())),
        };
        let tenants = Arc::new(Tenants::default());
        let wake = wake::Wake::new(pool.clone(), hosts.as_ref().map(|h| h.moved()));
        let relaxed = relaxed::Relaxed::spawn(
            &pool,
            hosts.as_ref(),
            &bound,
            wake.signal(),
            wake.sender(),
            variant,
        );
        let statistics = statistics::Watch::new(pool.clone(), bound.clone(), variant);
        Self {
            services: Arc::new(Services::start(
                pool.clone(),
                bound.clone(),
                &writer,
                options.finished_after,
            )),
            wake,
            intake: Arc::new(match variant {
                Variant::Citus => citus::intake_batcher(
                    &pool,
                    &bound,
                    relaxed.clone(),
                    tenants.clone(),
                    statistics.clone(),
                ),
                Variant::Single => intake::intake_batcher(
                    &pool,
                    hosts.as_ref(),
                    &bound,
                    relaxed.clone(),
                    statistics.clone(),
                ),
            }),
            statistics,
            relaxed,
            bound,
            pool,
            _hosts: hosts,
            _tunnel: None,
            variant,
            tenants,
        }
    }

    /// The underlying pool (for tests and tools).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Whether the database is a Citus cluster's coordinator ([`citus`]).
    pub fn is_citus(&self) -> bool {
        self.variant == Variant::Citus
    }
}

/// Warns when autovacuum is off: without the statistics it gathers, the planner guesses (it
/// can look keys up through the owner's index and read all of that owner's jobs; see
/// [`statistics`]).
async fn warn_without_autovacuum(connection: &mut PgConnection) {
    let setting: Result<String, _> = sqlx::query_scalar("SELECT current_setting('autovacuum')")
        .fetch_one(connection)
        .await;
    if matches!(setting.as_deref(), Ok("off")) {
        tracing::warn!(
            "autovacuum is off on this PostgreSQL: run ANALYZE regularly, or the planner \
             works without statistics on jobs, attempts and events"
        );
    }
}

impl Backend for PgStore {
    fn variant(&self) -> Variant {
        self.variant
    }

    fn tenants(&self) -> Option<&Tenants> {
        match self.variant {
            Variant::Citus => Some(&*self.tenants),
            Variant::Single => None,
        }
    }

    fn by_shard(&self) -> Option<&'static ByShard> {
        match self.variant {
            Variant::Citus => Some(&by_shard::BY_SHARD),
            Variant::Single => None,
        }
    }

    fn readers(&self) -> &PgPool {
        &self.pool
    }

    fn writers(&self) -> &PgPool {
        &self.pool
    }

    fn bound(&self) -> &Bound {
        &self.bound
    }

    /// Ready when the database answers and this node can commit: no statement or commit ran
    /// out of its bound in the last [`STALLED_RECENTLY`], the session is not read-only (a
    /// standby, or `default_transaction_read_only`), and a probe write commits within
    /// [`PROBE_WITHIN`] (an old primary whose synchronous standby is gone answers reads,
    /// but commits nothing).
    async fn ready(&self) -> Result<(), StoreError> {
        if self.bound.stalls().within(STALLED_RECENTLY).is_some() {
            return Err(StoreError::TimedOut {
                what: "a recent statement or commit",
                within: self.bound.limit().unwrap_or(WRITE_TIMEOUT),
            });
        }
        Bounded::acquire(&self.pool, &self.bound.with(PROBE_WITHIN))
            .await?
            .run("a probe write", async |connection| {
                let read_only: bool = sqlx::query_scalar(
                    "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'",
                )
                .fetch_one(&mut *connection)
                .await?;
                if read_only {
                    return Err(StoreError::NotWritable(format!(
                        "{}: the session is read-only",
                        connect::label(&self.pool)
                    )));
                }
                Ok(connect::probe_write(connection).await?)
            })
            .await
    }

    fn services(&self) -> &Services {
        &self.services
    }

    fn log_replayed(&self, event: NewEvent) -> bool {
        self.relaxed.log(vec![event]).is_empty()
    }

    fn dispatch_changed(&self) {
        // The jobs table's trigger notifies every node's LISTEN when dispatch_at is set; on
        // Citus it fires on the worker node holding the shard, so the store notifies.
        match self.variant {
            Variant::Citus => self.relaxed.wake_workers(),
            Variant::Single => {}
        }
    }

    async fn until_work(&self, max_wait: Duration) -> Woken {
        self.wake.wait(max_wait).await
    }

    async fn migrate_schema(&self) -> Result<Migrated, StoreError> {
        let before = sql::applied_migrations(&self.pool).await?;
        sqlx::migrate!("./migrations/postgres")
            .run(&self.pool)
            .await?;
        let migrated = Migrated {
            before,
            applied: sql::applied_migrations(&self.pool).await? - before,
        };
        online::widen_key_scope(&self.pool, migrated.created()).await?;
        match self.variant {
            Variant::Citus => citus::distribute(&self.pool).await?,
            Variant::Single => {}
        }
        Ok(migrated)
    }

    async fn intake(&self, job: NewJob) -> Result<Intake, StoreError> {
        self.intake.submit(job).await
    }

    async fn start_first(
        &self,
        batch: &FirstAttempts,
    ) -> Result<Vec<(JobRecord, AttemptRecord)>, StoreError> {
        match self.variant {
            Variant::Citus => citus::start_first(self, batch).await,
            Variant::Single => {
                self.statistics.poke();
                Bounded::acquire(&self.pool, &self.bound)
                    .await?
                    .run("a statement", async |connection| {
                        first::start_first(connection, batch).await
                    })
                    .await
            }
        }
    }

    async fn complete_only_attempts(
        writer: &Writer<Self>,
        offers: &[OnlyAttempt<'_>],
    ) -> Result<Option<Vec<bool>>, StoreError> {
        completion::complete_only_attempts(writer, offers).await
    }

    async fn acknowledge_starting(
        writer: &Writer<Self>,
        attempts: &[Uuid],
    ) -> Result<Option<Vec<bool>>, StoreError> {
        acknowledgement::acknowledge_starting(writer, attempts).await
    }
}

#[cfg(test)]
pub(super) use testing::{
    as_at_once_session, assert_looks_up_by_keys, assert_no_key_gaps, fresh, fresh_database,
    group_writer,
};

/// Fresh databases for the unit tests that need PostgreSQL.
#[cfg(test)]
mod testing {
    use sqlx::{Connection, Executor, PgConnection, PgPool, postgres::PgConnectOptions};

    use super::{PgStore, Variant};
    use crate::store::{
        Store,
        bound::{Bound, WRITE_TIMEOUT},
        grouped::Writer,
    };

    /// [`fresh_database`] on a database of this name (a literal: database names cannot be bound).
    macro_rules! fresh {
        ($name:literal) => {
            $crate::store::postgres::fresh_database(
                $name,
                concat!("DROP DATABASE IF EXISTS ", $name, " WITH (FORCE)"),
                concat!("CREATE DATABASE ", $name),
            )
        };
    }

    /// A fresh database `name` on the test PostgreSQL, migrated, its tables empty and never
    /// analyzed, as onejob finds a new database (`drop` and `create` are the statements that
    /// drop and create it): a connection to it, and its connect options.
    pub(crate) async fn fresh_database(
        name: &str,
        drop: &'static str,
        create: &'static str,
    ) -> (PgConnection, PgConnectOptions) {
        let admin = std::env::var("ONEJOB_TEST_POSTGRES")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let mut conn = PgConnection::connect(&admin)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL is required for the tests ({admin}): {e}"));
        conn.execute(drop).await.unwrap();
        conn.execute(create).await.unwrap();
        let options: PgConnectOptions = admin.parse().unwrap();
        let options = options.database(name);
        let store = PgStore::from_pool(PgPool::connect_with(options.clone()).await.unwrap());
        store.migrate().await.unwrap();
        (PgConnection::connect_with(&options).await.unwrap(), options)
    }

    /// A group writer on `pool`, as the single PostgreSQL's store makes it, with no wake-up
    /// of its own: its one-statement writes run on `pool` itself.
    pub(crate) fn group_writer(pool: &PgPool) -> Writer<PgStore> {
        Writer::new(
            pool.clone(),
            Bound::within(WRITE_TIMEOUT),
            None,
            Variant::Single,
        )
    }

    /// Sets `db`'s session up as the at-once pool's sessions are
    /// ([`super::completion::AT_ONCE_SESSIONS`]).
    pub(crate) async fn as_at_once_session(db: &mut PgConnection) {
        for (setting, value) in super::completion::AT_ONCE_SESSIONS {
            sqlx::query("SELECT set_config($1, $2, false)")
                .bind(setting)
                .bind(value)
                .execute(&mut *db)
                .await
                .unwrap();
        }
    }

    /// Asserts that `plan` (an `EXPLAIN`'s lines joined) finds every row by its key: no
    /// sequential scan, no join filter (a nested loop comparing each row of one side with
    /// every row of the other: two of the statement's own results joined, quadratic in their
    /// size), every index read bound by a condition, and none by a gap in its key
    /// ([`assert_no_key_gaps`]). `what` names the plan in the failure.
    pub(crate) async fn assert_looks_up_by_keys(db: &mut PgConnection, plan: &str, what: &str) {
        assert!(
            !plan.contains("Seq Scan"),
            "{what}: a sequential scan:\n{plan}"
        );
        assert!(
            !plan.contains("Join Filter"),
            "{what}: a join filter:\n{plan}"
        );
        for (index, condition) in index_reads(plan) {
            assert!(
                condition.contains("Index Cond"),
                "{what}: {index} read without a key:\n{plan}"
            );
        }
        assert_no_key_gaps(db, plan, None, what).await;
    }

    /// Asserts that every index read of `plan` (of `table`'s indexes only, when given) that
    /// has a condition binds, by equality, a leading part of its index's key (read from
    /// `db`'s catalog) that names a row or a job: `tenant` and `id` in `(tenant, job_id, id)`
    /// leave `job_id` unbound, and the read goes through every entry of the tenant, more as
    /// its jobs grow.
    pub(crate) async fn assert_no_key_gaps(
        db: &mut PgConnection,
        plan: &str,
        table: Option<&str>,
        what: &str,
    ) {
        for (index, condition) in index_reads(plan) {
            if !condition.contains("Index Cond") {
                continue;
            }
            let key: Vec<String> = sqlx::query_scalar(
                "SELECT a.attname::text FROM pg_index i, \
                 unnest(i.indkey) WITH ORDINALITY AS k (attnum, n) \
                 JOIN pg_attribute a ON a.attnum = k.attnum \
                 WHERE i.indexrelid = $1::regclass AND a.attrelid = i.indrelid \
                 AND ($2::text IS NULL OR i.indrelid = $2::regclass) ORDER BY k.n",
            )
            .bind(index)
            .bind(table)
            .fetch_all(&mut *db)
            .await
            .unwrap();
            if key.is_empty() {
                continue;
            }
            let bound: Vec<&String> = key
                .iter()
                .filter(|column| condition.contains(&format!("({column} = ")))
                .collect();
            let leading: Vec<&String> = key.iter().take(bound.len()).collect();
            assert!(
                bound == leading && bound.iter().any(|column| column.ends_with("id")),
                "{what}: {index} {key:?} read by {bound:?}, not by a leading part of its key \
                 that names a row:\n{plan}"
            );
        }
    }

    /// The index reads of `plan` (`Index Scan using i`, `Index Only Scan using i`, `Bitmap
    /// Index Scan on i`): each index's name and the line after it (its condition, when it
    /// has one).
    fn index_reads(plan: &str) -> Vec<(&str, &str)> {
        let lines: Vec<&str> = plan.lines().collect();
        lines
            .iter()
            .enumerate()
            .filter_map(|(at, line)| {
                let (_, index) = line
                    .split_once("Index Scan using ")
                    .or_else(|| line.split_once("Index Only Scan using "))
                    .or_else(|| line.split_once("Bitmap Index Scan on "))?;
                let index = index.split_whitespace().next()?;
                Some((index, lines.get(at + 1).copied().unwrap_or_default()))
            })
            .collect()
    }

    pub(crate) use fresh;
}
