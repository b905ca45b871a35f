//! The narrow interface each database implements, and nothing more: a [`Dialect`] (its
//! statements, bindings and decodings, `dialect.rs`), the pools and bound its statements run
//! on, and the few operations whose shape really differs (intake's group commit, the first
//! attempts' batch, waiting for work, the schema's migrations).
//!
//! Everything above it is written once, generic over [`Backend`]: each statement's Rust
//! (`statements.rs`, `rows.rs`), the state changes (`transitions.rs`), dispatch, listings,
//! keys and certificates; and the runtime services every store holds once, whatever its
//! database (the replay cache and the group-committed fences, acknowledgements and
//! completions: [`super::engine::Services`]). A backend cannot drift from the other in what
//! a statement binds, returns or means, only in how its SQL is spelled, and the two
//! spellings sit side by side in `postgres/sql.rs` and `sqlite/sql.rs`. This is the shape of
//! river's `riverdriver`: one interface, a module per database, one conformance suite
//! (`tests/store/`). Citus is a variant of the PostgreSQL dialect ([`Variant`]), not a third
//! backend: the engine asks [`Backend::variant`] where work spanning tenants must run
//! tenant by tenant (`dispatch.rs`, `grouped.rs`), and the PostgreSQL store matches on it
//! for the rest (`postgres/mod.rs`).
//!
//! What each database still does its own way is a real difference of the database, its
//! SQL or what it can route, not a copy of a rule:
//! * **Intake** ([`Backend::intake`]): PostgreSQL's one statement per batch (insert, events
//!   and the look-ups of taken keys in one round trip, `postgres/intake.rs`). SQLite (a
//!   batch on its one writer) and Citus (a tenant's share of a batch, on its shard, since
//!   the one statement would span shards) write a statement set per submission in a shared
//!   transaction, and that group commit is written once (`statements.rs`'s
//!   `submit_together`).
//! * **The first attempts' batch** ([`Backend::start_first`]): PostgreSQL's one statement
//!   (`postgres/first.rs`); Citus's three statements per tenant, each routed to its shard
//!   (`postgres/citus.rs`: Citus plans the one statement's parts apart); SQLite's the rule
//!   written once (`transitions.rs`'s `start_first_in_one_transaction`).
//! * **`replayed` events** ([`Backend::log_replayed`]): PostgreSQL's relaxed writer, on
//!   connections of its own that commit without waiting for the flush
//!   (`postgres/relaxed.rs`; one statement per batch, or per event on Citus, each on its
//!   shard); SQLite's batcher on its one writer.
//! * **Wake-ups** ([`Backend::dispatch_changed`], [`Backend::until_work`]): PostgreSQL's
//!   `LISTEN`/`NOTIFY` (a trigger on one server; the store itself on Citus, where the
//!   trigger would fire on a worker node nobody listens to, `postgres/wake.rs`); SQLite's
//!   signal within the process.
//! * **Migrations** ([`Backend::migrate_schema`]): each dialect's own directory; PostgreSQL's
//!   online index changes (`postgres/online.rs`) and Citus's distribution
//!   (`postgres/citus.rs`).

use std::{collections::HashMap, future::Future, time::Duration};

use sqlx::{Database, Pool, SqlSafeStr};
use sqlx_core::transaction::TransactionManager;
use uuid::Uuid;

pub(crate) use super::dialect::{Arg, Conn, Dialect, Row, Variant};
use super::{
    Acknowledged, AttemptRecord, Completion, FirstAttempts, Intake, JobRecord, Migrated, NewEvent,
    NewJob, StoreError, Woken,
    batch::Batcher,
    bound::{Bound, Bounded},
    engine::Services,
    grouped::{Fence, Writer},
    settled::Settled,
    spanning::ByShard,
    tenants::Tenants,
    transitions::{Ack, Offer, OnlyAttempt},
};

/// A database onejob runs on (see the module doc).
pub(crate) trait Backend: Dialect {
    /// The pool reads run on.
    fn readers(&self) -> &Pool<Self::Db>;

    /// The pool single-statement writes run on (SQLite: this process's one writer).
    fn writers(&self) -> &Pool<Self::Db>;

    /// How long each statement and commit may take (`bound.rs`).
    fn bound(&self) -> &Bound;

    /// Begins a write transaction on [`Backend::writers`].
    fn begin(&self) -> impl Future<Output = Result<Tx<Self>, StoreError>> + Send {
        Tx::begin(self.writers(), self.bound())
    }

