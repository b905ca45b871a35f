//! A slow network in front of an upstream: a TCP proxy on a loopback port that holds every
//! byte a client sends for a fixed delay before passing it on, and loses what it still
//! holds when the client's connection dies — as a request on its way is lost with the
//! machine that sent it. Answers pass at once.
//!
//! It knows the `Idempotency-Key` of every request it is holding, so that a scenario can
//! kill a node exactly while one of the node's requests is on its way to the provider: the
//! provider then never receives it, which only the provider itself can prove.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::mpsc,
    task::JoinHandle,
    time::Instant,
};

#[derive(Default)]
struct Held {
    /// (connection, chunk) → the idempotency key of the request the chunk starts.
    keys: BTreeMap<(u64, u64), String>,
    /// Keyed requests (or their starts) dropped unsent with their connection.
    lost: u64,
}

/// A running slow network; dropping it stops accepting connections.
pub struct SlowNet {
    addr: SocketAddr,
    held: Arc<Mutex<Held>>,
    accept: JoinHandle<()>,
}

impl SlowNet {
    /// Listens on a free loopback port and relays every connection to `upstream`, holding
    /// what clients send for `delay`.
    pub async fn spawn(upstream: SocketAddr, delay: Duration) -> std::io::Result<SlowNet> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let held = Arc::new(Mutex::new(Held::default()));
        let connections = Arc::new(AtomicU64::new(0));
        let accept = tokio::spawn({
            let held = held.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let id = connections.fetch_add(1, Ordering::Relaxed);
                    tokio::spawn(relay(client, upstream, delay, id, held.clone()));
                }
            }
        });
        Ok(SlowNet { addr, held, accept })
    }

    /// Its base URL, `http://IP:PORT`, in place of the upstream's.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The idempotency keys of the requests being held now (sent, not yet passed on).
    pub fn held_keys(&self) -> Vec<String> {
        self.lock().keys.values().cloned().collect()
    }

    /// How many keyed requests were lost: held when their sender's connection died.
    pub fn lost(&self) -> u64 {
        self.lock().lost
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for SlowNet {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Relays one connection: client → upstream through the delay line, upstream → client at
/// once. When the client's end closes, whatever the line still holds is dropped.
async fn relay(
    client: TcpStream,
    upstream: SocketAddr,
    delay: Duration,
    connection: u64,
    held: Arc<Mutex<Held>>,
) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let (line, mut line_out) = mpsc::unbounded_channel::<(Instant, u64, Vec<u8>)>();
    let lock = || held.lock().unwrap_or_else(PoisonError::into_inner);
    let inbound = async {
        let mut buffer = vec![0; 64 * 1024];
        for chunk in 0.. {
            match client_read.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let bytes = buffer[..n].to_vec();
                    if let Some(key) = idempotency_key(&bytes) {
                        lock().keys.insert((connection, chunk), key);
                    }
                    if line.send((Instant::now() + delay, chunk, bytes)).is_err() {
                        return;
                    }
                }
            }
        }
    };
    let forward = async {
        while let Some((due, chunk, bytes)) = line_out.recv().await {
            tokio::time::sleep_until(due).await;
            lock().keys.remove(&(connection, chunk));
            if server_write.write_all(&bytes).await.is_err() {
                return;
            }
        }
    };
    let outbound = async {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
    };
    tokio::select! {
        () = inbound => {}
        () = forward => {}
        () = outbound => {}
    }
    let mut held = lock();
    let before = held.keys.len();
    held.keys.retain(|(c, _), _| *c != connection);
    held.lost += (before - held.keys.len()) as u64;
}

/// The `Idempotency-Key` header of the request whose head starts in `bytes`, if any.
fn idempotency_key(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let head = text.split("\r\n\r\n").next()?;
    head.split("\r\n").skip(1).find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("idempotency-key")
            .then(|| value.trim().to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_read_from_a_request_head() {
        let request = b"POST /v1/tasks HTTP/1.1\r\nhost: x\r\nIdempotency-Key: onejob:42\r\n\r\n{}";
        assert_eq!(idempotency_key(request).as_deref(), Some("onejob:42"));
        assert_eq!(idempotency_key(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"), None);
        assert_eq!(idempotency_key(b"{\"idempotency-key: no\"}"), None);
    }
}
