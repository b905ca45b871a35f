//! Retention: every `[retention] every`, a worker deletes the jobs that finished more than
//! `finished_after` ago, with their attempts and events, a batch per transaction until a
//! batch comes back short. Off unless `finished_after` is set.
//!
//! Batches are small and pause between one another, so a large backlog drains without
//! holding up intake or attempts; nodes take turns (a node that finds another pruning skips
//! its pass). What is deleted is counted in `onejob_retention_deleted_total`.

use std::{sync::Arc, time::Duration};

use tokio_util::sync::CancellationToken;

use super::WorkerContext;
use crate::{store::Chain, telemetry};

/// The pause between two batches of one pass.
const PAUSE: Duration = Duration::from_millis(20);

/// How a worker prunes finished jobs.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// Jobs finished longer ago than this are deleted.
    pub finished_after: Duration,
    /// Time between passes.
    pub every: Duration,
    /// Jobs per transaction.
    pub batch: u32,
}

/// Prunes every `every` until `stop`.
pub async fn run(ctx: Arc<WorkerContext>, retention: Retention, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(retention.every) => {}
            () = stop.cancelled() => return,
        }
        tokio::select! {
            pruned = prune_once(&ctx, retention) => {
                if pruned > 0 {
                    tracing::info!(jobs = pruned, "retention: finished jobs deleted");
                }
            }
            () = stop.cancelled() => return,
        }
    }
}

/// One pass: batches until one comes back short (or another node is pruning); returns how
/// many jobs were deleted.
pub async fn prune_once(ctx: &WorkerContext, retention: Retention) -> u64 {
    let mut deleted = 0;
    loop {
        match ctx
            .store
            .prune_finished(retention.finished_after, retention.batch)
            .await
        {
            Ok(pruned) => {
                telemetry::retention_deleted(pruned.jobs, pruned.attempts, pruned.events);
                deleted += pruned.jobs;
                if pruned.busy || pruned.jobs < u64::from(retention.batch) {
                    return deleted;
                }
            }
            Err(error) => {
                tracing::warn!(error = %Chain(&error), "retention: a batch failed");
                return deleted;
            }
        }
        tokio::time::sleep(PAUSE).await;
    }
}