    /// Checks that the database answers and that this node can use it (`/readyz`); where
    /// writes can stall without an error (PostgreSQL), also that this node can commit.
    fn ready(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        async { read_one(self, Self::SQL.ping, args![]).await.map(drop) }
    }

    /// The variant of its dialect it speaks ([`Variant`]): on Citus, work spanning tenants
    /// runs tenant by tenant, each on its shard, never as one lock across shards.
    fn variant(&self) -> Variant {
        Variant::Single
    }

    /// The tenants of the jobs and attempts this process created or started lately, where
    /// knowing them spares a lookup across shards (`tenants.rs`); `None` where it would
    /// spare nothing.
    fn tenants(&self) -> Option<&Tenants> {
        None
    }

    /// The reads spanning every tenant spelled shard by shard, run when the read across the
    /// shards fails (a node down: `spanning.rs`); `None` where the database is one node.
    fn by_shard(&self) -> Option<&'static ByShard> {
        None
    }

    /// `id`'s tenant, if this process noted it ([`Backend::tenants`]).
    fn tenant_of(&self, id: Uuid) -> Option<String> {
        self.tenants().and_then(|tenants| tenants.get(id))
    }

    /// Notes `id`'s tenant ([`Backend::tenants`]).
    fn note_tenant(&self, id: Uuid, tenant: &str) {
        if let Some(tenants) = self.tenants() {
            tenants.note(id, tenant);
        }
    }

    /// The runtime services this store holds, made once for every database
    /// ([`Services`]).
    fn services(&self) -> &Services;

    /// The settled jobs this process keeps for replays (`settled.rs`).
    fn settled(&self) -> &Settled {
        &self.services().settled
    }

    /// Queues a replay's `replayed` event to be written without waiting for it, as intake
    /// writes those of the replays it reads; `false` if the queue is full (the database is
    /// slow to take writes), when nothing was queued.
    fn log_replayed(&self, event: NewEvent) -> bool;

    /// The queue of send fences, checked many at once (`grouped.rs`).
    fn fences(&self) -> &Batcher<Fence, bool> {
        &self.services().fences
    }

    /// The queue of acknowledgements, group-committed (`grouped.rs`).
    fn acks(&self) -> &Batcher<Ack, Acknowledged> {
        &self.services().acks
    }

    /// The queue of completions, group-committed (`grouped.rs`).
    fn offers(&self) -> &Batcher<Offer, Completion> {
        &self.services().offers
    }

    /// Tells this process's workers that a job may have become due. PostgreSQL's trigger
    /// notifies every node on its own; SQLite has only this.
    fn dispatch_changed(&self);

    /// Waits until work may have become due, or `max_wait`; says what woke it.
    fn until_work(&self, max_wait: Duration) -> impl Future<Output = Woken> + Send;

    /// Applies the pending schema migrations; says how many there were.
    fn migrate_schema(&self) -> impl Future<Output = Result<Migrated, StoreError>> + Send;

    /// Intake: creates the job or finds the one under its key, group-committed in this
    /// database's own way (the one operation each backend writes whole; see
    /// [`super::Store::create_or_replay`]).
    fn intake(&self, job: NewJob) -> impl Future<Output = Result<Intake, StoreError>> + Send;

    /// Starts a batch of first attempts ([`super::Transitions::start_first_attempts`]): in
    /// one statement where the database can (the second declared exception, after intake),
    /// else with [`super::transitions::start_first_in_one_transaction`].
    fn start_first(
        &self,
        batch: &FirstAttempts,
    ) -> impl Future<Output = Result<Vec<(JobRecord, AttemptRecord)>, StoreError>> + Send;

    /// Completions of jobs' only attempts, many in one statement that is its own transaction,
    /// where the database can (PostgreSQL; the third declared exception): an offer wins if,
    /// under its job's lock, the job is open without a winner and has had this one attempt
    /// only, and the attempt is still open: the attempt ends `succeeded`, the job takes its
    /// output by compare-and-swap, and its `won` event is logged. Answers, offer by offer,
    /// whether it won; one that did not was left untouched (the general rule then decides
    /// it, `transitions.rs`). `None` where the database makes none this way, through
    /// `writer` (SQLite; a distributed database).
    fn complete_only_attempts(
        writer: &Writer<Self>,
        offers: &[OnlyAttempt<'_>],
    ) -> impl Future<Output = Result<Option<Vec<bool>>, StoreError>> + Send {
        let _ = (writer, offers);
        std::future::ready(Ok(None))
    }

    /// Acknowledges attempts still `starting` (no task id to store, no hedge to schedule)
    /// in one statement that is its own transaction, each only if, under its job's lock,
    /// the job is not cancelled and the attempt is still `starting`: the attempt becomes
    /// `running`. Answers, attempt by attempt, whether it did; one that did not was left
    /// untouched (the general rule then decides it, `transitions.rs`). `None` where the
    /// database makes none this way, through `writer` (SQLite; a distributed database).
    fn acknowledge_starting(
        writer: &Writer<Self>,
        attempts: &[Uuid],
    ) -> impl Future<Output = Result<Option<Vec<bool>>, StoreError>> + Send {
        let _ = (writer, attempts);
        std::future::ready(Ok(None))
    }
}

