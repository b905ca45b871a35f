//! In-process notice that a job changed (an attempt ended, or it was resolved or
//! cancelled), so a gateway caller waiting for its job answers at once instead of at its
//! next poll. Callers still poll the store as a fallback: a job worked by another process
//! sends nothing here.

use std::sync::Arc;

use tokio::sync::broadcast;
use uuid::Uuid;

/// Room for notices not yet read by a slow waiter; one that falls behind just looks again.
const CAPACITY: usize = 1024;

/// One notice: which job changed, and for an answer just won, the upstream's id of the
/// request that made it (its `x-request-id`), which the gateway passes on to the caller.
#[derive(Debug, Clone)]
struct Notice {
    job_id: Uuid,
    request_id: Option<Arc<str>>,
}

/// Notices of changed jobs.
#[derive(Debug, Clone)]
pub struct JobWatch(broadcast::Sender<Notice>);

impl Default for JobWatch {
    fn default() -> Self {
        Self(broadcast::channel(CAPACITY).0)
    }
}

impl JobWatch {
    /// Says that `job_id` changed.
    pub fn changed(&self, job_id: Uuid) {
        self.send(job_id, None);
    }

    /// Says that `job_id` succeeded with an answer the upstream gave under `request_id`.
    pub fn answered(&self, job_id: Uuid, request_id: Option<String>) {
        self.send(job_id, request_id.map(Arc::from));
    }

    fn send(&self, job_id: Uuid, request_id: Option<Arc<str>>) {
        // Nobody waiting is fine.
        let _ = self.0.send(Notice { job_id, request_id });
    }

    /// Starts listening; subscribe before reading the job, so no change is missed.
    pub fn subscribe(&self) -> Watcher {
        Watcher(self.0.subscribe())
    }
}

/// One waiter's view of the notices.
#[derive(Debug)]
pub struct Watcher(broadcast::Receiver<Notice>);

impl Watcher {
    /// Waits until `job_id` may have changed (its notice, or notices missed); answers the
    /// upstream's request id when the notice carried one.
    pub async fn changed(&mut self, job_id: Uuid) -> Option<Arc<str>> {
        loop {
            match self.0.recv().await {
                Ok(notice) if notice.job_id == job_id => return notice.request_id,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return None,
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    }
}
