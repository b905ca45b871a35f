//! Writes on PostgreSQL that nobody waits for: `replayed` events and the dispatch wake-up.
//!
//! Both go through a small pool of their own whose sessions run with
//! `synchronous_commit = off`, so their commits never wait for a WAL flush and never hold
//! up the durable commits of intake (and with `plan_cache_mode = force_generic_plan`, as
//! intake's pool, for the same reason: see [`super::intake`]), each writer on a connection it
//! holds between writes ([`super::connect::held`]: the pool's checks on acquire and release cost two
//! round trips per write):
//!
//! * **`replayed` events.** A replay's answer points at a job already durable; its event is
//!   queued here and written in batches after the answer went out. A crash (or a failed
//!   write, which is logged and counted) can lose the last few; it can lose no job and no
//!   result. An event whose job retention deleted meanwhile is skipped, and one bad event
//!   never fails the others of its batch (they are written one by one after a failure). The
//!   queue is bounded ([`batch::EVENT_QUEUE`]): when it is full, [`Relaxed::log`] gives the events
//!   back and the caller writes them itself, so a database that stopped taking writes slows
//!   replays down instead of filling memory.
//! * **The dispatch wake-up.** `NOTIFY` inside a transaction takes a cluster-wide lock from
//!   its pre-commit until its commit record is flushed, so notifying transactions cannot share
//!   a flush: with the notification in the intake transaction, every intake batch paid a
//!   flush of its own (bench/journal.md). So the intake batch commits without it and
//!   then calls [`Relaxed::wake_workers`]; one task sends `pg_notify` after it, coalescing
//!   requests that arrive while a notification is in flight. A wake-up lost in a crash
//!   between the commit and the notification is found by the workers' poll fallback. A
//!   worker in the same process is woken at once as well, without waiting for the
//!   notification's way through PostgreSQL and back; the notification carries the store's
//!   id, by which its own listener knows to drop it ([`super::wake`]).

use std::sync::Arc;

use futures::FutureExt;
use sqlx::{PgConnection, PgPool};
use tokio::sync::mpsc;

use super::{
    DISPATCH_CHANNEL, Variant,
    connect::{
        Hosts,
        held::{HeldConnection, Spare},
        side_pool, tcp,
    },
    intake::insert_events,
};
use crate::store::{
    NewEvent, StoreError, WorkSignal,
    batch::{self, Batcher, WriteBatch},
    bound::Bound,
};

/// Connections of the relaxed pool: one for events, one for notifications.
const CONNECTIONS: u32 = 2;

/// Most events written per statement.
const MAX_EVENTS: usize = 1024;

/// The unawaited writers of one [`super::PgStore`].
#[derive(Debug, Clone)]
pub(super) struct Relaxed {
    events: Arc<Batcher<NewEvent, ()>>,
    /// Room for one pending wake-up: a full channel means one is already on its way.
    wake: mpsc::Sender<()>,
    /// The workers of this process ([`super::wake::Wake::signal`]).
    local: WorkSignal,
}

impl Relaxed {
    /// Starts the writers on a relaxed copy of `pool`'s connection settings (connections
    /// open on first use), following `hosts` if given, each write bounded by `bound`;
    /// `local` wakes this process's workers, and the notifications for the others carry
    /// `sender`; on Citus (`variant`), events are written one statement each (on its job's
    /// shard).
    pub(super) fn spawn(
        pool: &PgPool,
        hosts: Option<&Arc<Hosts>>,
        bound: &Bound,
        local: WorkSignal,
        sender: Arc<str>,
        variant: Variant,
    ) -> Self {
        let relaxed = side_pool(
            tcp::pool_options(),
            pool,
            hosts,
            CONNECTIONS,
            &[
                ("synchronous_commit", "off"),
                ("plan_cache_mode", "force_generic_plan"),
            ],
        );
        let switches = hosts.map(|hosts| hosts.switches());
        let spare = Spare::new(relaxed.clone(), bound.clone(), switches.clone());
        let write: WriteBatch<NewEvent, ()> = Arc::new(move |events| {
            let mut held = spare.take();
            let spare = spare.clone();
            async move {
                let written = held
                    .run(async |connection| {
                        Ok(match variant {
                            Variant::Citus => super::citus::write_events(connection, &events).await,
                            Variant::Single => write_events(connection, &events).await,
                        })
                    })
                    .await;
                spare.put(held);
                match written {
                    Ok(results) => results,
                    Err(error) => vec![Err(error); events.len()],
                }
            }
            .boxed()
        });
        let (wake, requests) = mpsc::channel(1);
        let notifier = HeldConnection::new(relaxed, bound.clone(), switches);
        tokio::spawn(notify_loop(notifier, requests, sender));
        Self {
            events: Arc::new(Batcher::bounded(
                "replayed event",
                1,
                MAX_EVENTS,
                batch::EVENT_QUEUE,
                write,
            )),
            wake,
            local,
        }
    }

