//! The HTTP server loop: accepts connections and serves the router on each with hyper-util,
//! bounding what a slow or hostile client can hold.
//!
//! `axum::serve` gives hyper no timer, so hyper never times out a request head: a client
//! trickling its headers one byte at a time (slowloris) would hold a connection, and a task,
//! for ever. Here each connection gets:
//!
//! * a timer and [`ServerLimits::header_read_timeout`]: a request head not complete within
//!   it closes the connection;
//! * [`MAX_HEADER_BYTES`] and [`MAX_HEADERS`]: a larger head is answered `431` by hyper;
//! * HTTP/2 keep-alive pings, so a silent HTTP/2 peer is dropped.
//!
//! Slow bodies and slow handlers are bounded by the request timeout layer in
//! [`super::deadline`]. On shutdown the listener closes, every connection is asked to
//! finish its in-flight requests, and the loop waits at most [`ServerLimits::drain`] for
//! them.

use std::{future::Future, time::Duration};

use axum::{Router, body::Body, extract::Request};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::{conn::auto::Builder, graceful::GracefulShutdown},
    service::TowerToHyperService,
};
use tokio::net::TcpListener;
use tower::ServiceExt;

/// Largest request head (request line and headers) read, in bytes; beyond it hyper answers
/// `431 Request Header Fields Too Large` and closes the connection.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Most header fields in one request; beyond it hyper answers `431`.
pub const MAX_HEADERS: usize = 100;

/// The bounds one server applies to every connection.
#[derive(Debug, Clone, Copy)]
pub struct ServerLimits {
    /// How long a client may take to send a complete request head.
    pub header_read_timeout: Duration,
    /// How long shutdown waits for in-flight requests before closing their connections.
    pub drain: Duration,
}

/// Serves `router` on `listener` until `shutdown` completes, then drains connections.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_HEADER_BYTES.max(8 * 1024))
        .max_headers(MAX_HEADERS);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(limits.header_read_timeout))
        .keep_alive_timeout(limits.header_read_timeout);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: wait a little instead of spinning.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = router
            .clone()
            .map_request(|request: Request<Incoming>| request.map(Body::new));
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(service))
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, error = %error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the drain time; closing them");
    }
    Ok(())
}
