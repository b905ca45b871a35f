//! The store's typed error, which says whether trying again later can help.
//!
//! Both backends answer with the same variants for the same situations: a lost or refused
//! connection is [`StoreError::Unavailable`], a job that kept changing under a
//! compare-and-swap is [`StoreError::Contended`], and both are retryable. The database
//! errors are kept behind an [`Arc`] so one failure can be answered to every caller that
//! shared the failed transaction (group commit) as itself, not as a relabelled copy.

use std::sync::Arc;

/// What went wrong talking to the database.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached right now (connection refused or lost, pool exhausted,
    /// server shutting down, SQLite busy). Retrying later can succeed; HTTP answers 503.
    #[error("the database is unavailable")]
    Unavailable(#[source] Arc<sqlx::Error>),
    /// A compare-and-swap kept losing because the row kept changing under it; nothing was
    /// written. Retrying can succeed; HTTP answers 503.
    #[error("the job kept changing during {0}; try again")]
    Contended(&'static str),
    /// A write named a job (or attempt) that is gone: retention deleted it meanwhile (a
    /// foreign key found no row). Not [`StoreError::is_retryable`]: the connection is fine and
    /// the same write fails again; intake tries the submission anew (its key now names
    /// nothing), and where it still surfaces HTTP answers 503, so the client's retry does.
    #[error("the job this write refers to was deleted meanwhile (retention): {0}")]
    Vanished(String),
    /// The database refused the statement for a reason retrying will not fix.
    #[error("the database returned an error")]
    Database(#[source] Arc<sqlx::Error>),
    /// A stored value could not be read back into its type.
    #[error("stored data is not what onejob wrote: {0}")]
    Corrupt(String),
    /// The database's schema is not what onejob expects (an index of onejob's name with
    /// another definition, say); the message says what to do. Retrying will not fix it.
    #[error("the database schema is not what onejob expects: {0}")]
    Schema(String),
    /// Applying the schema migrations failed.
    #[error("migrating the schema failed")]
    Migrate(#[source] Arc<sqlx::migrate::MigrateError>),
    /// TLS to PostgreSQL could not be set up as the URL's `sslmode` and `sslrootcert` ask
    /// (certificate not trusted, wrong host name, server without TLS, unreadable
    /// `sslrootcert`); the message says what to check. Retrying will not fix it.
    #[error("TLS to PostgreSQL failed: {0}")]
    Tls(String),
    /// No host of the database URL accepts writes right now (each is down, or a standby,
    /// or read-only as `target_session_attrs` asks): a failover is under way. Retrying later
    /// can succeed; HTTP answers 503.
    #[error("no database host accepts writes: {0}")]
    NotWritable(String),
    /// A statement or commit did not finish within the store's bound (`write_timeout`): the
    /// database host may have stopped committing (an old primary whose synchronous standby
    /// is gone) or vanished. Its outcome is unknown (the commit may still land on that
    /// server), so it is not acknowledged, and its connection was discarded. Retrying later
    /// can succeed (the same idempotency key finds the job if it was written); HTTP answers
    /// 503.
    #[error("the database did not finish {what} within {within:?}; its outcome is unknown")]
    TimedOut {
        /// What ran out: "a statement", "a commit"…
        what: &'static str,
        /// The bound it ran out of.
        within: std::time::Duration,
    },
    /// The store moved to another database host (a failover) while a statement or commit
    /// was in flight on the old one: its outcome is unknown, it is not acknowledged, and its
    /// connection was discarded. Retrying can succeed at once, on the new host; HTTP answers
    /// 503.
    #[error("the database moved to another host during {what}; its outcome is unknown")]
    Moved {
        /// What was in flight: "a statement", "a commit"…
        what: &'static str,
    },
    /// The connection a transaction ran on was discarded after a call on it ran out of time
    /// ([`StoreError::TimedOut`]); nothing more can be done in that transaction. Retryable.
    #[error("the database connection was discarded after a call on it ran out of time")]
    Discarded,
    /// The database URL cannot be read (a bad host list or port, an unknown
    /// `target_session_attrs`); `reason` says what, and `url` has its password redacted.
    #[error("invalid database URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL, its password replaced by `***`.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The PostgreSQL server has no database of the URL's name (`name`); onejob does not
    /// create databases, only its schema in one.
    #[error(
        "the PostgreSQL server has no database {name:?}: create it first (`createdb {name}` \
         as a role allowed to, or `CREATE DATABASE {name};` in psql), then run onejob again"
    )]
    NoDatabase {
        /// The database's name.
        name: String,
    },
    /// The database URL names no database onejob supports.
    #[error("unsupported database URL {0:?}: use postgres://user@host:5432/db or sqlite://file.db")]
    UnsupportedUrl(String),
}

impl StoreError {
    /// True when the same call may succeed later.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable(_)
                | StoreError::Contended(_)
                | StoreError::NotWritable(_)
                | StoreError::TimedOut { .. }
                | StoreError::Moved { .. }
                | StoreError::Discarded
        )
    }

    /// True when a write that failed this way may still have been written: its call ran
    /// out of time ([`StoreError::TimedOut`]) or was given up when the store moved to
    /// another host ([`StoreError::Moved`]) after the statement or commit had left.
    /// Retrying it is safe only where the write is idempotent or checked again first.
    pub fn is_unclear(&self) -> bool {
        matches!(
            self,
            StoreError::TimedOut { .. } | StoreError::Moved { .. } | StoreError::Discarded
        )
    }

    /// True when the statement met a read-only server (PostgreSQL's SQLSTATE 25006: a
    /// standby, or the old primary back as one after a failover). The store whose call it
    /// was notes it (`bound.rs`): the error itself is no one's.
    pub(crate) fn met_read_only(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable(error)
                if matches!(&**error, sqlx::Error::Database(db) if db.code().as_deref() == Some("25006"))
        )
    }

    /// The database cannot be reached: `error` says how.
    pub fn unavailable(error: sqlx::Error) -> Self {
        StoreError::Unavailable(Arc::new(error))
    }
}