    /// Queues events to be written after the caller answered; gives back those that found
    /// the queue full (or its writer gone), for the caller to write itself.
    #[must_use = "events the queue could not take are the caller's to write"]
    pub(super) fn log(&self, events: Vec<NewEvent>) -> Vec<NewEvent> {
        let mut refused = Vec::new();
        for event in events {
            if let Err(event) = self.events.enqueue(event) {
                refused.push(event);
            }
        }
        refused
    }

    /// Wakes this process's workers for new jobs, and asks for one `NOTIFY onejob_dispatch`
    /// after this call for every other process's.
    pub(super) fn wake_workers(&self) {
        self.local.new_jobs();
        let _ = self.wake.try_send(());
    }
}

/// Writes `events` with one statement, skipping those whose job is gone; if that fails for
/// another reason than the connection, writes them one by one, so that one bad event fails
/// alone. One result per event.
pub(super) async fn write_events(
    connection: &mut PgConnection,
    events: &[NewEvent],
) -> Vec<Result<(), StoreError>> {
    match insert_events(&mut *connection, events).await {
        Ok(()) => vec![Ok(()); events.len()],
        Err(error) if events.len() == 1 || error.is_retryable() => vec![Err(error); events.len()],
        Err(_) => {
            let mut results = Vec::with_capacity(events.len());
            for event in events {
                results.push(insert_events(&mut *connection, std::slice::from_ref(event)).await);
            }
            results
        }
    }
}

/// Sends one notification per wake-up request, folding the requests made while one is
/// sent, with `sender` as its payload; ends when the store is dropped.
async fn notify_loop(mut held: HeldConnection, mut requests: mpsc::Receiver<()>, sender: Arc<str>) {
    while requests.recv().await.is_some() {
        let sent = held
            .run(async |connection| {
                sqlx::query("SELECT pg_notify($1, $2)")
                    .bind(DISPATCH_CHANNEL)
                    .bind(&*sender)
                    .execute(connection)
                    .await
                    .map_err(StoreError::from)
            })
            .await;
        if let Err(error) = sent {
            tracing::warn!(%error, "dispatch notification failed; workers will poll");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use super::Relaxed;
    use crate::store::{Woken, WorkSignal, bound::Bound};

    /// A wake-up after a batch committed reaches a worker of the same process at once, not
    /// only through PostgreSQL's `NOTIFY` (the pool here never connects).
    #[tokio::test]
    async fn a_wake_up_reaches_the_workers_of_this_process_directly() {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .acquire_timeout(Duration::from_millis(10))
            .connect_lazy("postgres://nobody@127.0.0.1:9/none")
            .unwrap();
        let local = WorkSignal::default();
        let bound = Bound::within(crate::store::bound::WRITE_TIMEOUT);
        let relaxed = Relaxed::spawn(
            &pool,
            None,
            &bound,
            local.clone(),
            Arc::from("this store"),
            super::Variant::Single,
        );
        relaxed.wake_workers();
        assert_eq!(local.wait(Duration::from_secs(30)).await, Woken::NewJobs);
    }
}
