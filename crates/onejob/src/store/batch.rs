//! Group commit: concurrent callers share one transaction, and so one durable commit.
//!
//! A [`Batcher`] queues work from any number of callers. Each of its writer tasks takes
//! the first item waiting, everything else already queued (up to a maximum), writes them
//! in one transaction, and answers every caller with its own result once that transaction
//! committed. Nothing waits on a timer: a lone caller is written at once; callers that arrive
//! while a commit is in flight form the next batch. Each caller still gets its answer only
//! after its own rows are durably committed.
//!
//! The queue is bounded. A caller that waits for its answer ([`Batcher::submit`]) waits for
//! room too, so a database slower than its callers holds them up instead of letting the queue
//! grow; a write nobody waits for ([`Batcher::enqueue`]) is refused when the queue is full,
//! and its caller decides what to do instead. A write nobody waits for that fails is logged
//! and counted (`onejob_writes_dropped_total`), never lost in silence.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::{Mutex, mpsc, oneshot};

use super::{Chain, StoreError};
use crate::telemetry;

/// Writes one batch, answering each input in order. The writer decides what a failure of
/// one input means for the others (the intake batch retries inputs one by one, so a bad row
/// fails alone).
pub(crate) type WriteBatch<I, O> =
    Arc<dyn Fn(Vec<I>) -> BoxFuture<'static, Vec<Result<O, StoreError>>> + Send + Sync>;

/// Where a caller's answer goes; `None` for a write nobody waits for.
type Reply<O> = Option<oneshot::Sender<Result<O, StoreError>>>;

/// How many inputs a queue holds by default: far more than the callers of one process wait
/// on at once, so only a database that stopped taking writes fills it.
pub(crate) const CAPACITY: usize = 16_384;

/// How many events nobody waits for (`replayed` events) a queue holds: a few seconds of
/// replays at full speed, a few MB of memory.
pub(crate) const EVENT_QUEUE: usize = 10_000;

/// A queue of inputs written in shared transactions.
pub(crate) struct Batcher<I, O> {
    sender: mpsc::Sender<(I, Reply<O>)>,
}

impl<I, O> std::fmt::Debug for Batcher<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher").finish_non_exhaustive()
    }
}

impl<I: Send + 'static, O: Send + 'static> Batcher<I, O> {
    /// Starts `writers` writer tasks taking up to `max_batch` inputs per transaction, from a
    /// queue of [`CAPACITY`] inputs.
    pub(crate) fn spawn(writers: usize, max_batch: usize, write: WriteBatch<I, O>) -> Self {
        Self::bounded("write", writers, max_batch, CAPACITY, write)
    }

    /// Like [`Batcher::spawn`], with a queue of `capacity` inputs; `what` names an input in
    /// the log line and metric of writes nobody waited for that failed.
    pub(crate) fn bounded(
        what: &'static str,
        writers: usize,
        max_batch: usize,
        capacity: usize,
        write: WriteBatch<I, O>,
    ) -> Self {
        let (sender, receiver) = mpsc::channel::<(I, Reply<O>)>(capacity.max(1));
        let receiver = Arc::new(Mutex::new(receiver));
        for _ in 0..writers.max(1) {
            let receiver = receiver.clone();
            let write = write.clone();
            tokio::spawn(async move {
                loop {
                    let batch = {
                        let mut receiver = receiver.lock().await;
                        let Some(first) = receiver.recv().await else {
                            return;
                        };
                        let mut batch = vec![first];
                        while batch.len() < max_batch {
                            match receiver.try_recv() {
                                Ok(item) => batch.push(item),
                                Err(_) => break,
                            }
                        }
                        batch
                    };
                    let (inputs, replies): (Vec<I>, Vec<Reply<O>>) = batch.into_iter().unzip();
                    let results = write(inputs).await;
                    answer(what, replies, results);
                }
            });
        }
        Self { sender }
    }

    /// Queues `input` without waiting for it: for writes nobody answers on (a crash loses
    /// them; a failed write is logged and counted). Gives `input` back if the queue is full
    /// or the writers are gone: nothing was queued.
    pub(crate) fn enqueue(&self, input: I) -> Result<(), I> {
        self.sender
            .try_send((input, None))
            .map_err(|error| match error {
                mpsc::error::TrySendError::Full((input, _))
                | mpsc::error::TrySendError::Closed((input, _)) => input,
            })
    }

    /// Queues `input`, waiting for room, and waits until the transaction carrying it
    /// committed.
    pub(crate) async fn submit(&self, input: I) -> Result<O, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.sender
            .send((input, Some(reply)))
            .await
            .map_err(|_| StoreError::unavailable(sqlx::Error::PoolClosed))?;
        answer
            .await
            .map_err(|_| StoreError::unavailable(sqlx::Error::PoolClosed))?
    }
}

/// Answers each caller of a batch; counts and logs the failures nobody waited for (a writer
/// that answered fewer results than inputs failed the rest).
fn answer<O>(what: &'static str, replies: Vec<Reply<O>>, results: Vec<Result<O, StoreError>>) {
    let mut results = results.into_iter();
    let mut dropped = 0u64;
    let mut first_error = None;
    for reply in replies {
        let result = results.next().unwrap_or_else(|| {
            Err(StoreError::Corrupt(
                "the writer gave no answer for this input".into(),
            ))
        });
        match (reply, result) {
            (Some(reply), result) => {
                let _ = reply.send(result);
            }
            (None, Ok(_)) => {}
            (None, Err(error)) => {
                dropped += 1;
                first_error.get_or_insert(error);
            }
        }
    }
    if let Some(error) = first_error {
        tracing::warn!(
            what,
            count = dropped,
            error = %Chain(&error),
            "queued writes nobody waited for were not written"
        );
        telemetry::writes_dropped(what, dropped);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures::FutureExt;
    use tokio::sync::Notify;

    use super::{Batcher, WriteBatch};
    use crate::store::StoreError;

    /// A full queue refuses writes nobody waits for, instead of growing without bound; room
    /// made by the writer takes them again.
    #[tokio::test]
    async fn a_full_queue_refuses_writes_nobody_waits_for() {
        let open = Arc::new(Notify::new());
        let gate = open.clone();
        let write: WriteBatch<u32, ()> = Arc::new(move |inputs| {
            let gate = gate.clone();
            async move {
                gate.notified().await;
                inputs.iter().map(|_| Ok(())).collect()
            }
            .boxed()
        });
        let batcher = Batcher::bounded("test", 1, 1, 4, write);
        // The writer takes one and blocks; four more fill the queue.
        let mut queued = 0;
        while batcher.enqueue(queued).is_ok() {
            queued += 1;
            assert!(queued <= 5, "the queue took more than its capacity");
        }
        assert!(queued >= 4, "{queued}");
        open.notify_one();
        let mut again = false;
        for _ in 0..1_000 {
            if batcher.enqueue(99).is_ok() {
                again = true;
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(again, "the queue never took writes again");
        // A caller that waits for its answer still gets it.
        let waiter = tokio::spawn({
            let open = open.clone();
            async move {
                loop {
                    open.notify_one();
                    tokio::task::yield_now().await;
                }
            }
        });
        let answered: Result<(), StoreError> = batcher.submit(7).await;
        waiter.abort();
        assert!(answered.is_ok());
    }
}
