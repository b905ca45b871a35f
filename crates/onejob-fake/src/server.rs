//! [`FakeServer`]: binds a port, routes every endpoint of the fake provider, serves in a
//! background tokio task, and stops (releasing hanging requests) when dropped.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::{
    Router,
    http::Uri,
    routing::{get, post},
};
use tokio::net::TcpListener;

use crate::behaviour::Rule;
use crate::error::FakeError;
use crate::state::Shared;
use crate::submissions::Submissions;
use crate::{chat, control, endpoints, tasks};

/// A running fake provider. Dropping it stops the server: hanging requests are answered
/// with 503 and the listener closes.
pub struct FakeServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FakeServer {
    /// Binds `addr` (`127.0.0.1:0` for a free port) and serves in a background tokio task.
    pub async fn spawn(addr: SocketAddr) -> std::io::Result<FakeServer> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Shared::new();
        let app = router(Arc::clone(&shared));
        let stopping = Arc::clone(&shared);
        tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stopping.until_shutdown().await })
                .await;
            if let Err(error) = served {
                tracing::error!(%error, "the fake provider stopped serving");
            }
        });
        tracing::debug!(%addr, "fake provider listening");
        Ok(FakeServer { addr, shared })
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's base URL, `http://IP:PORT` (no trailing slash).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Appends a rule, like `POST /_fake/rules`.
    pub fn add_rule(&self, rule: Rule) {
        self.shared.add_rule(rule);
    }

    /// Removes every rule, like `DELETE /_fake/rules`.
    pub fn clear_rules(&self) {
        self.shared.clear_rules();
    }

    /// Clears rules, tasks, idempotency caches and counters, like `POST /_fake/reset`.
    pub fn reset(&self) {
        self.shared.reset();
    }

    /// A snapshot of the side-effect log, like `GET /_fake/submissions`.
    pub fn submissions(&self) -> Submissions {
        self.shared.submissions()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.shared.shut_down();
    }
}

impl std::fmt::Debug for FakeServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// Every route of the fake provider; unknown routes and methods answer JSON errors.
fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat::completions))
        .route("/v1/embeddings", post(endpoints::embeddings))
        .route("/v1/responses", post(endpoints::responses))
        .route("/v1/images/generations", post(endpoints::images))
        .route("/v1/messages", post(endpoints::messages))
        .route("/v1/tasks", post(tasks::submit).get(tasks::by_key))
        .route("/v1/tasks/{task_id}", get(tasks::status))
        .route("/v1/tasks/{task_id}/cancel", post(tasks::cancel))
        .route(
            "/_fake/rules",
            post(control::add_rule).delete(control::clear_rules),
        )
        .route("/_fake/submissions", get(control::submissions))
        .route("/_fake/reset", post(control::reset))
        .fallback(|uri: Uri| async move { FakeError::UnknownRoute(uri.path().to_owned()) })
        .method_not_allowed_fallback(|| async { FakeError::MethodNotAllowed })
        .with_state(shared)
}
