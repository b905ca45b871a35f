//! Group commit: concurrent callers share one transaction, and so one durable commit.
//!
//! A [`Batcher`] queues work from any number of callers. Each of its writer tasks takes
//! the first item waiting, everything else already queued (up to a maximum), writes them
//! in one transaction, and answers every caller with its own result once that transaction
//! committed. Nothing waits on a timer: a lone caller is written at once; callers that arrive
//! while a commit is in flight form the next batch. Each caller still gets its answer only
//! after its own rows are durably committed.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::{Mutex, mpsc, oneshot};

use super::StoreError;

/// Writes one batch, answering each input in order. The writer decides what a failure of
/// one input means for the others (the intake batch retries inputs one by one, so a bad row
/// fails alone).
pub(crate) type WriteBatch<I, O> =
    Arc<dyn Fn(Vec<I>) -> BoxFuture<'static, Vec<Result<O, StoreError>>> + Send + Sync>;

type Reply<O> = oneshot::Sender<Result<O, StoreError>>;

/// A queue of inputs written in shared transactions.
pub(crate) struct Batcher<I, O> {
    sender: mpsc::UnboundedSender<(I, Reply<O>)>,
}

impl<I, O> std::fmt::Debug for Batcher<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher").finish_non_exhaustive()
    }
}

impl<I: Send + 'static, O: Send + 'static> Batcher<I, O> {
    /// Starts `writers` writer tasks taking up to `max_batch` inputs per transaction.
    pub(crate) fn spawn(writers: usize, max_batch: usize, write: WriteBatch<I, O>) -> Self {
        let (sender, receiver) = mpsc::unbounded_channel::<(I, Reply<O>)>();
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
                    for (reply, result) in replies.into_iter().zip(results) {
                        let _ = reply.send(result);
                    }
                }
            });
        }
        Self { sender }
    }

    /// Queues `input` without waiting for it: for writes nobody answers on (a crash or a
    /// failed batch loses them, and the writer logs why). `false` if the writers are gone.
    pub(crate) fn enqueue(&self, input: I) -> bool {
        let (reply, _) = oneshot::channel();
        self.sender.send((input, reply)).is_ok()
    }

    /// Queues `input` and waits until the transaction carrying it committed.
    pub(crate) async fn submit(&self, input: I) -> Result<O, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.sender
            .send((input, reply))
            .map_err(|_| StoreError::unavailable(sqlx::Error::PoolClosed))?;
        answer
            .await
            .map_err(|_| StoreError::unavailable(sqlx::Error::PoolClosed))?
    }
}
