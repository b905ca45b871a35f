//! The reconciler: resolves `unknown` attempts by proof, never by guessing.
//!
//! It claims unknown attempts due for a check (with per-attempt exponential backoff) and asks
//! their provider: a task id's `status` (learning the task id first by the forwarded
//! idempotency key where the provider can be asked that way). `succeeded` goes through the
//! same validation and compare-and-swap as a live result (it may lose and be discarded);
//! `failed` frees the job for its next attempt; still running stays unknown. An attempt the
//! provider cannot report on stays unknown until an operator resolves it — or, where the kind
//! opts in with `settle_unknown_after`, until that long has passed, when it is settled as
//! failed and the event log says so.

use crate::store::Chain;
use std::{sync::Arc, time::Duration};

use serde_json::json;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use super::WorkerContext;
use crate::{
    outcome::{self, Offered},
    provider::{ProviderError, TaskStatus},
    store::{AttemptRecord, Resolution, StoreError, Unsuccessful},
};

/// The actor the reconciler's events carry.
pub const RECONCILER: &str = "reconciler";

/// First wait between checks of one attempt; doubles per check up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
const BATCH: u32 = 32;

/// Reconciles until `stop`.
pub async fn run(ctx: Arc<WorkerContext>, stop: CancellationToken) {
    let every = ctx
        .settings
        .poll_interval
        .clamp(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = stop.cancelled() => return,
        }
        if let Err(error) = reconcile_once(&ctx).await {
            tracing::warn!(error = %Chain(&error), "reconciliation pass failed");
        }
    }
}

/// One pass over the unknown attempts due for a check; returns how many were resolved.
pub async fn reconcile_once(ctx: &WorkerContext) -> Result<usize, StoreError> {
    let claimed = ctx
        .store
        .claim_unknown(BATCH, FIRST_BACKOFF, MAX_BACKOFF)
        .await?;
    let mut resolved = 0;
    for attempt in claimed {
        if reconcile(ctx, &attempt).await? {
            resolved += 1;
        }
    }
    Ok(resolved)
}

async fn reconcile(ctx: &WorkerContext, attempt: &AttemptRecord) -> Result<bool, StoreError> {
    let Some(job) = ctx.store.job_for_dispatch(attempt.job_id).await? else {
        return Ok(false);
    };
    let Some(kind) = ctx.kinds.get(&job.kind).cloned() else {
        return Ok(false);
    };
    let proof = match ctx.providers.get(&attempt.provider) {
        Some(provider) => {
            let task_id = match &attempt.task_id {
                Some(task_id) => Some(task_id.clone()),
                None => {
                    let key = attempt
                        .upstream_key
                        .clone()
                        .unwrap_or_else(|| format!("onejob:{}", job.id));
                    match provider.task_by_idempotency_key(&key).await {
                        Ok(Some(task_id)) => {
                            ctx.store.set_task_id(attempt.id, &task_id).await?;
                            Some(task_id)
                        }
                        Ok(None) => {
                            let note = "the provider has no task under the attempt's idempotency key: it never received it";
                            let error = json!({ "message": note });
                            let by = Resolution::of_unknown(
                                RECONCILER,
                                "provider lookup by idempotency key",
                            );
                            outcome::fail(
                                &*ctx.store,
                                &kind,
                                attempt,
                                Unsuccessful::Failed,
                                error,
                                &by,
                            )
                            .await?;
                            return Ok(true);
                        }
                        Err(_) => None,
                    }
                }
            };
            match task_id {
                Some(task_id) => provider.status(&task_id).await.map(Some),
                None => Ok(None),
            }
        }
        None => Err(ProviderError::Unsupported("status")),
    };
    match proof {
        Ok(Some(TaskStatus::Succeeded(output))) => {
            let by = Resolution::of_unknown(RECONCILER, "provider status: succeeded");
            let offered = outcome::offer(&*ctx.store, &kind, attempt, &output, &by).await?;
            tracing::info!(attempt = %attempt.id, ?offered, "unknown attempt reconciled: succeeded");
            Ok(!matches!(offered, Offered::NotUnknown(_)))
        }
        Ok(Some(TaskStatus::Failed(message))) => {
            let by = Resolution::of_unknown(RECONCILER, "provider status: failed");
            let error = json!({ "message": message, "task_id": attempt.task_id });
            outcome::fail(
                &*ctx.store,
                &kind,
                attempt,
                Unsuccessful::Failed,
                error,
                &by,
            )
            .await?;
            tracing::info!(attempt = %attempt.id, "unknown attempt reconciled: failed");
            Ok(true)
        }
        // Still running, no way to ask, or the question failed: it stays unknown unless the
        // kind settles unknowns after a while.
        Ok(Some(TaskStatus::Running)) | Ok(None) | Err(_) => {
            settle_if_due(ctx, &kind, attempt).await
        }
    }
}

async fn settle_if_due(
    ctx: &WorkerContext,
    kind: &crate::kind::Kind,
    attempt: &AttemptRecord,
) -> Result<bool, StoreError> {
    let (Some(after), Some(since)) = (kind.settle_unknown_after, attempt.unknown_since) else {
        return Ok(false);
    };
    let waited = OffsetDateTime::now_utc() - since;
    if waited < after {
        return Ok(false);
    }
    let note = format!(
        "settled as failed: unknown for {:?} without proof (settle_unknown_after = {:?})",
        Duration::try_from(waited).unwrap_or_default(),
        after
    );
    let by = Resolution::of_unknown(RECONCILER, "settle_unknown_after");
    let error = json!({ "message": note, "settled": true });
    outcome::fail(&*ctx.store, kind, attempt, Unsuccessful::Failed, error, &by).await?;
    tracing::warn!(attempt = %attempt.id, "unknown attempt settled as failed");
    Ok(true)
}
