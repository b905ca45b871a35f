//! TCP settings on onejob's PostgreSQL connections that sqlx 0.9.0 does not make:
//! `TCP_NODELAY` (its issue 4335, fixed upstream after that release), and keepalives with a
//! user timeout, so that a database host that vanishes (powered off, cut off: nothing
//! answers, nothing resets) ends its connections within seconds instead of the kernel's
//! quarter of an hour of retransmissions.
//!
//! Without `TCP_NODELAY`, a statement that leaves as two writes (over TLS, two records)
//! waits, under Nagle's algorithm, for the server to acknowledge the first, and the server
//! delays that acknowledgement (about 40 ms on Linux) while it waits for the rest of the
//! statement: intake stalled on it under load (bench/journal.md). Without keepalives, an
//! idle connection to a vanished host (a pooled one, the `LISTEN` connection) looks alive
//! for ever, and its next use waits on it; without a user timeout, a connection with data in
//! flight waits out every retransmission. (Each statement and commit is also bounded by the
//! store itself, onejob's `store/bound.rs`; these settings free the sockets below it.)
//!
//! sqlx keeps its socket to itself, so each new connection finds its own by its addresses:
//! the server says which client port the session came from (`inet_client_port()`), and the
//! process's TCP socket with that local port, connected to the server's port, gets the
//! options. A connection whose client port the process does not own (through a proxy that
//! rewrites it, or over a Unix socket) is left as sqlx made it.

use std::time::Duration;

use sqlx::{PgConnection, postgres::PgPoolOptions};

/// An idle connection is probed after this long without traffic…
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);

/// …every this long…
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(3);

/// …and closed after this many probes go unanswered.
const KEEPALIVE_PROBES: u32 = 3;

/// How long sent data may stay unacknowledged before the connection is closed (also bounds
/// the keepalive probes, as libpq's `tcp_user_timeout` does).
const USER_TIMEOUT: Duration = Duration::from_secs(20);

/// Pool options whose every new connection gets the settings ([`set`]).
pub fn pool_options() -> PgPoolOptions {
    PgPoolOptions::new().after_connect(|connection, _| Box::pin(set(connection)))
}

/// Sets `TCP_NODELAY`, keepalives and the user timeout on `connection`'s socket, if this
/// process finds it.
pub async fn set(connection: &mut PgConnection) -> Result<(), sqlx::Error> {
    let ports: (Option<i32>, Option<i32>) =
        sqlx::query_as("SELECT inet_client_port(), inet_server_port()")
            .fetch_one(connection)
            .await?;
    if let (Some(local), Some(peer)) = ports
        && let (Ok(local), Ok(peer)) = (u16::try_from(local), u16::try_from(peer))
        && !socket::tune(local, peer)
    {
        tracing::debug!(
            local,
            peer,
            "no socket of this process has the session's ports"
        );
    }
    Ok(())
}

#[cfg(target_os = "linux")]
mod socket {
    use std::os::fd::{BorrowedFd, RawFd};

    use socket2::{SockRef, TcpKeepalive};

    use super::{KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_PROBES, USER_TIMEOUT};

    /// Sets `TCP_NODELAY`, keepalives and the user timeout on this process's TCP socket from
    /// local port `local` to a peer's port `peer`; whether there is one.
    pub fn tune(local: u16, peer: u16) -> bool {
        with_socket(local, peer, |socket| {
            let keepalive = TcpKeepalive::new()
                .with_time(KEEPALIVE_IDLE)
                .with_interval(KEEPALIVE_INTERVAL)
                .with_retries(KEEPALIVE_PROBES);
            let set = [
                socket.set_tcp_nodelay(true),
                socket.set_tcp_keepalive(&keepalive),
                socket.set_tcp_user_timeout(Some(USER_TIMEOUT)),
            ];
            for result in &set {
                if let Err(error) = result {
                    tracing::debug!(%error, "a TCP setting was refused");
                }
            }
            set[0].is_ok()
        })
        .unwrap_or(false)
    }

    /// Whether the socket with these ports has `TCP_NODELAY` set, and its user timeout
    /// (for tests).
    #[cfg(test)]
    pub fn settings(local: u16, peer: u16) -> Option<(bool, Option<std::time::Duration>)> {
        with_socket(local, peer, |socket| {
            Some((socket.tcp_nodelay().ok()?, socket.tcp_user_timeout().ok()?))
        })
        .flatten()
    }

    /// `act` on this process's TCP socket from local port `local` to a peer's port `peer`.
    fn with_socket<T>(local: u16, peer: u16, act: impl FnOnce(&SockRef<'_>) -> T) -> Option<T> {
        for entry in std::fs::read_dir("/proc/self/fd").ok()?.flatten() {
            let is_socket = std::fs::read_link(entry.path())
                .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
            let Ok(fd) = entry.file_name().to_string_lossy().parse::<RawFd>() else {
                continue;
            };
            if !is_socket {
                continue;
            }
            // SAFETY: `fd` is one of this process's open sockets (listed a moment ago); it is
            // only borrowed for the calls below. Were it closed and its number reused
            // meanwhile, they would act on whatever socket has it now, and only on one with
            // exactly the session's two ports.
            let fd = unsafe { BorrowedFd::borrow_raw(fd) };
            let socket = SockRef::from(&fd);
            let port = |address: std::io::Result<socket2::SockAddr>| {
                address.ok().and_then(|a| a.as_socket()).map(|a| a.port())
            };
            if port(socket.local_addr()) == Some(local) && port(socket.peer_addr()) == Some(peer) {
                return Some(act(&socket));
            }
        }
        None
    }
}

#[cfg(not(target_os = "linux"))]
mod socket {
    /// Elsewhere the socket is not looked for.
    pub fn tune(_local: u16, _peer: u16) -> bool {
        false
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use sqlx::{Connection, PgConnection};

    use super::{USER_TIMEOUT, set, socket};

    /// A connection sqlx opened has no `TCP_NODELAY` and no user timeout; once [`set`] ran,
    /// it has both (over TLS and over plain TCP alike).
    #[tokio::test]
    async fn a_new_connection_gets_tcp_nodelay_and_a_user_timeout() {
        let admin = std::env::var("ONEJOB_TEST_POSTGRES")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        for sslmode in ["disable", "require"] {
            let url = format!("{admin}?sslmode={sslmode}");
            let mut connection = PgConnection::connect(&url).await.unwrap();
            let (local, peer): (i32, i32) =
                sqlx::query_as("SELECT inet_client_port(), inet_server_port()")
                    .fetch_one(&mut connection)
                    .await
                    .unwrap();
            let ports = (local as u16, peer as u16);
            assert_eq!(
                socket::settings(ports.0, ports.1),
                Some((false, None)),
                "{sslmode}"
            );
            set(&mut connection).await.unwrap();
            assert_eq!(
                socket::settings(ports.0, ports.1),
                Some((true, Some(USER_TIMEOUT))),
                "{sslmode}"
            );
        }
    }
}
