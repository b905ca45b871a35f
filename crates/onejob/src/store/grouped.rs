//! Group commit of the state changes workers make most, the acknowledgements and the
//! completions of attempts: concurrent callers share one write transaction, and so one
//! durable commit, as intake's submissions do (`batch.rs`).
//!
//! A group decides each change by the rule a lone change is decided by (`transitions.rs`:
//! `acking`, `completing`), after taking its job's lock and reading its attempt, and writes
//! the decisions with one statement per step for the whole group instead of one per change
//! (the locks, the attempts' states, the compare-and-swaps with their same conditions, the
//! events). The jobs are locked in the order of their ids, in every group, so two groups
//! never wait for each other in a cycle. Every caller is answered after the commit that
//! carries its change, so nothing depends on a change before it is durable. If a group
//! fails for a reason other than the database being unavailable, or a compare-and-swap in
//! it loses to a change made between its read and its write, each of its changes is made
//! again alone, in a transaction of its own, with the lone change's retries: a bad change
//! fails alone, and a group behaves, change by change, exactly as lone changes do.
//!
//! Before that, a backend may make some of a group's changes at once ([`Change::at_once`]):
//! the most common case of a change, written with its guards in one statement that is its
//! own transaction (PostgreSQL: the completion of a job's only attempt, see
//! `postgres/completion.rs`). What it does not make, it leaves untouched, and those changes
//! go the general way.

use std::{
    collections::{HashMap, HashSet},
    future::Future,
    sync::Arc,
    time::Duration,
};

use futures::{FutureExt, StreamExt};
use sqlx::Pool;
use uuid::Uuid;

use super::{
    StoreError, WorkSignal,
    backend::{Arg, Backend, Tx, Variant, fetch_all_on},
    batch::{Batcher, WriteBatch},
    bound::Bound,
};

/// Most changes one group carries.
const MAX_GROUP: usize = 128;

/// Groups writing side by side: while one commits, the next runs its statements. (Eight
/// were slower than two on two cores: bench/journal.md.)
pub(crate) const WRITERS: usize = 2;

/// A state change that can share a transaction with others of its kind.
pub(crate) trait Change<B: Backend>: Send + Sync + 'static {
    /// What the change answers.
    type Out: Send + 'static;

    /// The attempt the change is about.
    fn attempt_id(&self) -> Uuid;

    /// The attempt's tenant, if the caller's process knows it (`tenants.rs`).
    fn tenant(&self) -> Option<&str>;

    /// The rule of each change, for all of them in one transaction that holds nothing of
    /// their jobs yet; `changes` come in the order of their jobs' ids, each with its job, and
    /// the answers in the same order. `None` (the caller rolls back) when they must be made
    /// one by one instead.
    fn apply_all<'a>(
        tx: &'a mut Tx<B>,
        changes: &'a [(Uuid, &'a Self)],
    ) -> impl Future<Output = Result<Option<Vec<Self::Out>>, StoreError>> + Send + 'a;

    /// The change made alone, in transactions of its own.
    fn alone(
        &self,
        writer: &Writer<B>,
    ) -> impl Future<Output = Result<Self::Out, StoreError>> + Send;

    /// Whether, once committed, the change may have made a job due.
    fn makes_due(&self, out: &Self::Out) -> bool;

    /// Those of `changes` the backend can make at once, in one statement and its one commit,
    /// before the others go the general way: the answer of each made, in order, and `None`
    /// for each left to the general way (nothing of it written). By default none.
    fn at_once(
        writer: &Writer<B>,
        changes: &[Self],
    ) -> impl Future<Output = Result<Vec<Option<Self::Out>>, StoreError>> + Send
    where
        Self: Sized,
    {
        let _ = writer;
        let none = changes.iter().map(|_| None).collect();
        std::future::ready(Ok(none))
    }
}

/// What a group writes through: the pool of a backend's write transactions, and how to
/// tell this process's workers that a job became due (SQLite; PostgreSQL's trigger tells
/// every node).
pub(crate) struct Writer<B: Backend> {
    pool: Pool<B::Db>,
    /// The pool of the one-statement writes of [`Change::at_once`], when they need sessions
    /// of their own (see [`Writer::at_once_on`]); else `pool`.
    at_once: Option<Pool<B::Db>>,
    bound: Bound,
    wake: Option<WorkSignal>,
    /// The variant of its dialect: on Citus, one transaction per tenant of a group (each
    /// then runs on its tenant's shard, and row locks never span shards).
    variant: Variant,
}

