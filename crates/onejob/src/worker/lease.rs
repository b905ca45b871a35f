//! Leases: a worker renews the lease of its live attempts every third of the lease, and
//! every worker rescues the attempts whose lease expired (their worker died) or whose
//! deadline passed long ago, by making them `unknown` — never `failed`, never re-sent.

use crate::store::Chain;
use std::{sync::Arc, time::Duration};

use tokio_util::sync::CancellationToken;

use super::WorkerContext;

/// How long past its deadline a live attempt may stay live before rescue, giving its own
/// worker the first chance to record the timeout.
const DEADLINE_GRACE: Duration = Duration::from_secs(5);

/// Renews this worker's leases until `stop`.
pub async fn heartbeat(ctx: Arc<WorkerContext>, stop: CancellationToken) {
    let every = ctx.settings.lease / 3;
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = stop.cancelled() => return,
        }
        if let Err(error) = ctx
            .store
            .heartbeat(&ctx.settings.id, ctx.settings.lease)
            .await
        {
            tracing::warn!(error = %Chain(&error), "lease heartbeat failed");
        }
    }
}

/// Turns attempts with expired leases `unknown`, until `stop`.
pub async fn rescue(ctx: Arc<WorkerContext>, stop: CancellationToken) {
    let every =
        (ctx.settings.lease / 2).min(ctx.settings.poll_interval.max(Duration::from_millis(50)));
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = stop.cancelled() => return,
        }
        if let Err(error) = rescue_once(&ctx).await {
            tracing::warn!(error = %Chain(&error), "lease rescue failed");
        }
    }
}

/// One rescue pass; returns how many attempts became unknown.
pub async fn rescue_once(ctx: &WorkerContext) -> Result<usize, crate::store::StoreError> {
    let expired = ctx.store.expired_attempts(DEADLINE_GRACE).await?;
    let mut rescued = 0;
    for (attempt_id, provider) in expired {
        let reason = "lease expired: the worker running it stopped renewing it (or its \
                      deadline passed long ago); the provider may still have done the work";
        if ctx.store.mark_unknown(attempt_id, reason).await? {
            crate::telemetry::attempt_ended(&provider, "unknown");
            tracing::warn!(%attempt_id, "rescued an attempt with an expired lease as unknown");
            rescued += 1;
        }
    }
    Ok(rescued)
}
