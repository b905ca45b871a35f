//! Database connections checked only after they sat idle: held by one serial writer across
//! its uses ([`HeldConnection`]), or handed out by the shared pool ([`checked_after_idle`]).
//!
//! sqlx checks a pooled connection with a round trip (`ping`) when it is acquired
//! (`test_before_acquire`) and again, always, when it is released. A writer that acquires
//! its connection for every batch, as intake's single writer did, waits for both around
//! each statement: three round trips instead of one, and three wake-ups of its database
//! backend. A [`HeldConnection`] keeps the connection between batches instead. It checks it
//! only after it sat idle for [`IDLE_CHECK`] (a database restarted while nobody wrote would
//! otherwise fail the next batch), and discards it after an error that may have broken it
//! ([`HeldConnection::run`], [`HeldConnection::discard_if_broken`]), so the next use gets a
//! fresh connection from the pool. Each use is bounded in time (`store/bound.rs`: a use that
//! runs out discards the connection too), and a connection taken before the pools last
//! moved to another host (a failover) is not used again. [`Spare`] keeps them for a
//! batcher's writers, which take one per batch and put it back after.
//!
//! The shared pool, whose connections many tasks take in turn, applies the same rule on
//! acquire ([`checked_after_idle`]): a connection is pinged only if it sat idle in the pool
//! for [`IDLE_CHECK`], instead of on every acquire. (The check on release is sqlx's own and
//! always runs.)

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use sqlx::{Connection, PgConnection, PgPool, Postgres, postgres::PgPoolOptions};

use crate::store::{
    StoreError,
    bound::{Bound, Bounded},
};
use onejob_pg_connect::Switches;

/// How long a held connection may sit unused before its next use checks it first.
pub(in crate::store::postgres) const IDLE_CHECK: Duration = Duration::from_secs(1);

/// `options` with the acquire check of [`IDLE_CHECK`]: a connection idle in the pool for
/// less is handed out unchecked, one idle for longer is pinged first and, if that fails,
/// closed for another. With `switches`, a connection opened before the pool last moved to
/// another host (a failover, [`super::hosts`]) is closed unchecked.
pub(in crate::store::postgres) fn checked_after_idle(
    options: PgPoolOptions,
    switches: Option<Arc<Switches>>,
) -> PgPoolOptions {
    options
        .test_before_acquire(false)
        .before_acquire(move |connection, meta| {
            let outdated = switches
                .as_ref()
                .is_some_and(|switches| switches.outdated(meta.age));
            Box::pin(async move {
                if outdated {
                    return Ok(false);
                }
                if meta.idle_for < IDLE_CHECK {
                    return Ok(true);
                }
                Ok(connection.ping().await.is_ok())
            })
        })
}

/// One writer's connection, held between its uses, each bounded ([`Bound`]).
#[derive(Debug)]
pub(in crate::store::postgres) struct HeldConnection {
    pool: PgPool,
    bound: Bound,
    /// When the pools last moved to another host (a failover), if they follow hosts.
    switches: Option<Arc<Switches>>,
    /// The connection, when it was taken from the pool, and when it was last used.
    held: Option<Held>,
}

/// A held connection and its times.
#[derive(Debug)]
struct Held {
    connection: Bounded<Postgres>,
    taken: Instant,
    last_used: Instant,
}

impl HeldConnection {
    /// Nothing held yet: the first use acquires from `pool`; each use is bounded by `bound`,
    /// and a connection taken before the pools last moved (`switches`) is not used again.
    pub(in crate::store::postgres) fn new(
        pool: PgPool,
        bound: Bound,
        switches: Option<Arc<Switches>>,
    ) -> Self {
        Self {
            pool,
            bound,
            switches,
            held: None,
        }
    }

    /// The held connection, ready for a use: checked first if it sat idle for
    /// [`IDLE_CHECK`] (and replaced if the check failed), replaced if it was taken before
    /// the pools moved to another host, or a new one from the pool.
    async fn ready(&mut self) -> Result<&mut Bounded<Postgres>, StoreError> {
        let moved = match (&self.held, &self.switches) {
            (Some(held), Some(switches)) => switches.outdated(held.taken.elapsed()),
            _ => false,
        };
        if moved {
            tracing::info!("the database moved; a held connection to the old host is dropped");
            self.discard();
        }
        let broken = match &mut self.held {
            Some(held) if held.last_used.elapsed() >= IDLE_CHECK => held
                .connection
                .run("a ping", async |connection| Ok(connection.ping().await?))
                .await
                .is_err(),
            _ => false,
        };
        if broken {
            tracing::info!("a held database connection broke while idle; taking another");
            self.discard();
        }
        if self.held.is_none() {
            let now = Instant::now();
            self.held = Some(Held {
                connection: Bounded::acquire(&self.pool, &self.bound).await?,
                taken: now,
                last_used: now,
            });
        }
        let held = self.held.as_mut().expect("held or just acquired");
        held.last_used = Instant::now();
        Ok(&mut held.connection)
    }