/// A write transaction of backend `B` ([`Tx::begin`]); dropped without a commit, it rolls
/// back.
///
/// It owns its pooled connection ([`Bounded`]), unlike sqlx's `Transaction`, so that a
/// statement or commit that ran out of its bound can discard the connection (its outcome
/// unknown) instead of handing it back to the pool.
pub(crate) struct Tx<B: Backend> {
    connection: Bounded<B::Db>,
    /// Begun and neither committed nor rolled back.
    open: bool,
    /// The tenant of each job and attempt this transaction has read, by id: every statement
    /// about one job names its tenant (a distributed database routes it to that tenant's
    /// shard), and this spares reading it again (`statements.rs`).
    pub(super) tenants: HashMap<Uuid, String>,
}

/// The database's transaction manager, as sqlx's `Transaction` drives it.
type Manager<B> = <<B as Dialect>::Db as Database>::TransactionManager;

impl<B: Backend> Tx<B> {
    /// Begins a write transaction ([`Dialect::BEGIN`]) on a connection from `pool`, its
    /// statements and commit bounded by `bound`.
    pub(crate) async fn begin(pool: &Pool<B::Db>, bound: &Bound) -> Result<Self, StoreError> {
        let mut tx = Self {
            connection: Bounded::acquire(pool, bound).await?,
            // As sqlx's: should `BEGIN` fail halfway, the drop rolls back what it began.
            open: true,
            tenants: HashMap::new(),
        };
        let statement = B::BEGIN.map(SqlSafeStr::into_sql_str);
        tx.connection
            .run("a BEGIN", async |connection| {
                Ok(Manager::<B>::begin(connection, statement).await?)
            })
            .await?;
        Ok(tx)
    }

    /// Commits; [`StoreError::TimedOut`] when the commit did not answer within the bound
    /// (it may still land: the write is then not acknowledged, and the connection is
    /// discarded).
    pub(crate) async fn commit(mut self) -> Result<(), StoreError> {
        self.connection
            .run("a commit", async |connection| {
                Ok(Manager::<B>::commit(connection).await?)
            })
            .await?;
        self.open = false;
        Ok(())
    }

    /// Rolls back now, releasing the row locks (PostgreSQL) or the write lock (SQLite) at
    /// once instead of whenever the dropped transaction's deferred rollback runs.
    pub(crate) async fn rollback(mut self) -> Result<(), StoreError> {
        self.connection
            .run("a rollback", async |connection| {
                Ok(Manager::<B>::rollback(connection).await?)
            })
            .await?;
        self.open = false;
        Ok(())
    }