impl From<onejob_pg_connect::ConnectError> for StoreError {
    fn from(error: onejob_pg_connect::ConnectError) -> Self {
        use onejob_pg_connect::ConnectError;
        match error {
            ConnectError::InvalidUrl { url, reason } => StoreError::InvalidUrl { url, reason },
            ConnectError::NotWritable(why) => StoreError::NotWritable(why),
            ConnectError::Tls(why) => StoreError::Tls(why),
            ConnectError::TimedOut => StoreError::unavailable(sqlx::Error::PoolTimedOut),
            ConnectError::Database(error) => StoreError::from(error),
        }
    }
}

impl crate::fault::ReplyLost for StoreError {
    fn reply_lost() -> Self {
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        StoreError::unavailable(sqlx::Error::Io(reset))
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &error
            && db.code().as_deref() == Some("3D000")
        {
            // invalid_catalog_name: `database "NAME" does not exist`.
            let name = db.message().split('"').nth(1).unwrap_or(db.message());
            return StoreError::NoDatabase {
                name: name.to_owned(),
            };
        }
        if is_unavailable(&error) {
            StoreError::Unavailable(Arc::new(error))
        } else if let sqlx::Error::Database(db) = &error
            && db.kind() == sqlx::error::ErrorKind::ForeignKeyViolation
        {
            StoreError::Vanished(db.message().to_owned())
        } else {
            StoreError::Database(Arc::new(error))
        }
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(error: sqlx::migrate::MigrateError) -> Self {
        StoreError::Migrate(Arc::new(error))
    }
}

fn is_unavailable(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => match db.code() {
            // PostgreSQL: connection exceptions (08…), operator intervention (57P0x: shutdown,
            // crash, cannot connect now), serialization failure and deadlock (40001, 40P01),
            // and a write on a read-only server (25006 read_only_sql_transaction: a standby,
            // or the old primary back as one after a failover; see `onejob-pg-connect`'s `hosts.rs`).
            Some(code) => {
                code.starts_with("08")
                    || code == "25006"
                    || code.starts_with("57P0")
                    || code == "40001"
                    || code == "40P01"
                    // SQLite: SQLITE_BUSY (5) and SQLITE_LOCKED (6), with extended codes.
                    || code == "5"
                    || code == "6"
                    || code.parse::<i32>().is_ok_and(|c| c & 0xff == 5 || c & 0xff == 6)
                    || (code == "XX000" && citus_node_lost(db.message()))
            }
            None => false,
        },
        _ => false,
    }
}

/// Whether a Citus coordinator's internal error (`XX000`, which Citus raises without a more
/// precise code) says that a worker node holding the statement's shard could not be reached
/// or failed while committing: the tenants on that node are unavailable until it is back,
/// and a commit's outcome there is unknown (it is not acknowledged; the client's retry with
/// the same key finds the job if it landed).
fn citus_node_lost(message: &str) -> bool {
    [
        "could not commit transaction for shard",
        "connection to the remote node",
        "could not establish any connections to the node",
        "failure on connection marked as essential",
        "could not connect to any active placements",
    ]
    .iter()
    .any(|lost| message.contains(lost))
}

/// Displays an error with its causes, `outer: inner: innermost`, skipping a cause whose text
/// the previous one already contains (sqlx repeats its source in its own message).
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut previous = self.0.to_string();
        f.write_str(&previous)?;
        let mut cause = self.0.source();
        while let Some(error) = cause {
            let text = error.to_string();
            if !previous.contains(&text) {
                write!(f, ": {text}")?;
            }
            previous = text;
            cause = error.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exhausted_compare_and_swap_is_retryable_on_every_store() {
        let error = StoreError::Contended("completion");
        assert!(error.is_retryable());
        assert_eq!(
            error.to_string(),
            "the job kept changing during completion; try again"
        );
    }

    #[test]
    fn database_errors_keep_what_they_are_and_copies_are_the_same_error() {
        let lost = StoreError::from(sqlx::Error::Io(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset,
        )));
        assert!(matches!(lost, StoreError::Unavailable(_)));
        let refused = StoreError::from(sqlx::Error::RowNotFound);
        assert!(matches!(refused, StoreError::Database(_)));
        assert!(!refused.is_retryable());
        // A batch answers each of its callers with the failure itself, not a relabelled one.
        for error in [lost, refused] {
            let copy = error.clone();
            assert_eq!(copy.is_retryable(), error.is_retryable());
            assert_eq!(Chain(&copy).to_string(), Chain(&error).to_string());
        }
    }
}