    /// Runs `work` (one statement, or several that must share the connection) on the held
    /// connection within the bound, and discards the connection if that failed in a way that
    /// may have broken it.
    pub(in crate::store::postgres) async fn run<T>(
        &mut self,
        work: impl AsyncFnOnce(&mut PgConnection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let result = match self.ready().await {
            Ok(connection) => connection.run("a statement", work).await,
            Err(error) => Err(error),
        };
        if let Err(error) = &result {
            self.discard_if_broken(error);
        }
        result
    }

    /// Discards the connection if `error` may have broken it (a retryable error: the
    /// database unavailable, the connection lost, the server read-only after a failover, a
    /// call that ran out of time), so the next use gets a fresh one.
    pub(in crate::store::postgres) fn discard_if_broken(&mut self, error: &StoreError) {
        if error.is_retryable() {
            self.discard();
        }
    }

    /// Closes the connection instead of giving it back to the pool: one on a server that
    /// turned read-only still answers the pool's release check, and must not be reused.
    fn discard(&mut self) {
        if let Some(held) = self.held.take()
            && let Some(mut connection) = held.connection.into_pooled()
        {
            connection.close_on_drop();
        }
    }
}

/// The held connections of a batcher's writers: a writer takes one for a batch and puts it
/// back after, so each of several writers works on a connection of its own.
#[derive(Debug, Clone)]
pub(in crate::store::postgres) struct Spare {
    pool: PgPool,
    bound: Bound,
    switches: Option<Arc<Switches>>,
    spare: Arc<Mutex<Vec<HeldConnection>>>,
}

impl Spare {
    /// None yet: connections come from `pool` as writers first need them (see
    /// [`HeldConnection::new`] for `bound` and `switches`).
    pub(in crate::store::postgres) fn new(
        pool: PgPool,
        bound: Bound,
        switches: Option<Arc<Switches>>,
    ) -> Self {
        Self {
            pool,
            bound,
            switches,
            spare: Arc::default(),
        }
    }

    /// A spare held connection, or a new one (which acquires on first use).
    pub(in crate::store::postgres) fn take(&self) -> HeldConnection {
        self.spare
            .lock()
            .expect("the spare connections are never poisoned")
            .pop()
            .unwrap_or_else(|| {
                HeldConnection::new(self.pool.clone(), self.bound.clone(), self.switches.clone())
            })
    }

    /// Keeps `held` for the next batch.
    pub(in crate::store::postgres) fn put(&self, held: HeldConnection) {
        self.spare
            .lock()
            .expect("the spare connections are never poisoned")
            .push(held);
    }
}

#[cfg(test)]
mod tests {
    use sqlx::{Connection, PgConnection, postgres::PgPoolOptions};

    use super::{IDLE_CHECK, checked_after_idle};

    /// The test server's `postgres` database (nothing is written to it).
    fn url() -> String {
        std::env::var("ONEJOB_TEST_POSTGRES")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
    }

    /// A pool connection whose backend was terminated while it sat idle (as a database
    /// restart would) is checked on its next acquire and replaced, so the caller's query
    /// runs; without the check it would get the broken connection and fail.
    #[tokio::test]
    async fn a_connection_broken_while_idle_in_the_pool_is_replaced() {
        let pool = checked_after_idle(PgPoolOptions::new().max_connections(1), None)
            .connect(&url())
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL is required for the tests: {e}"));
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&pool)
            .await
            .unwrap();
        let mut admin = PgConnection::connect(&url()).await.unwrap();
        let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .fetch_one(&mut admin)
            .await
            .unwrap();
        assert!(terminated);
        tokio::time::sleep(IDLE_CHECK + std::time::Duration::from_millis(200)).await;
        let other: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&pool)
            .await
            .expect("the broken connection was handed out");
        assert_ne!(other, pid);
        admin.close().await.unwrap();
        pool.close().await;
    }
}
