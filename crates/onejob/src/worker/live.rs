//! The attempts this worker is running right now, each with a token that stops it.
//!
//! The heartbeat renews their leases and learns which of them belong to jobs cancelled
//! meanwhile (on any node): it fires their tokens, and their tasks drop the upstream request
//! (or stop following the task) and end the attempt `cancelled`. The lease rescuer skips
//! them: an attempt this process is still running is never rescued by it, whatever its
//! lease says (its own task makes it unknown at its deadline, or records its answer).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// The running attempts of one worker.
#[derive(Debug, Clone, Default)]
pub struct Live(Arc<Mutex<HashMap<Uuid, CancellationToken>>>);

impl Live {
    fn lock(&self) -> MutexGuard<'_, HashMap<Uuid, CancellationToken>> {
        // Nothing panics while holding the lock, so a poisoned map is still whole.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `attempt_id` as running here until the returned guard is dropped; the
    /// guard's token fires when its job is cancelled.
    pub fn enter(&self, attempt_id: Uuid) -> Running {
        let token = CancellationToken::new();
        self.lock().insert(attempt_id, token.clone());
        Running {
            live: self.clone(),
            attempt_id,
            token,
        }
    }

    /// Whether `attempt_id` is running in this worker.
    pub fn contains(&self, attempt_id: Uuid) -> bool {
        self.lock().contains_key(&attempt_id)
    }

    /// Stops the running attempts among `attempt_ids` (their jobs were cancelled).
    pub fn cancel(&self, attempt_ids: &[Uuid]) {
        let running = self.lock();
        for id in attempt_ids {
            if let Some(token) = running.get(id) {
                token.cancel();
            }
        }
    }
}

/// One attempt running in this worker; dropping it ends its registration.
#[derive(Debug)]
pub struct Running {
    live: Live,
    attempt_id: Uuid,
    token: CancellationToken,
}

impl Running {
    /// Fires when the attempt's job was cancelled.
    pub fn cancelled(&self) -> &CancellationToken {
        &self.token
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.live.lock().remove(&self.attempt_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_is_live_until_its_guard_drops_and_cancel_fires_only_its_token() {
        let live = Live::default();
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let running_a = live.enter(a);
        let running_b = live.enter(b);
        assert!(live.contains(a) && live.contains(b));
        live.cancel(&[a, Uuid::now_v7()]);
        assert!(running_a.cancelled().is_cancelled());
        assert!(!running_b.cancelled().is_cancelled());
        drop(running_a);
        assert!(!live.contains(a));
        assert!(live.contains(b));
    }
}
