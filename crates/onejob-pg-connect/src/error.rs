//! What can go wrong between a database URL and a connection to the host that takes writes.

/// Why no suitable connection was made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL cannot be read (a bad host list or port, an unknown `target_session_attrs`);
    /// `reason` says what, and `url` has its password redacted.
    #[error("invalid database URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL, its password redacted.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No host's session matches `target_session_attrs` (a standby, a read-only session, a
    /// host whose commits do not complete); says which and why. Retrying may succeed once
    /// a host is promoted.
    #[error("no database host accepts writes: {0}")]
    NotWritable(String),
    /// TLS could not be set up as the URL asks; says what to change.
    #[error("TLS to PostgreSQL failed: {0}")]
    Tls(String),
    /// No connection was made within the time allowed.
    #[error("no connection to the database within the time allowed")]
    TimedOut,
    /// The database or the network refused (sqlx's error, unclassified: the caller decides
    /// what it means for it).
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}
