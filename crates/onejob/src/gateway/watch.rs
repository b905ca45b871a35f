//! In-process notice that a job changed (an attempt ended, or it was resolved or
//! cancelled), so a gateway caller waiting for its job answers at once instead of at its
//! next poll. Callers still poll the store as a fallback: a job worked by another process
//! sends nothing here.

use tokio::sync::broadcast;
use uuid::Uuid;

/// Room for notices not yet read by a slow waiter; one that falls behind just looks again.
const CAPACITY: usize = 1024;

/// Notices of changed jobs.
#[derive(Debug, Clone)]
pub struct JobWatch(broadcast::Sender<Uuid>);

impl Default for JobWatch {
    fn default() -> Self {
        Self(broadcast::channel(CAPACITY).0)
    }
}

impl JobWatch {
    /// Says that `job_id` changed.
    pub fn changed(&self, job_id: Uuid) {
        // Nobody waiting is fine.
        let _ = self.0.send(job_id);
    }

    /// Starts listening; subscribe before reading the job, so no change is missed.
    pub fn subscribe(&self) -> Watcher {
        Watcher(self.0.subscribe())
    }
}

/// One waiter's view of the notices.
#[derive(Debug)]
pub struct Watcher(broadcast::Receiver<Uuid>);

impl Watcher {
    /// Waits until `job_id` may have changed (its notice, or notices missed).
    pub async fn changed(&mut self, job_id: Uuid) {
        loop {
            match self.0.recv().await {
                Ok(id) if id == job_id => return,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    }
}