impl<B: Backend> Clone for Writer<B> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            at_once: self.at_once.clone(),
            bound: self.bound.clone(),
            wake: self.wake.clone(),
            variant: self.variant,
        }
    }
}

impl<B: Backend> Writer<B> {
    /// Writes through `pool` within `bound`, waking `wake` when a job became due, a group
    /// tenant by tenant when `variant` is Citus.
    pub(crate) fn new(
        pool: Pool<B::Db>,
        bound: Bound,
        wake: Option<WorkSignal>,
        variant: Variant,
    ) -> Self {
        Self {
            pool,
            at_once: None,
            bound,
            wake,
            variant,
        }
    }

    /// Runs the one-statement writes of [`Change::at_once`] on `pool` (sessions set up for
    /// them) instead of the pool of the write transactions.
    pub(crate) fn at_once_on(mut self, pool: Pool<B::Db>) -> Self {
        self.at_once = Some(pool);
        self
    }

    /// The pool the one-statement writes of [`Change::at_once`] run on.
    pub(crate) fn at_once_pool(&self) -> &Pool<B::Db> {
        self.at_once.as_ref().unwrap_or(&self.pool)
    }

    /// How long each of its statements and commits may take.
    pub(crate) fn bound(&self) -> &Bound {
        &self.bound
    }

    /// The variant of its dialect (on Citus it writes a group tenant by tenant).
    pub(crate) fn variant(&self) -> Variant {
        self.variant
    }

    /// Begins a write transaction.
    pub(crate) async fn begin(&self) -> Result<Tx<B>, StoreError> {
        Tx::begin(&self.pool, &self.bound).await
    }

    /// A queue of changes of one kind, written in shared transactions.
    pub(crate) fn batcher<C: Change<B>>(&self) -> Batcher<C, C::Out> {
        let writer = self.clone();
        let write: WriteBatch<C, C::Out> = Arc::new(move |changes| {
            let writer = writer.clone();
            async move { write_group(&writer, changes).await }.boxed()
        });
        Batcher::spawn(WRITERS, MAX_GROUP, write)
    }
}

async fn write_group<B: Backend, C: Change<B>>(
    store: &Writer<B>,
    changes: Vec<C>,
) -> Vec<Result<C::Out, StoreError>> {
    // Those the backend makes at once first; the others the general way. A failure that
    // may have left the statement's outcome unknown answers them all; any other wrote
    // nothing, and leaves them all to the general way, where a bad change fails alone.
    let made = match C::at_once(store, &changes).await {
        Ok(made) if made.len() == changes.len() => made,
        Ok(_) => changes.iter().map(|_| None).collect(),
        Err(error) if error.is_retryable() => {
            return changes.iter().map(|_| Err(error.clone())).collect();
        }
        Err(_) => changes.iter().map(|_| None).collect(),
    };
    if made.iter().all(Option::is_none) {
        return write_generally(store, changes).await;
    }
    let due = changes
        .iter()
        .zip(&made)
        .any(|(change, out)| out.as_ref().is_some_and(|out| change.makes_due(out)));
    if due && let Some(wake) = &store.wake {
        wake.anything();
    }
    let mut outs: Vec<Option<Result<C::Out, StoreError>>> = Vec::with_capacity(changes.len());
    let mut rest = Vec::new();
    let mut rest_at = Vec::new();
    for (at, (change, made)) in changes.into_iter().zip(made).enumerate() {
        match made {
            Some(out) => outs.push(Some(Ok(out))),
            None => {
                outs.push(None);
                rest.push(change);
                rest_at.push(at);
            }
        }
    }
    if !rest.is_empty() {
        for (at, out) in rest_at.into_iter().zip(write_generally(store, rest).await) {
            outs[at] = Some(out);
        }
    }
    outs.into_iter().flatten().collect()
}

/// A group written the general way: in one transaction of the changes' rules, or change by
/// change (see the module doc).
async fn write_generally<B: Backend, C: Change<B>>(
    store: &Writer<B>,
    changes: Vec<C>,
) -> Vec<Result<C::Out, StoreError>> {
    if store.variant == Variant::Citus && changes.len() > 1 {
        return write_per_tenant(store, changes).await;
    }
    let together = if changes.len() == 1 {
        None
    } else {
        match together(store, &changes).await {
            Ok(outs) => outs,
            Err(error) if error.is_retryable() => {
                return changes.iter().map(|_| Err(error.clone())).collect();
            }
            Err(_) => None,
        }
    };
    let outs = match together {
        Some(outs) => outs,
        None => {
            let mut outs = Vec::with_capacity(changes.len());
            for change in &changes {
                outs.push(change.alone(store).await);
            }
            return finish(store, &changes, outs);
        }
    };
    finish(store, &changes, outs.into_iter().map(Ok).collect())
}

