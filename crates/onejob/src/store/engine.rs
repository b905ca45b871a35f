//! The runtime services of a store that are the same on every database, made in one place
//! and held once per store: the settled jobs kept for replays (`settled.rs`) and the queues
//! that check send fences and group-commit acknowledgements and completions
//! (`grouped.rs`).
//!
//! A database's store ([`super::backend::Backend`]) holds one [`Services`] and hands it out
//! ([`super::backend::Backend::services`]); what it supplies is only what differs: the pools
//! the queues run on, whether a group is written tenant by tenant (a distributed database),
//! and who is woken when a job becomes due. Its dialect (`dialect.rs`) says how the queues'
//! statements are spelled, bound and read.

use std::time::Duration;

use sqlx::Pool;

use super::{
    Acknowledged, Completion,
    backend::Backend,
    batch::Batcher,
    grouped::{Fence, Writer, fences},
    settled::Settled,
    transitions::{Ack, Offer},
};
use crate::store::bound::Bound;

/// The runtime services one store holds (see the module doc).
#[derive(Debug)]
pub(crate) struct Services {
    /// Settled jobs kept for replays.
    pub(crate) settled: Settled,
    /// Send fences, checked many at once.
    pub(crate) fences: Batcher<Fence, bool>,
    /// Group commit of acknowledgements.
    pub(crate) acks: Batcher<Ack, Acknowledged>,
    /// Group commit of completions.
    pub(crate) offers: Batcher<Offer, Completion>,
}

impl Services {
    /// Starts the services of a store of backend `B` (inside a Tokio runtime: the queues'
    /// writers are tasks): fences checked on `readers` within `bound`, acknowledgements and
    /// completions group-committed through `writer`, and replays of jobs retention may
    /// delete (`finished_after`) never answered from memory.
    pub(crate) fn start<B: Backend>(
        readers: Pool<B::Db>,
        bound: Bound,
        writer: &Writer<B>,
        finished_after: Option<Duration>,
    ) -> Self {
        Self {
            settled: Settled::new(finished_after),
            fences: fences::<B>(readers, bound),
            acks: writer.batcher(),
            offers: writer.batcher(),
        }
    }
}
