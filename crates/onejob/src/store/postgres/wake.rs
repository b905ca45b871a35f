//! Worker wake-ups on PostgreSQL: one `LISTEN onejob_dispatch` connection per store, started
//! on first use, forwarding notifications to the local waiters. If the listening connection
//! drops, sqlx reconnects it; waiters fall back to their poll interval meanwhile. When the
//! store's pools move to another host (a failover, [`super::hosts`]), the listener
//! reconnects through the pool, so it listens where intake now notifies.

use std::{sync::Arc, time::Duration};

use sqlx::{PgPool, postgres::PgListener};
use tokio::sync::{Notify, OnceCell, watch};

use super::DISPATCH_CHANNEL;

/// The shared wake-up signal of one [`super::PgStore`].
#[derive(Debug, Clone)]
pub(super) struct Wake {
    pool: PgPool,
    /// Told when the pools moved to another host.
    moved: Option<watch::Receiver<usize>>,
    notify: Arc<Notify>,
    listener: Arc<OnceCell<()>>,
}

impl Wake {
    pub(super) fn new(pool: PgPool, moved: Option<watch::Receiver<usize>>) -> Self {
        Self {
            pool,
            moved,
            notify: Arc::new(Notify::new()),
            listener: Arc::new(OnceCell::new()),
        }
    }

    /// The signal the waiters of this process wait on, for this store's own writers to
    /// wake them directly (a notification from PostgreSQL tells the same signal).
    pub(super) fn local(&self) -> Arc<Notify> {
        self.notify.clone()
    }

    /// Waits for a dispatch notification, or `max_wait`, whichever comes first.
    pub(super) async fn wait(&self, max_wait: Duration) {
        self.listener
            .get_or_init(|| async {
                tokio::spawn(listen(
                    self.pool.clone(),
                    self.moved.clone(),
                    self.notify.clone(),
                ));
            })
            .await;
        let _ = tokio::time::timeout(max_wait, self.notify.notified()).await;
    }
}

async fn listen(pool: PgPool, mut moved: Option<watch::Receiver<usize>>, notify: Arc<Notify>) {
    loop {
        if let Some(moved) = moved.as_mut() {
            moved.mark_unchanged();
        }
        match PgListener::connect_with(&pool).await {
            Ok(mut listener) => {
                if let Err(error) = listener.listen(DISPATCH_CHANNEL).await {
                    tracing::warn!(%error, "LISTEN failed; retrying");
                } else {
                    // Anything committed while we were not listening is found by the next poll.
                    notify.notify_one();
                    loop {
                        let received = tokio::select! {
                            received = listener.recv() => received,
                            () = host_moved(&mut moved) => {
                                tracing::info!("the database moved; listening there");
                                break;
                            }
                        };
                        match received {
                            Ok(_) => notify.notify_one(),
                            Err(error) => {
                                tracing::warn!(%error, "dispatch listener lost; reconnecting");
                                break;
                            }
                        }
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "cannot open the dispatch listener; retrying"),
        }
        if pool.is_closed() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Returns when the pools moved to another host; never without hosts to follow.
async fn host_moved(moved: &mut Option<watch::Receiver<usize>>) {
    if let Some(receiver) = moved
        && receiver.changed().await.is_ok()
    {
        return;
    }
    std::future::pending().await
}
