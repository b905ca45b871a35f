//! PostgreSQL connections as onejob makes them, on top of sqlx: everything between a
//! database URL and connections that go where writes are accepted, and nothing about what
//! runs on them. Usable and tested without the rest of onejob.
//!
//! * [`hosts`]: a URL naming several hosts, libpq's `target_session_attrs`, and following
//!   the host that accepts writes through a failover (a watcher per [`Hosts`]);
//! * [`tls`]: checking `sslrootcert` before connecting, and saying what to change when a
//!   handshake fails; [`tunnel`]: TLS to a server whose certificate rustls cannot read (an
//!   X.509 v1 one), which `sslmode=prefer` and `require` reach as libpq does;
//! * [`tcp`]: `TCP_NODELAY` and keepalives with a user timeout on every connection;
//! * [`Stalls`]: what the users of one set of pools noted of their host (calls that ran out
//!   of time, calls that met a read-only server), which the host watcher acts on;
//! * [`redact`]: a database URL fit for logs and messages.
//!
//! onejob's PostgreSQL store (`crates/onejob/src/store/postgres/connect/`) builds its pools
//! with these, and bounds each statement itself.

#![warn(missing_docs)]

mod error;
pub mod hosts;
mod stalls;
pub mod tcp;
pub mod tls;
pub mod tunnel;

pub use error::ConnectError;
pub use hosts::{HostList, Hosts, SessionAttrs, Switches, Target, probe_write};
pub use stalls::Stalls;
pub use tunnel::Tunnel;

/// `url` with its password replaced by `***`, for logs and messages; a URL that does not
/// parse (several hosts, say) is redacted by its text.
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        Ok(_) => url.to_owned(),
        Err(_) => redact_authority(url),
    }
}

/// Replaces the password in `scheme://user:password@…` by `***`, reading only the text.
fn redact_authority(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    match authority[..at].split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***{}", &rest[at..]),
        None => url.to_owned(),
    }
}