/// Writes a group as one group per tenant among its changes: reads the attempts' tenants
/// first (without a lock), then each tenant's changes share a transaction,
/// [`Variant::TENANTS_AT_ONCE`] tenants at a time. An attempt not found is written alone
/// (which reports it).
async fn write_per_tenant<B: Backend, C: Change<B>>(
    store: &Writer<B>,
    changes: Vec<C>,
) -> Vec<Result<C::Out, StoreError>> {
    let attempts: Vec<Uuid> = changes.iter().map(Change::attempt_id).collect();
    // The tenants this process knows, the others read (across the shards, without a lock).
    let mut tenants: HashMap<Uuid, String> = changes
        .iter()
        .filter_map(|c| Some((c.attempt_id(), c.tenant()?.to_owned())))
        .collect();
    let unknown: Vec<Uuid> = attempts
        .iter()
        .filter(|a| !tenants.contains_key(a))
        .copied()
        .collect();
    if !unknown.is_empty() {
        let read = fetch_all_on::<B>(
            &store.pool,
            &store.bound,
            B::SQL.jobs_of,
            args![&unknown[..]],
        )
        .await
        .and_then(|rows| {
            rows.iter()
                .map(|row| Ok((B::uuid(row, "id")?, B::text(row, "tenant")?)))
                .collect::<Result<Vec<(Uuid, String)>, StoreError>>()
        });
        match read {
            Ok(read) => tenants.extend(read),
            Err(error) => return changes.iter().map(|_| Err(error.clone())).collect(),
        }
    }
    let mut groups: Vec<(Option<&String>, Vec<usize>)> = Vec::new();
    for (at, attempt) in attempts.iter().enumerate() {
        let tenant = tenants.get(attempt);
        match groups
            .iter_mut()
            .find(|(t, _)| *t == tenant && tenant.is_some())
        {
            Some((_, members)) => members.push(at),
            None => groups.push((tenant, vec![at])),
        }
    }
    let mut slots: Vec<Option<C>> = changes.into_iter().map(Some).collect();
    let groups: Vec<(Vec<usize>, Vec<C>)> = groups
        .into_iter()
        .map(|(_, members)| {
            let group = members
                .iter()
                .map(|&at| slots[at].take().expect("each change in one group"))
                .collect();
            (members, group)
        })
        .collect();
    // One tenant's group: together, as on one server (its statements name the tenant, so
    // they run on its shard); a few tenants' groups at once, each on its own connection
    // (tenants share no row, so their transactions never wait for each other).
    let single = Writer {
        variant: Variant::Single,
        ..store.clone()
    };
    let single = &single;
    let written: Vec<_> =
        futures::stream::iter(groups)
            .map(|(members, group)| async move {
                (members, Box::pin(write_generally(single, group)).await)
            })
            .buffer_unordered(Variant::TENANTS_AT_ONCE)
            .collect()
            .await;
    let mut outs: Vec<Option<Result<C::Out, StoreError>>> = slots.iter().map(|_| None).collect();
    for (members, written) in written {
        for (at, out) in members.into_iter().zip(written) {
            outs[at] = Some(out);
        }
    }
    outs.into_iter().flatten().collect()
}

/// Tells the workers when a committed change made a job due.
fn finish<B: Backend, C: Change<B>>(
    store: &Writer<B>,
    changes: &[C],
    outs: Vec<Result<C::Out, StoreError>>,
) -> Vec<Result<C::Out, StoreError>> {
    let due = changes
        .iter()
        .zip(&outs)
        .any(|(change, out)| out.as_ref().is_ok_and(|out| change.makes_due(out)));
    if due && let Some(wake) = &store.wake {
        wake.anything();
    }
    outs
}

