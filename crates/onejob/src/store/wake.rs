//! The wake-up signal of a process's workers, and what it says woke them: new jobs only, or
//! anything else that may have made a job due.
//!
//! A wake-up for new jobs alone changes nothing else that is due: the worker loop starts the
//! new jobs' first attempts, and keeps what its last look at the other due work found (the
//! time the next one is due) instead of asking the database again. Every other wake-up (a
//! retry or a recovery scheduled, another node's change, a wait that timed out) makes it
//! look again. Wake-ups coalesce: a wait returns [`Woken::Anything`] if any of the wake-ups
//! since the last wait was one for anything.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use tokio::sync::Notify;

/// What woke a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// Only new jobs were created since the last wait.
    NewJobs,
    /// Anything may have become due, or the wait timed out.
    Anything,
}

/// A process's wake-up signal for its workers.
#[derive(Debug, Clone, Default)]
pub struct WorkSignal {
    notify: Arc<Notify>,
    /// Whether a wake-up for anything came since the last wait returned.
    anything: Arc<AtomicBool>,
}

impl WorkSignal {
    /// Wakes a worker for new jobs.
    pub fn new_jobs(&self) {
        self.notify.notify_one();
    }

    /// Wakes a worker for anything that may have become due.
    pub fn anything(&self) {
        self.anything.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    /// Waits for a wake-up, or `max_wait` (which counts as [`Woken::Anything`]).
    pub async fn wait(&self, max_wait: Duration) -> Woken {
        let woken = tokio::time::timeout(max_wait, self.notify.notified()).await;
        // Swapped after the wait, whatever ended it: a wake-up for anything that comes while
        // the worker is busy is seen at its next wait, never lost.
        let anything = self.anything.swap(false, Ordering::AcqRel);
        if woken.is_err() || anything {
            Woken::Anything
        } else {
            Woken::NewJobs
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Woken, WorkSignal};

    const SOON: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn a_wake_up_for_new_jobs_says_so() {
        let signal = WorkSignal::default();
        signal.new_jobs();
        assert_eq!(signal.wait(SOON).await, Woken::NewJobs);
    }

    #[tokio::test]
    async fn a_wake_up_for_anything_wins_over_new_jobs_folded_with_it() {
        for order in [true, false] {
            let signal = WorkSignal::default();
            if order {
                signal.new_jobs();
                signal.anything();
            } else {
                signal.anything();
                signal.new_jobs();
            }
            assert_eq!(signal.wait(SOON).await, Woken::Anything);
        }
    }

    #[tokio::test]
    async fn a_wait_that_times_out_is_for_anything() {
        let signal = WorkSignal::default();
        assert_eq!(
            signal.wait(Duration::from_millis(10)).await,
            Woken::Anything
        );
    }

    /// A wake-up for anything that comes after a wait for new jobs was woken, before it
    /// returned, is not lost: the next wait sees it.
    #[tokio::test]
    async fn a_wake_up_for_anything_while_busy_is_seen_next() {
        let signal = WorkSignal::default();
        signal.new_jobs();
        assert_eq!(signal.wait(SOON).await, Woken::NewJobs);
        signal.anything();
        assert_eq!(signal.wait(SOON).await, Woken::Anything);
    }
}
