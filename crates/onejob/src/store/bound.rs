//! Bounds in time on the database's statements and commits, the connections they run on,
//! and what a store remembers of the ones that ran out.
//!
//! A PostgreSQL host can stop committing without going away: an old primary left running
//! after its synchronous standby was promoted away (or lost) accepts sessions and statements,
//! and every commit then waits for a standby that will never confirm it. `statement_timeout`
//! does not end that wait (the server stops the statement's timer before the commit), and
//! TCP sees nothing wrong, so without a bound of its own a caller would wait for ever. Every
//! statement and commit on PostgreSQL therefore runs under a [`Bound`] (`write_timeout` in
//! [`super::StoreOptions`]). One that runs out:
//!
//! * answers [`StoreError::TimedOut`]: retryable, so HTTP answers `503` with `Retry-After`.
//!   The write's outcome is unknown (the commit may still land on that server), so it is
//!   never acknowledged; the client's retry under the same key finds the job where the
//!   writes go by then, or creates it there;
//! * discards its connection ([`Bounded`]): a reply may still arrive on it, so it is closed,
//!   never handed out again (sqlx's pool would check it on release by waiting for that
//!   reply, holding a pool slot for as long as the commit hangs);
//! * is noted in the store's [`Stalls`]: `/readyz` answers `503` while this node cannot
//!   commit, and the host follower (`onejob-pg-connect`, `hosts.rs`) checks its host at once.
//!
//! A call that meets a read-only server (SQLSTATE 25006: a standby, or the old primary back
//! as one after a failover) is noted in the same [`Stalls`], those of the store whose call
//! it was and no other: that store's pools then close the connections opened before it
//! instead of handing them out again, and its host follower checks its host at once. Two
//! stores in one process (a primary's and a standby's, or two tests') never see each
//! other's notes.
//!
//! A call in flight when the host follower moves the store to another host (a failover) is
//! given up at once, the same way ([`StoreError::Moved`], its connection discarded): it
//! would otherwise hold its writer for the rest of its bound on a host no write goes to
//! any more, while the promoted host waits.
//!
//! SQLite runs unbounded ([`Bound::unbounded`]): its statements never wait on a network, and
//! its lock waits are bounded by `busy_timeout`.

use std::{sync::Arc, time::Duration};

use sqlx::{Database, Pool, pool::PoolConnection};
use tokio::sync::watch;

use super::StoreError;

/// How long a statement or a commit may take on PostgreSQL by default.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) use onejob_pg_connect::Stalls;

/// How long one statement or commit of a store may take (none: unbounded), and where the
/// ones that ran out are noted.
#[derive(Debug, Clone)]
pub(crate) struct Bound {
    within: Option<Duration>,
    stalls: Arc<Stalls>,
    /// Told when the store moves to another host (`onejob-pg-connect`, `hosts.rs`), if it follows hosts.
    moved: Option<watch::Receiver<usize>>,
}

impl Bound {
    /// Calls end within `within`.
    pub(crate) fn within(within: Duration) -> Self {
        Self {
            within: Some(within),
            stalls: Arc::default(),
            moved: None,
        }
    }

    /// Calls are not bounded (SQLite).
    pub(crate) fn unbounded() -> Self {
        Self {
            within: None,
            stalls: Arc::default(),
            moved: None,
        }
    }

    /// The same bound, whose calls are given up when `moved` is told the store moved to
    /// another host.
    pub(crate) fn following(self, moved: watch::Receiver<usize>) -> Self {
        Self {
            moved: Some(moved),
            ..self
        }
    }

    /// The same stalls, with calls bounded by `within` instead (a probe that must answer
    /// sooner than a statement may take).
    pub(crate) fn with(&self, within: Duration) -> Self {
        Self {
            within: Some(within),
            ..self.clone()
        }
    }

    /// The bound, if calls are bounded.
    pub(crate) fn limit(&self) -> Option<Duration> {
        self.within
    }

    /// The stalls of this store.
    pub(crate) fn stalls(&self) -> &Arc<Stalls> {
        &self.stalls
    }

    /// Runs `work` (`what`: "a statement", "a commit"…) within the bound. When it runs out,
    /// the stall is noted and the answer is [`StoreError::TimedOut`]; when the store moves to
    /// another host meanwhile, [`StoreError::Moved`]. Either way the caller must discard the
    /// connection `work` ran on ([`Bounded`] does). When `work` met a read-only server, that
    /// is noted ([`Stalls::note_read_only`]).
    pub(crate) async fn run<T>(
        &self,
        what: &'static str,
        work: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let result = self.run_within(what, work).await;
        if let Err(error) = &result
            && error.met_read_only()
        {
            self.stalls.note_read_only();
        }
        result
    }

