//! A pool connection held by one serial writer across its uses.
//!
//! sqlx checks a pooled connection with a round trip (`ping`) when it is acquired
//! (`test_before_acquire`) and again, always, when it is released. A writer that acquires
//! its connection for every batch, as intake's single writer did, waits for both around
//! each statement: three round trips instead of one, and three wake-ups of its database
//! backend. A [`HeldConnection`] keeps the connection between batches instead. It checks it
//! only after it sat idle for [`IDLE_CHECK`] (a database restarted while nobody wrote would
//! otherwise fail the next batch), and its writer discards it after an error that may
//! have broken it, so the next use gets a fresh connection from the pool. [`Spare`] keeps
//! them for a batcher's writers, which take one per batch and put it back after.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use sqlx::{Connection, PgConnection, PgPool, Postgres, pool::PoolConnection};

use crate::store::StoreError;

/// How long a held connection may sit unused before its next use checks it first.
pub(super) const IDLE_CHECK: Duration = Duration::from_secs(1);

/// One writer's connection, held between its uses.
#[derive(Debug)]
pub(super) struct HeldConnection {
    pool: PgPool,
    /// The connection, and when it was last handed out.
    held: Option<(PoolConnection<Postgres>, Instant)>,
}

impl HeldConnection {
    /// Nothing held yet: the first [`HeldConnection::get`] acquires from `pool`.
    pub(super) fn new(pool: PgPool) -> Self {
        Self { pool, held: None }
    }

    /// The held connection, checked first if it sat idle for [`IDLE_CHECK`] (and replaced
    /// if the check failed), or a new one from the pool.
    pub(super) async fn get(&mut self) -> Result<&mut PgConnection, StoreError> {
        let broken = match &mut self.held {
            Some((connection, last_used)) if last_used.elapsed() >= IDLE_CHECK => {
                connection.ping().await.is_err()
            }
            _ => false,
        };
        if broken {
            tracing::info!("a held database connection broke while idle; taking another");
            self.discard();
        }
        if self.held.is_none() {
            self.held = Some((self.pool.acquire().await?, Instant::now()));
        }
        let (connection, last_used) = self.held.as_mut().expect("held or just acquired");
        *last_used = Instant::now();
        Ok(&mut **connection)
    }

    /// Gives the connection back to the pool (whose release check closes it if broken).
    pub(super) fn discard(&mut self) {
        self.held = None;
    }
}

/// The held connections of a batcher's writers: a writer takes one for a batch and puts it
/// back after, so each of several writers works on a connection of its own.
#[derive(Debug, Clone)]
pub(super) struct Spare {
    pool: PgPool,
    spare: Arc<Mutex<Vec<HeldConnection>>>,
}

impl Spare {
    /// None yet: connections come from `pool` as writers first need them.
    pub(super) fn new(pool: PgPool) -> Self {
        Self {
            pool,
            spare: Arc::default(),
        }
    }

    /// A spare held connection, or a new one (which acquires on first use).
    pub(super) fn take(&self) -> HeldConnection {
        self.spare
            .lock()
            .expect("the spare connections are never poisoned")
            .pop()
            .unwrap_or_else(|| HeldConnection::new(self.pool.clone()))
    }

    /// Keeps `held` for the next batch.
    pub(super) fn put(&self, held: HeldConnection) {
        self.spare
            .lock()
            .expect("the spare connections are never poisoned")
            .push(held);
    }
}
