//! In-process notice that a job changed (an attempt ended, or it was resolved or
//! cancelled), so a gateway caller waiting for its job answers at once instead of at its
//! next poll. A notice of an answer just won carries the answer (the result the store now
//! holds), so the caller answers without reading the job back. Callers still poll the store
//! as a fallback: a job worked by another process sends nothing here.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;
use uuid::Uuid;

/// Room for notices not yet read by a slow waiter; one that falls behind just looks again.
const CAPACITY: usize = 1024;

/// One notice: which job changed, and for an answer just won, the answer.
#[derive(Debug, Clone)]
struct Notice {
    job_id: Uuid,
    won: Option<Won>,
}

/// An answer just won: the job's result, written, and the upstream's id of the request that
/// made it (its `x-request-id`), which the gateway passes on to the caller.
#[derive(Debug, Clone)]
pub struct Won {
    /// The result the job now holds.
    pub result: Option<Arc<Value>>,
    /// The upstream's request id.
    pub request_id: Option<Arc<str>>,
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
        self.send(Notice { job_id, won: None });
    }

    /// Says that `job_id` succeeded with `result` (where the sender has it at hand), an
    /// answer the upstream gave under `request_id`.
    pub fn answered(&self, job_id: Uuid, result: Option<Arc<Value>>, request_id: Option<String>) {
        let won = Won {
            result,
            request_id: request_id.map(Arc::from),
        };
        self.send(Notice {
            job_id,
            won: Some(won),
        });
    }

    fn send(&self, notice: Notice) {
        // Nobody waiting is fine.
        let _ = self.0.send(notice);
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
    /// answer it won, when the notice said so.
    pub async fn changed(&mut self, job_id: Uuid) -> Option<Won> {
        loop {
            match self.0.recv().await {
                Ok(notice) if notice.job_id == job_id => return notice.won,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return None,
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    }
}
