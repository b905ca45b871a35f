//! The SQL dialect of a database onejob runs on: the text of its statements ([`Sql`]), how a
//! value is bound ([`Arg`], [`Dialect::arguments`]) and how a column is read
//! ([`Dialect::uuid`] and the rest), and nothing that runs (no pool, no batcher, no task).
//!
//! A dialect is what makes the rules written once (`statements.rs`, `rows.rs`,
//! `transitions.rs`) mean the same on every database: each statement binds the same [`Arg`]s
//! and reads the same columns, only its spelling differs (`postgres/sql.rs`, `sqlite/sql.rs`,
//! their bindings and decodings in `postgres/dialect.rs` and `sqlite/dialect.rs`). What runs
//! those statements (the pools, the group commits, the replay cache, the wake-ups) is the
//! store's: [`super::backend::Backend`], whose every implementation speaks a dialect.

use std::time::Duration;

use serde_json::Value;
use sqlx::Database;
use time::OffsetDateTime;
use uuid::Uuid;

use super::{StoreError, sql::Sql};

/// The variant of a dialect a store speaks: the one each dialect has, or (PostgreSQL's only)
/// Citus. The engine written once (`transitions.rs`, `dispatch.rs`, `grouped.rs`) asks it
/// where work that spans tenants must run tenant by tenant; the PostgreSQL store makes every
/// other choice that differs on Citus on it (`postgres/mod.rs`), with a `match` wherever the
/// two differ in what runs. SQLite is always [`Variant::Single`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Variant {
    /// One database server (PostgreSQL, a primary with standbys or not; or SQLite's one
    /// file): work that spans tenants runs as one statement, and the dispatch trigger's
    /// `NOTIFY` reaches every node.
    Single,
    /// A Citus coordinator (`postgres/citus.rs`): the job tables distributed by tenant, work
    /// that spans tenants runs shard by shard (never one lock across shards), and the store
    /// sends the wake-ups itself.
    Citus,
}

impl Variant {
    /// On Citus, how many tenants' transactions one batch that spans tenants runs at once,
    /// each on a connection of its own (intake's batch, a group commit, the first starts'
    /// batch): each is a few round trips from the coordinator to its shard's worker node,
    /// which in turn would leave the batch's other tenants waiting.
    pub(crate) const TENANTS_AT_ONCE: usize = 4;
}

/// A row of dialect `B`.
pub(crate) type Row<B> = <<B as Dialect>::Db as Database>::Row;

/// A connection of dialect `B`.
pub(crate) type Conn<B> = <<B as Dialect>::Db as Database>::Connection;

