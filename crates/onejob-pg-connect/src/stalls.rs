//! What the users of one set of pools noted of their host: when a call last ran out of
//! time, when one last met a read-only server, and who waits to hear of either. The host
//! watcher ([`crate::Hosts::watch`]) checks its host at once on either, and the pools'
//! switches ([`crate::Switches`]) close connections opened before a read-only meeting.
//! Each store has its own: two stores in one process never see each other's notes.

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

use tokio::sync::Notify;

/// When a call of one store last ran out of time, when one last met a read-only server,
/// and who waits to hear of either.
#[derive(Debug, Default)]
pub struct Stalls {
    last: Mutex<Option<Instant>>,
    read_only: Mutex<Option<Instant>>,
    notice: Notify,
}

impl Stalls {
    /// Notes a call that ran out now, and wakes [`Stalls::noticed`].
    pub fn note(&self) {
        *self.last.lock().expect("never poisoned") = Some(Instant::now());
        self.notice.notify_waiters();
    }

    /// How long ago a call last ran out, if one did within `recent`.
    pub fn within(&self, recent: Duration) -> Option<Duration> {
        self.last
            .lock()
            .expect("never poisoned")
            .map(|at| at.elapsed())
            .filter(|ago| *ago < recent)
    }

    /// Notes a call that met a read-only server now, and wakes [`Stalls::noticed`].
    pub fn note_read_only(&self) {
        *self.read_only.lock().expect("never poisoned") = Some(Instant::now());
        self.notice.notify_waiters();
    }

    /// True when a call met a read-only server less than `age` ago (so a connection `age`
    /// old was opened before it).
    pub fn read_only_within(&self, age: Duration) -> bool {
        self.read_only
            .lock()
            .expect("never poisoned")
            .is_some_and(|at| at.elapsed() < age)
    }

    /// Returns at the next [`Stalls::note`] or [`Stalls::note_read_only`].
    pub async fn noticed(&self) {
        self.notice.notified().await;
    }
}
