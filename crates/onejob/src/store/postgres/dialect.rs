//! PostgreSQL's dialect: its statements (`sql.rs`), its values bound as PostgreSQL's own
//! types (`uuid`, `jsonb`, `timestamptz`, arrays for lists) and its columns read as them.
//! Citus speaks it unchanged: what differs there is how work is spread over shards
//! ([`super::citus`]), not how a statement is spelled, bound or read.

use serde_json::Value;
use sqlx::{
    Arguments, Decode, PgConnection, Postgres, Row as _, Type,
    postgres::{PgArguments, PgRow},
    types::Json,
};
use time::OffsetDateTime;
use uuid::Uuid;

use super::{PgStore, sql};
use crate::store::{StoreError, dialect::Arg, dialect::Dialect, sql::Sql};

impl Dialect for PgStore {
    type Db = Postgres;

    const NAME: &'static str = "postgres";

    const SQL: Sql = sql::SQL;

    const BEGIN: Option<&'static str> = None;

    type Args = PgArguments;

    type Exec<'c> = &'c mut PgConnection;

    fn exec(conn: &mut PgConnection) -> &mut PgConnection {
        conn
    }

    fn arguments(args: &[Arg<'_>]) -> Result<PgArguments, StoreError> {
        arguments(args)
    }

    fn rows_affected(done: &sqlx::postgres::PgQueryResult) -> u64 {
        done.rows_affected()
    }

    fn uuid(row: &PgRow, column: &str) -> Result<Uuid, StoreError> {
        get(row, column)
    }

    fn opt_uuid(row: &PgRow, column: &str) -> Result<Option<Uuid>, StoreError> {
        get(row, column)
    }

    fn text(row: &PgRow, column: &str) -> Result<String, StoreError> {
        get(row, column)
    }

    fn opt_text(row: &PgRow, column: &str) -> Result<Option<String>, StoreError> {
        get(row, column)
    }

    fn int(row: &PgRow, column: &str) -> Result<i64, StoreError> {
        get(row, column)
    }

    fn int32(row: &PgRow, column: &str) -> Result<i32, StoreError> {
        get(row, column)
    }

    fn opt_float(row: &PgRow, column: &str) -> Result<Option<f64>, StoreError> {
        get(row, column)
    }

    fn flag(row: &PgRow, column: &str) -> Result<bool, StoreError> {
        get(row, column)
    }

    fn bytes(row: &PgRow, column: &str) -> Result<Vec<u8>, StoreError> {
        get(row, column)
    }

    fn opt_bytes(row: &PgRow, column: &str) -> Result<Option<Vec<u8>>, StoreError> {
        get(row, column)
    }

    fn opt_int32(row: &PgRow, column: &str) -> Result<Option<i32>, StoreError> {
        get(row, column)
    }

    fn json(row: &PgRow, column: &str) -> Result<Value, StoreError> {
        get::<Json<Value>>(row, column).map(|json| json.0)
    }

    fn opt_json(row: &PgRow, column: &str) -> Result<Option<Value>, StoreError> {
        get::<Option<Json<Value>>>(row, column).map(|json| json.map(|j| j.0))
    }

    fn time(row: &PgRow, column: &str) -> Result<OffsetDateTime, StoreError> {
        get(row, column)
    }

    fn opt_time(row: &PgRow, column: &str) -> Result<Option<OffsetDateTime>, StoreError> {
        get(row, column)
    }
}

/// A column decoded as PostgreSQL's own type for `T`.
fn get<'r, T>(row: &'r PgRow, column: &str) -> Result<T, StoreError>
where
    T: Decode<'r, Postgres> + Type<Postgres>,
{
    Ok(row.try_get(column)?)
}

/// The values bound as PostgreSQL's types: `uuid`, `text`, `int8`/`int4`, `float8`,
/// `bytea`, `jsonb`, `timestamptz`; a NULL keeps its kind's type.
fn arguments(args: &[Arg<'_>]) -> Result<PgArguments, StoreError> {
    let mut arguments = PgArguments::default();
    for arg in args {
        match *arg {
            Arg::Id(id) => arguments.add(id),
            Arg::Ids(ids) => arguments.add(ids),
            Arg::OptIds(ids) => arguments.add(ids),
            Arg::Texts(texts) => arguments.add(texts),
            Arg::Ints(values) => arguments.add(values),
            Arg::Jsons(values) => arguments.add(values.iter().map(Json).collect::<Vec<_>>()),
            Arg::Text(text) => arguments.add(text),
            Arg::Int(value) => arguments.add(value),
            Arg::Int32(value) => arguments.add(value),
            Arg::Float(value) => arguments.add(value),
            Arg::Bool(value) => arguments.add(value),
            Arg::Bytes(bytes) => arguments.add(bytes),
            Arg::OptBytes(bytes) => arguments.add(bytes),
            Arg::Json(value) => arguments.add(value.map(Json)),
            Arg::Time(at) => arguments.add(at),
        }
        .map_err(|e| StoreError::from(sqlx::Error::Encode(e)))?;
    }
    Ok(arguments)
}