/// A value bound to a statement, in the kinds onejob's SQL uses. Each backend decides how a
/// kind is stored (PostgreSQL: `uuid`, `jsonb`, `timestamptz`; SQLite: TEXT), so the code
/// that binds never spells a database type.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    /// An id.
    Id(Option<Uuid>),
    /// A list of ids. Lists bind as arrays on PostgreSQL (`uuid[]`, `text[]`, …) and as a
    /// JSON array on SQLite, read with `json_each` and joined on the index (`key`) with the
    /// other lists of the statement.
    Ids(&'a [Uuid]),
    /// A list of ids, some missing.
    OptIds(&'a [Option<Uuid>]),
    /// A list of texts, some missing.
    Texts(&'a [Option<&'a str>]),
    /// A list of 64-bit integers.
    Ints(&'a [i64]),
    /// A list of JSON documents (on SQLite each element is the document's JSON text).
    Jsons(&'a [&'a Value]),
    /// Text.
    Text(Option<&'a str>),
    /// A 64-bit integer (versions, limits, counts).
    Int(Option<i64>),
    /// A 32-bit integer (attempt numbers and counts).
    Int32(i32),
    /// A float; a duration binds as its seconds.
    Float(Option<f64>),
    /// A boolean.
    Bool(bool),
    /// Bytes (hashes, salts).
    Bytes(&'a [u8]),
    /// Bytes that may be missing.
    OptBytes(Option<&'a [u8]>),
    /// A JSON document.
    Json(Option<&'a Value>),
    /// A point in time.
    Time(OffsetDateTime),
}

/// `From` for [`Arg`]: each Rust type onejob binds, and the kind it binds as.
macro_rules! arg_from {
    ($($ty:ty => |$value:ident| $arg:expr;)*) => {
        $(impl<'a> From<$ty> for Arg<'a> {
            fn from($value: $ty) -> Self {
                $arg
            }
        })*
    };
}

arg_from! {
    Uuid => |id| Arg::Id(Some(id));
    Option<Uuid> => |id| Arg::Id(id);
    &'a str => |text| Arg::Text(Some(text));
    &'a String => |text| Arg::Text(Some(text));
    Option<&'a str> => |text| Arg::Text(text);
    i64 => |value| Arg::Int(Some(value));
    Option<i64> => |value| Arg::Int(value);
    u32 => |value| Arg::Int(Some(i64::from(value)));
    i32 => |value| Arg::Int32(value);
    bool => |value| Arg::Bool(value);
    &'a [u8] => |bytes| Arg::Bytes(bytes);
    Option<&'a [u8]> => |bytes| Arg::OptBytes(bytes);
    &'a [Uuid] => |ids| Arg::Ids(ids);
    &'a [Option<Uuid>] => |ids| Arg::OptIds(ids);
    &'a [Option<&'a str>] => |texts| Arg::Texts(texts);
    &'a [i64] => |values| Arg::Ints(values);
    &'a [&'a Value] => |values| Arg::Jsons(values);
    &'a Value => |value| Arg::Json(Some(value));
    Option<&'a Value> => |value| Arg::Json(value);
    Duration => |duration| Arg::Float(Some(duration.as_secs_f64()));
    Option<Duration> => |duration| Arg::Float(duration.map(|d| d.as_secs_f64()));
    OffsetDateTime => |at| Arg::Time(at);
}

/// The values of a statement's `$1, $2, …`, in order: `args![job_id, version, output]`.
macro_rules! args {
    ($($value:expr),* $(,)?) => {
        &[$($crate::store::dialect::Arg::from($value)),*]
    };
}

/// The SQL dialect of a database (see the module doc): its statements, how it binds a value
/// and how it reads a column.
pub(crate) trait Dialect: Send + Sync + Sized + 'static {
    /// The sqlx database it speaks.
    type Db: Database;

    /// Its name, for logs and `/readyz` (`"postgres"`, `"sqlite"`).
    const NAME: &'static str;

    /// Its statements.
    const SQL: Sql;

    /// The statement that begins a write transaction ([`super::backend::Tx::begin`]), one that excludes
    /// other writers of the rows it locks: `None` for the database's plain `BEGIN`
    /// (PostgreSQL: row locks taken by the statements); SQLite's `BEGIN IMMEDIATE` takes the
    /// database's write lock from the first statement.
    const BEGIN: Option<&'static str>;

    /// The arguments of a statement, as this database binds them.
    type Args: sqlx::IntoArguments<Self::Db> + Send + 'static;

    /// What runs a statement on one of its connections.
    type Exec<'c>: sqlx::Executor<'c, Database = Self::Db>;

    /// A connection as what runs a statement on it.
    fn exec(conn: &mut Conn<Self>) -> Self::Exec<'_>;

    /// Binds `args` as this database stores each kind of value.
    fn arguments(args: &[Arg<'_>]) -> Result<Self::Args, StoreError>;

    /// How many rows a statement changed.
    fn rows_affected(done: &<Self::Db as Database>::QueryResult) -> u64;

    /// An id column.
    fn uuid(row: &Row<Self>, column: &str) -> Result<Uuid, StoreError>;
    /// An id column that may be NULL.
    fn opt_uuid(row: &Row<Self>, column: &str) -> Result<Option<Uuid>, StoreError>;
    /// A text column.
    fn text(row: &Row<Self>, column: &str) -> Result<String, StoreError>;
    /// A text column that may be NULL.
    fn opt_text(row: &Row<Self>, column: &str) -> Result<Option<String>, StoreError>;
    /// A 64-bit integer column.
    fn int(row: &Row<Self>, column: &str) -> Result<i64, StoreError>;
    /// A 32-bit integer column.
    fn int32(row: &Row<Self>, column: &str) -> Result<i32, StoreError>;
    /// A float column that may be NULL.
    fn opt_float(row: &Row<Self>, column: &str) -> Result<Option<f64>, StoreError>;
    /// A boolean column.
    fn flag(row: &Row<Self>, column: &str) -> Result<bool, StoreError>;
    /// A bytes column.
    fn bytes(row: &Row<Self>, column: &str) -> Result<Vec<u8>, StoreError>;
    /// A bytes column that may be NULL.
    fn opt_bytes(row: &Row<Self>, column: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// A 32-bit integer column that may be NULL.
    fn opt_int32(row: &Row<Self>, column: &str) -> Result<Option<i32>, StoreError>;
    /// A JSON column.
    fn json(row: &Row<Self>, column: &str) -> Result<Value, StoreError>;
    /// A JSON column that may be NULL.
    fn opt_json(row: &Row<Self>, column: &str) -> Result<Option<Value>, StoreError>;
    /// A timestamp column.
    fn time(row: &Row<Self>, column: &str) -> Result<OffsetDateTime, StoreError>;
    /// A timestamp column that may be NULL.
    fn opt_time(row: &Row<Self>, column: &str) -> Result<Option<OffsetDateTime>, StoreError>;
}
