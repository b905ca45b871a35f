//! Leases: a worker renews the lease of its live attempts every third of the lease (and
//! learns which of them belong to jobs cancelled meanwhile), and every worker rescues the
//! attempts whose lease expired (their worker died) or whose deadline passed long ago, by
//! making them `unknown` — never `failed`, never re-sent. A rescuer never takes an attempt
//! this process is still running, and takes another's only while its lease is still expired
//! when the update runs (a conditional update), so a renewal that got there first wins.

use crate::store::Chain;
use std::{sync::Arc, time::Duration};

use tokio_util::sync::CancellationToken;

use super::WorkerContext;
use crate::store::UnknownBy;

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
        match ctx
            .store
            .heartbeat(&ctx.settings.id, ctx.settings.lease)
            .await
        {
            Ok(cancelled) if !cancelled.is_empty() => {
                tracing::info!(
                    attempts = cancelled.len(),
                    "stopping attempts of cancelled jobs"
                );
                ctx.live.cancel(&cancelled);
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(error = %Chain(&error), "lease heartbeat failed"),
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
    let why = serde_json::json!({
        "reason": "lease expired: the worker running it stopped renewing it (or its deadline \
                   passed long ago); the provider may still have done the work",
    });
    let by = UnknownBy::Rescuer {
        grace: DEADLINE_GRACE,
    };
    for (attempt_id, provider) in expired {
        // This process runs it: its own task decides (at its deadline at the latest).
        if ctx.live.contains(attempt_id) {
            continue;
        }
        if ctx.store.mark_unknown(attempt_id, &why, by).await? {
            crate::telemetry::attempt_ended(&provider, "unknown");
            tracing::warn!(%attempt_id, "rescued an attempt with an expired lease as unknown");
            rescued += 1;
        }
    }
    Ok(rescued)
}
