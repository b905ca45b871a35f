//! `TCP_NODELAY` on onejob's PostgreSQL connections, which sqlx 0.9.0 does not set (its
//! issue 4335, fixed upstream after that release).
//!
//! Without it, a statement that leaves as two writes (over TLS, two records) waits, under
//! Nagle's algorithm, for the server to acknowledge the first, and the server delays that
//! acknowledgement (about 40 ms on Linux) while it waits for the rest of the statement:
//! intake stalled on it under load (bench/journal.md). sqlx keeps its socket to itself, so
//! each new connection finds its own by its addresses: the server says which client port
//! the session came from (`inet_client_port()`), and the process's TCP socket with that
//! local port, connected to the server's port, gets the option. A connection whose client
//! port the process does not own (through a proxy that rewrites it, or over a Unix
//! socket) is left as sqlx made it.

use sqlx::{PgConnection, postgres::PgPoolOptions};

/// Pool options whose every new connection gets `TCP_NODELAY` ([`set`]).
pub(super) fn pool_options() -> PgPoolOptions {
    PgPoolOptions::new().after_connect(|connection, _| Box::pin(set(connection)))
}

/// Sets `TCP_NODELAY` on `connection`'s socket, if this process finds it; whether it did.
pub(super) async fn set(connection: &mut PgConnection) -> Result<(), sqlx::Error> {
    let ports: (Option<i32>, Option<i32>) =
        sqlx::query_as("SELECT inet_client_port(), inet_server_port()")
            .fetch_one(connection)
            .await?;
    if let (Some(local), Some(peer)) = ports
        && let (Ok(local), Ok(peer)) = (u16::try_from(local), u16::try_from(peer))
        && !socket::set_nodelay(local, peer)
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

    use socket2::SockRef;

    /// Sets `TCP_NODELAY` on this process's TCP socket from local port `local` to a peer's
    /// port `peer`; whether there is one.
    pub(super) fn set_nodelay(local: u16, peer: u16) -> bool {
        with_socket(local, peer, |socket| socket.set_tcp_nodelay(true).is_ok()).unwrap_or(false)
    }

    /// Whether the socket with these ports has `TCP_NODELAY` set (for tests).
    #[cfg(test)]
    pub(super) fn nodelay(local: u16, peer: u16) -> Option<bool> {
        with_socket(local, peer, |socket| socket.tcp_nodelay().ok()).flatten()
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
    pub(super) fn set_nodelay(_local: u16, _peer: u16) -> bool {
        false
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use sqlx::{Connection, PgConnection};

    use super::{set, socket};

    /// A connection sqlx opened has no `TCP_NODELAY`; once [`set`] ran, it has (over TLS and
    /// over plain TCP alike).
    #[tokio::test]
    async fn a_new_connection_gets_tcp_nodelay() {
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
            assert_eq!(socket::nodelay(ports.0, ports.1), Some(false), "{sslmode}");
            set(&mut connection).await.unwrap();
            assert_eq!(socket::nodelay(ports.0, ports.1), Some(true), "{sslmode}");
        }
    }
}
