//! Worker wake-ups on PostgreSQL: one `LISTEN onejob_dispatch` connection per store, started
//! on first use, forwarding notifications to the local waiters. If the listening connection
//! drops, sqlx reconnects it; waiters fall back to their poll interval meanwhile. When the
//! store's pools move to another host (a failover, [`super::connections::hosts`]), the listener
//! reconnects through the pool, so it listens where intake now notifies.
//!
//! A notification's payload says what it is for: intake's, sent after a batch created jobs,
//! carry the sending store's id (new jobs only: [`Woken::NewJobs`]); the trigger's, sent when
//! a job's dispatch time is set again, are empty (anything). A store's own intake
//! notifications are dropped here: its workers were woken directly when the batch
//! committed ([`Wake::signal`]), and a second wake-up would only send them looking again.

use std::{sync::Arc, time::Duration};

use sqlx::{PgPool, postgres::PgListener};
use tokio::sync::{OnceCell, watch};
use uuid::Uuid;

use super::DISPATCH_CHANNEL;
use crate::store::{Woken, WorkSignal};

/// The shared wake-up signal of one [`super::PgStore`].
#[derive(Debug, Clone)]
pub(super) struct Wake {
    pool: PgPool,
    /// Told when the pools moved to another host.
    moved: Option<watch::Receiver<usize>>,
    signal: WorkSignal,
    /// The payload of this store's intake notifications.
    sender: Arc<str>,
    listener: Arc<OnceCell<()>>,
}

impl Wake {
    pub(super) fn new(pool: PgPool, moved: Option<watch::Receiver<usize>>) -> Self {
        Self {
            pool,
            moved,
            signal: WorkSignal::default(),
            sender: Uuid::now_v7().to_string().into(),
            listener: Arc::new(OnceCell::new()),
        }
    }

    /// The signal the waiters of this process wait on, for this store's own writers to
    /// wake them directly (a notification from PostgreSQL tells the same signal).
    pub(super) fn signal(&self) -> WorkSignal {
        self.signal.clone()
    }

    /// What this store's intake notifications carry, so that its own listener knows them.
    pub(super) fn sender(&self) -> Arc<str> {
        self.sender.clone()
    }

    /// Waits for a dispatch notification, or `max_wait`, whichever comes first.
    pub(super) async fn wait(&self, max_wait: Duration) -> Woken {
        self.listener
            .get_or_init(|| async {
                tokio::spawn(listen(
                    self.pool.clone(),
                    self.moved.clone(),
                    self.signal.clone(),
                    self.sender.clone(),
                ));
            })
            .await;
        self.signal.wait(max_wait).await
    }
}

/// What a notification with `payload` wakes this store's workers for, if anything: nothing
/// for its own intake's (`sender`), new jobs for another store's intake, anything for the
/// trigger's (empty).
fn woken_by(payload: &str, sender: &str) -> Option<Woken> {
    match payload {
        "" => Some(Woken::Anything),
        own if own == sender => None,
        _ => Some(Woken::NewJobs),
    }
}

async fn listen(
    pool: PgPool,
    mut moved: Option<watch::Receiver<usize>>,
    signal: WorkSignal,
    sender: Arc<str>,
) {
    loop {
        if let Some(moved) = moved.as_mut() {
            moved.mark_unchanged();
        }
        match PgListener::connect_with(&pool).await {
            Ok(mut listener) => {
                if let Err(error) = listener.listen(DISPATCH_CHANNEL).await {
                    tracing::warn!(%error, "LISTEN failed; retrying");
                } else {
                    // Anything committed while we were not listening is found by the next look.
                    signal.anything();
                    loop {
                        let received = tokio::select! {
                            received = listener.recv() => received,
                            () = host_moved(&mut moved) => {
                                tracing::info!("the database moved; listening there");
                                break;
                            }
                        };
                        match received {
                            Ok(notification) => match woken_by(notification.payload(), &sender) {
                                Some(Woken::NewJobs) => signal.new_jobs(),
                                Some(Woken::Anything) => signal.anything(),
                                None => {}
                            },
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sqlx::{PgPool, postgres::PgListener};

    use super::{Wake, woken_by};
    use crate::store::{Woken, postgres::fresh};

    #[test]
    fn a_notification_wakes_for_what_its_payload_says() {
        assert_eq!(woken_by("", "me"), Some(Woken::Anything));
        assert_eq!(woken_by("another", "me"), Some(Woken::NewJobs));
        assert_eq!(woken_by("me", "me"), None);
    }

    /// Through a real `LISTEN`: another store's intake notification wakes for new jobs, the
    /// trigger's (empty) for anything, and this store's own is dropped (the batch that sent
    /// it woke the workers directly).
    #[tokio::test]
    async fn the_listener_wakes_for_what_each_notification_is_for() {
        let (_db, options) = fresh!("onejob_unit_wake_payloads").await;
        let pool = PgPool::connect_with(options).await.unwrap();
        let wake = Wake::new(pool.clone(), None);
        // The first wait starts the listener, which wakes for anything once it listens.
        assert_eq!(wake.wait(Duration::from_secs(30)).await, Woken::Anything);
        // A listener of the test's own sees when a notification went out.
        let mut witness = PgListener::connect_with(&pool).await.unwrap();
        witness.listen(super::DISPATCH_CHANNEL).await.unwrap();
        let notify = async |payload: &str| {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(super::DISPATCH_CHANNEL)
                .bind(payload)
                .execute(&pool)
                .await
                .unwrap();
        };
        notify(&wake.sender()).await;
        assert_eq!(witness.recv().await.unwrap().payload(), &*wake.sender());
        // Dropped: the wait times out (which counts as anything); not dropped, it would
        // have woken it for new jobs.
        assert_eq!(
            wake.wait(Duration::from_millis(500)).await,
            Woken::Anything,
            "the store's own notification woke its workers"
        );
        notify("another store").await;
        assert_eq!(wake.wait(Duration::from_secs(30)).await, Woken::NewJobs);
        notify("").await;
        assert_eq!(wake.wait(Duration::from_secs(30)).await, Woken::Anything);
        // Not closed: closing waits for the listeners' connections, which never come back.
    }
}