/// All `changes` in one transaction, their jobs locked in the order of their ids; `None`
/// (nothing committed) when one of them must be made alone, an error when one failed.
async fn together<B: Backend, C: Change<B>>(
    store: &Writer<B>,
    changes: &[C],
) -> Result<Option<Vec<C::Out>>, StoreError> {
    let mut tx = store.begin().await?;
    let attempts: Vec<Uuid> = changes.iter().map(Change::attempt_id).collect();
    let known: Option<Vec<Option<&str>>> = changes.iter().map(|c| c.tenant().map(Some)).collect();
    let rows = match known {
        // Every tenant known: the read names them (on a distributed database, their shards).
        Some(tenants) => {
            let sql = B::SQL.jobs_of_in_tenants;
            tx.all(sql, &[Arg::Ids(&attempts), Arg::Texts(&tenants)])
                .await?
        }
        None => tx.all(B::SQL.jobs_of, &[Arg::Ids(&attempts)]).await?,
    };
    let mut jobs: HashMap<Uuid, Uuid> = HashMap::with_capacity(rows.len());
    for row in &rows {
        let (attempt, job) = (B::uuid(row, "id")?, B::uuid(row, "job_id")?);
        let tenant = B::text(row, "tenant")?;
        tx.remember(attempt, Some(tenant.clone()));
        tx.remember(job, Some(tenant));
        jobs.insert(attempt, job);
    }
    let mut order: Vec<(Uuid, usize)> = Vec::with_capacity(changes.len());
    for (at, attempt) in attempts.iter().enumerate() {
        let job = jobs
            .get(attempt)
            .ok_or_else(|| StoreError::Corrupt(format!("no attempt {attempt}")))?;
        order.push((*job, at));
    }
    order.sort();
    let sorted: Vec<(Uuid, &C)> = order.iter().map(|&(job, at)| (job, &changes[at])).collect();
    let Some(applied) = C::apply_all(&mut tx, &sorted).await? else {
        tx.rollback().await?;
        return Ok(None);
    };
    let mut outs: Vec<Option<C::Out>> = changes.iter().map(|_| None).collect();
    for ((_, at), out) in order.into_iter().zip(applied) {
        outs[at] = Some(out);
    }
    tx.commit().await?;
    Ok(Some(outs.into_iter().flatten().collect()))
}

/// A send fence ([`super::Dispatch::owns_attempt`]), checked with others in one read.
pub(crate) struct Fence {
    /// The attempt about to be sent.
    pub attempt_id: Uuid,
    /// The worker sending it.
    pub worker: String,
    /// The lease it must still hold at least.
    pub margin: Duration,
}

/// A queue of send fences, checked many in one statement on `readers` within `bound`: each
/// answer is the one a fence checked alone would get at the moment the statement runs.
pub(crate) fn fences<B: Backend>(readers: Pool<B::Db>, bound: Bound) -> Batcher<Fence, bool> {
    let check: WriteBatch<Fence, bool> = Arc::new(move |fences| {
        let (readers, bound) = (readers.clone(), bound.clone());
        async move { check_fences::<B>(&readers, &bound, fences).await }.boxed()
    });
    Batcher::spawn(WRITERS, MAX_GROUP, check)
}

async fn check_fences<B: Backend>(
    readers: &Pool<B::Db>,
    bound: &Bound,
    fences: Vec<Fence>,
) -> Vec<Result<bool, StoreError>> {
    let mut answers: Vec<Option<Result<bool, StoreError>>> = fences.iter().map(|_| None).collect();
    // One statement per worker and margin among them (one, when one worker process asks).
    while let Some(first) = answers.iter().position(Option::is_none) {
        let (worker, margin) = (&fences[first].worker, fences[first].margin);
        let ours: Vec<usize> = (first..fences.len())
            .filter(|&at| answers[at].is_none())
            .filter(|&at| fences[at].worker == *worker && fences[at].margin == margin)
            .collect();
        let ids: Vec<Uuid> = ours.iter().map(|&at| fences[at].attempt_id).collect();
        let owned = fetch_all_on::<B>(
            readers,
            bound,
            B::SQL.owned_attempts,
            args![&ids[..], worker.as_str(), margin],
        )
        .await
        .and_then(|rows| {
            rows.iter()
                .map(|row| B::uuid(row, "id"))
                .collect::<Result<HashSet<Uuid>, StoreError>>()
        });
        for at in ours {
            answers[at] = Some(match &owned {
                Ok(owned) => Ok(owned.contains(&fences[at].attempt_id)),
                Err(error) => Err(error.clone()),
            });
        }
    }
    answers.into_iter().flatten().collect()
}