    /// [`Bound::run`], without noting a read-only server.
    async fn run_within<T>(
        &self,
        what: &'static str,
        work: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let Some(within) = self.within else {
            return work.await;
        };
        let mut moved = self.moved.clone();
        if let Some(moved) = &mut moved {
            moved.mark_unchanged();
        }
        let moved = async {
            let told = match &mut moved {
                Some(moved) => moved.changed().await.is_ok(),
                None => false,
            };
            if !told {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            bounded = tokio::time::timeout(within, work) => match bounded {
                Ok(result) => result,
                Err(_) => {
                    self.stalls.note();
                    Err(StoreError::TimedOut { what, within })
                }
            },
            () = moved => Err(StoreError::Moved { what }),
        }
    }
}

/// A pooled connection whose every use is bounded, and which is discarded (closed, its pool
/// slot freed, never handed out again) when a use ran out of time or was abandoned halfway
/// (its caller dropped while a statement was in flight).
#[derive(Debug)]
pub(crate) struct Bounded<DB: Database> {
    connection: Option<PoolConnection<DB>>,
    /// A use is in flight (so a drop now abandons it halfway).
    busy: bool,
    bound: Bound,
}

impl<DB: Database> Bounded<DB> {
    /// A connection from `pool` (the pool's `acquire_timeout` bounds the wait), used within
    /// `bound`.
    pub(crate) async fn acquire(pool: &Pool<DB>, bound: &Bound) -> Result<Self, StoreError> {
        Ok(Self {
            connection: Some(pool.acquire().await?),
            busy: false,
            bound: bound.clone(),
        })
    }

    /// Runs `work` on the connection within the bound; discards the connection if `work`
    /// ran out of time. Fails at once once the connection was discarded.
    pub(crate) async fn run<T>(
        &mut self,
        what: &'static str,
        work: impl AsyncFnOnce(&mut DB::Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if self.busy {
            // A use before this one was abandoned halfway: its reply may still come.
            self.discard();
        }
        let connection = self.connection.as_mut().ok_or(StoreError::Discarded)?;
        self.busy = true;
        let result = self.bound.run(what, work(&mut **connection)).await;
        self.busy = false;
        if matches!(
            result,
            Err(StoreError::TimedOut { .. } | StoreError::Moved { .. })
        ) {
            self.discard();
        }
        result
    }

    /// The connection, when it is neither discarded nor in use.
    pub(crate) fn idle(&mut self) -> Option<&mut DB::Connection> {
        match &mut self.connection {
            Some(connection) if !self.busy => Some(&mut **connection),
            _ => None,
        }
    }

    /// The pooled connection itself (to close it gracefully), unless it was discarded or a
    /// use of it was abandoned halfway (then it is discarded now).
    pub(crate) fn into_pooled(mut self) -> Option<PoolConnection<DB>> {
        if self.busy {
            self.discard();
        }
        self.connection.take()
    }

    /// Closes the connection now and frees its pool slot.
    fn discard(&mut self) {
        if let Some(connection) = self.connection.take() {
            // Detached, the pool forgets it (and may open another in its place); dropped,
            // its socket closes without waiting for anything the server still owes.
            drop(connection.detach());
        }
    }
}

impl<DB: Database> Drop for Bounded<DB> {
    fn drop(&mut self) {
        if self.busy {
            self.discard();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::watch;

    use super::{Bound, StoreError};

    /// A call that never answers: what a commit on a wedged host does.
    async fn hung() -> Result<(), StoreError> {
        std::future::pending().await
    }

    #[tokio::test]
    async fn a_call_that_runs_out_is_timed_out_and_noted_as_a_stall() {
        let bound = Bound::within(Duration::from_millis(50));
        let error = bound.run("a commit", hung()).await.unwrap_err();
        assert!(
            matches!(
                error,
                StoreError::TimedOut {
                    what: "a commit",
                    ..
                }
            ),
            "{error:?}"
        );
        assert!(error.is_retryable() && error.is_unclear());
        assert!(bound.stalls().within(Duration::from_secs(3600)).is_some());
    }

    /// A call in flight on the old host when the store moves is given up at once (without
    /// the move it would wait out its hour), and is no stall: the node can commit elsewhere.
    #[tokio::test]
    async fn a_call_in_flight_when_the_store_moves_is_given_up() {
        let (mover, moved) = watch::channel(0);
        let bound = Bound::within(Duration::from_secs(3600)).following(moved);
        let call = tokio::spawn({
            let bound = bound.clone();
            async move { bound.run("a statement", hung()).await }
        });
        // Moved again and again, so that one move comes after the call began, however late
        // its task runs.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        for n in 1.. {
            mover.send_replace(n);
            if call.is_finished() {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the call was not given up on the move"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let error = call.await.unwrap().unwrap_err();
        assert!(matches!(error, StoreError::Moved { .. }), "{error:?}");
        assert!(error.is_retryable() && error.is_unclear());
        assert!(bound.stalls().within(Duration::from_secs(3600)).is_none());
        // A call begun after the move is not given up for it.
        assert!(bound.run("a statement", async { Ok(()) }).await.is_ok());
    }
}
