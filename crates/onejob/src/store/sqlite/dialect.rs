//! SQLite's dialect: its statements (`sql.rs`, `BEGIN IMMEDIATE` for writes), its values
//! bound as SQLite stores them (ids, JSON and times as TEXT, lists as JSON arrays read with
//! `json_each`) and its columns read back from those.

use serde_json::Value;
use sqlx::{
    Arguments, Decode, Row as _, Sqlite, SqliteConnection, Type,
    sqlite::{SqliteArguments, SqliteRow},
};
use time::{OffsetDateTime, UtcOffset, format_description::well_known::Rfc3339};
use uuid::Uuid;

use super::{SqliteStore, sql};
use crate::store::{StoreError, dialect::Arg, dialect::Dialect, sql::Sql};

impl Dialect for SqliteStore {
    type Db = Sqlite;

    const NAME: &'static str = "sqlite";

    const SQL: Sql = sql::SQL;

    const BEGIN: Option<&'static str> = Some("BEGIN IMMEDIATE");

    type Args = SqliteArguments;

    type Exec<'c> = &'c mut SqliteConnection;

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

    fn opt_bytes(row: &SqliteRow, column: &str) -> Result<Option<Vec<u8>>, StoreError> {
        get(row, column)
    }

    fn opt_int32(row: &SqliteRow, column: &str) -> Result<Option<i32>, StoreError> {
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

/// A stored value that is not what onejob wrote (`what`: its kind).
pub(super) fn corrupt(what: &str, detail: impl std::fmt::Display) -> StoreError {
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
            Arg::OptBytes(bytes) => arguments.add(bytes),
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