    /// Runs `work` on the transaction's connection within the bound (for statements not in
    /// the dialect's [`super::sql::Sql`]).
    pub(crate) async fn run<T>(
        &mut self,
        work: impl AsyncFnOnce(&mut Conn<B>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.connection.run("a statement", work).await
    }

    /// Every row of a statement.
    pub(crate) async fn all(
        &mut self,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<Vec<Row<B>>, StoreError> {
        self.run(async |connection| fetch_all::<B>(connection, sql, args).await)
            .await
    }

    /// The first row of a statement, if any.
    pub(crate) async fn optional(
        &mut self,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<Option<Row<B>>, StoreError> {
        self.run(async |connection| fetch_optional::<B>(connection, sql, args).await)
            .await
    }

    /// The one row of a statement.
    pub(crate) async fn one(
        &mut self,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<Row<B>, StoreError> {
        self.optional(sql, args)
            .await?
            .ok_or_else(|| StoreError::from(sqlx::Error::RowNotFound))
    }

    /// How many rows a statement changed.
    pub(crate) async fn execute(
        &mut self,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<u64, StoreError> {
        self.run(async |connection| execute::<B>(connection, sql, args).await)
            .await
    }
}

impl<B: Backend> Drop for Tx<B> {
    fn drop(&mut self) {
        if self.open
            && let Some(connection) = self.connection.idle()
        {
            // Queued, as sqlx's `Transaction` does: it runs before the connection's next use,
            // at the latest when the pool checks it on its return.
            Manager::<B>::start_rollback(connection);
        }
    }
}

/// Runs a statement and returns every row.
async fn fetch_all<B: Backend>(
    conn: &mut Conn<B>,
    sql: &'static str,
    args: &[Arg<'_>],
) -> Result<Vec<Row<B>>, StoreError> {
    let query = sqlx::query_with(sql, B::arguments(args)?);
    Ok(query.fetch_all(B::exec(conn)).await?)
}

/// Runs a statement and returns its first row, if any.
async fn fetch_optional<B: Backend>(
    conn: &mut Conn<B>,
    sql: &'static str,
    args: &[Arg<'_>],
) -> Result<Option<Row<B>>, StoreError> {
    let query = sqlx::query_with(sql, B::arguments(args)?);
    Ok(query.fetch_optional(B::exec(conn)).await?)
}

/// Runs a statement and returns how many rows it changed.
async fn execute<B: Backend>(
    conn: &mut Conn<B>,
    sql: &'static str,
    args: &[Arg<'_>],
) -> Result<u64, StoreError> {
    let query = sqlx::query_with(sql, B::arguments(args)?);
    Ok(B::rows_affected(&query.execute(B::exec(conn)).await?))
}

/// Ends a transaction that changed nothing and answers `value` (see [`Tx::rollback`]).
pub(crate) async fn release<B: Backend, T>(tx: Tx<B>, value: T) -> Result<T, StoreError> {
    tx.rollback().await?;
    Ok(value)
}

/// Every row of a read.
pub(crate) async fn read_all<B: Backend>(
    store: &B,
    sql: &'static str,
    args: &[Arg<'_>],
) -> Result<Vec<Row<B>>, StoreError> {
    fetch_all_on::<B>(store.readers(), store.bound(), sql, args).await
}

/// Every row one statement returns, run on a connection of `pool` outside any transaction
/// of ours, within `bound`: a read, or a write that is its own transaction (see
/// `postgres/completion.rs`).
pub(crate) async fn fetch_all_on<B: Backend>(
    pool: &Pool<B::Db>,
    bound: &Bound,
    sql: &'static str,
    args: &[Arg<'_>],
) -> Result<Vec<Row<B>>, StoreError> {
    Bounded::acquire(pool, bound)
        .await?
        .run("a statement", async |connection| {
            fetch_all::<B>(connection, sql, args).await
        })
        .await
}

/// The first row of a read, if any.
pub(crate) async fn read_optional<B: Backend>(
    store: &B,
    sql: &'static str,
    args: &[Arg<'_>],
) -> Result<Option<Row<B>>, StoreError> {
    Bounded::acquire(store.readers(), store.bound())
        .await?
        .run("a statement", async |connection| {
            fetch_optional::<B>(connection, sql, args).await
        })
        .await
}

/// The one row of a read.
pub(crate) async fn read_one<B: Backend>(
    store: &B,
    sql: &'static str,
    args: &[Arg<'_>],
) -> Result<Row<B>, StoreError> {
    read_optional(store, sql, args)
        .await?
        .ok_or_else(|| StoreError::from(sqlx::Error::RowNotFound))
}

/// Every row a single-statement write returns.
pub(crate) async fn write_all<B: Backend>(
    store: &B,
    sql: &'static str,
    args: &[Arg<'_>],
) -> Result<Vec<Row<B>>, StoreError> {
    Bounded::acquire(store.writers(), store.bound())
        .await?
        .run("a statement", async |connection| {
            fetch_all::<B>(connection, sql, args).await
        })
        .await
}

/// The row a single-statement write returns, if any.
pub(crate) async fn write_optional<B: Backend>(
    store: &B,
    sql: &'static str,
    args: &[Arg<'_>],
) -> Result<Option<Row<B>>, StoreError> {
    Bounded::acquire(store.writers(), store.bound())
        .await?
        .run("a statement", async |connection| {
            fetch_optional::<B>(connection, sql, args).await
        })
        .await
}

/// A single-statement write; how many rows it changed.
pub(crate) async fn write<B: Backend>(
    store: &B,
    sql: &'static str,
    args: &[Arg<'_>],
) -> Result<u64, StoreError> {
    Bounded::acquire(store.writers(), store.bound())
        .await?
        .run("a statement", async |connection| {
            execute::<B>(connection, sql, args).await
        })
        .await
}
