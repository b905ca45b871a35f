//! Running one attempt: send it, record the acknowledgement (and task id) the moment it
//! comes, follow an asynchronous task until its deadline, validate the output, and end the
//! attempt as won or discarded (compare-and-swap), failed, or unknown.
//!
//! Nothing here turns a timeout into a failure: a deadline, an ambiguous transport error or
//! a shutdown makes the attempt `unknown`, which blocks further attempts until proof arrives.

use crate::store::Chain;
use std::{sync::Arc, time::Duration};

use serde_json::{Value, json};
use tokio::{sync::oneshot, time::Instant};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{WorkerContext, plan};
use crate::{
    certification::Certified,
    kind::Kind,
    outcome::{self, Offered},
    provider::{AttemptRequest, Provider, ProviderError, Submitted, TaskStatus},
    store::{AttemptRecord, JobRecord, Resolution, Unsuccessful},
    telemetry,
};

/// How an attempt ended, for logs and tests.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// Its output won.
    Won,
    /// Its output came after another attempt won (or the job was cancelled).
    Discarded,
    /// It definitely failed.
    Failed(String),
    /// Its outcome is unknown.
    Unknown(String),
    /// The store could not record the ending; the lease rescuer will make it unknown.
    Unrecorded(String),
}

/// First wait between status polls; it grows by half each time up to [`MAX_POLL`].
const FIRST_POLL: Duration = Duration::from_millis(50);
const MAX_POLL: Duration = Duration::from_secs(2);

/// Runs `attempt` of `job` to its end. `abandon` fires when the worker stops waiting for
/// in-flight attempts during shutdown.
pub async fn run(
    ctx: Arc<WorkerContext>,
    job: JobRecord,
    kind: Arc<Kind>,
    attempt: AttemptRecord,
    abandon: CancellationToken,
) -> Ending {
    let span = tracing::info_span!("attempt", job = %job.id, attempt = %attempt.id, provider = %attempt.provider);
    run_attempt(ctx, job, kind, attempt, abandon)
        .instrument(span)
        .await
}

async fn run_attempt(
    ctx: Arc<WorkerContext>,
    job: JobRecord,
    kind: Arc<Kind>,
    attempt: AttemptRecord,
    abandon: CancellationToken,
) -> Ending {
    let Some(provider) = ctx.providers.get(&attempt.provider).cloned() else {
        let reason = format!("provider {:?} is not configured", attempt.provider);
        return fail(&ctx, &kind, &attempt, json!({ "message": reason })).await;
    };
    let deadline = Instant::now() + kind.attempt_timeout;
    // Only a first (non-hedge) attempt asks for a hedge once it runs, and only if a
    // certified provider can take it; a refused one is logged now, once.
    let hedge_after = if attempt.hedge || kind.hedge_after.is_none() {
        None
    } else {
        let attempts = ctx.store.job_attempts(job.id).await.unwrap_or_default();
        let certified = Certified::load(&*ctx.store, &ctx.kinds, ctx.providers.hashes())
            .await
            .unwrap_or_default();
        let decision = plan::hedge(&kind, &attempt.provider, &attempts, &certified);
        super::log_refusals(&ctx, job.id, "hedge", &decision).await;
        decision.plan.and(kind.hedge_after)
    };
    let request = AttemptRequest {
        job_id: job.id,
        attempt_id: attempt.id,
        kind: &kind,
        params: &job.params,
        idempotency_key: attempt
            .upstream_key
            .clone()
            .unwrap_or_else(|| format!("onejob:{}", job.id)),
        temperature: None,
    };

    if attempt.number == 1 && !attempt.hedge {
        let waited = time::OffsetDateTime::now_utc() - job.created_at;
        telemetry::dispatch_latency(Duration::try_from(waited).unwrap_or_default());
    }
    let sent_at = Instant::now();
    let (sent_tx, mut sent_rx) = oneshot::channel();
    let submit = provider.submit(&request, Some(sent_tx));
    tokio::pin!(submit);
    let mut acknowledged = false;
    let submitted = loop {
        tokio::select! {
            result = &mut submit => break result,
            Ok(()) = &mut sent_rx, if !acknowledged => {
                acknowledged = true;
                if let Err(error) = ctx.store.acknowledge_attempt(attempt.id, None, hedge_after).await {
                    tracing::warn!(error = %Chain(&error), "could not record the acknowledgement");
                }
            }
            () = tokio::time::sleep_until(deadline) => {
                return unknown(&ctx, &attempt, &format!(
                    "no answer within attempt_timeout ({:?})", kind.attempt_timeout)).await;
            }
            () = abandon.cancelled() => {
                return unknown(&ctx, &attempt, "the worker shut down before the provider answered").await;
            }
        }
    };
    let output = match submitted {
        Ok(Submitted::Output(output)) => output,
        Ok(Submitted::Accepted { task_id }) => {
            if let Err(error) = ctx
                .store
                .acknowledge_attempt(attempt.id, Some(&task_id), hedge_after)
                .await
            {
                tracing::warn!(error = %Chain(&error), %task_id, "could not record the task id");
            }
            match follow(&*provider, &task_id, deadline, &abandon).await {
                Followed::Output(output) => output,
                Followed::Failed(message) => {
                    return fail(
                        &ctx,
                        &kind,
                        &attempt,
                        json!({ "message": message, "task_id": task_id }),
                    )
                    .await;
                }
                Followed::Unknown(reason) => return unknown(&ctx, &attempt, &reason).await,
            }
        }
        Err(error) if error.is_definite() => {
            return fail(
                &ctx,
                &kind,
                &attempt,
                json!({ "message": error.to_string() }),
            )
            .await;
        }
        Err(error) => return unknown(&ctx, &attempt, &error.to_string()).await,
    };
    telemetry::provider_latency(&attempt.provider, sent_at.elapsed());
    finish(&ctx, &kind, &attempt, output).await
}

/// Where following a task ended.
enum Followed {
    Output(Value),
    Failed(String),
    Unknown(String),
}

/// Polls an accepted task until it finishes, the deadline passes, or the worker gives up.
async fn follow(
    provider: &dyn Provider,
    task_id: &str,
    deadline: Instant,
    abandon: &CancellationToken,
) -> Followed {
    let mut wait = FIRST_POLL;
    loop {
        match provider.status(task_id).await {
            Ok(TaskStatus::Succeeded(output)) => return Followed::Output(output),
            Ok(TaskStatus::Failed(message)) => return Followed::Failed(message),
            Ok(TaskStatus::Running) => {}
            Err(ProviderError::Unsupported(_)) => {
                return Followed::Unknown("the provider cannot report the task's status".into());
            }
            // A status call that fails says nothing about the task: keep asking.
            Err(error) => tracing::debug!(%error, "status poll failed"),
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = tokio::time::sleep_until(deadline) => {
                return Followed::Unknown(format!("task {task_id} still running at the attempt's deadline"));
            }
            () = abandon.cancelled() => {
                return Followed::Unknown("the worker shut down while the task was running".into());
            }
        }
        wait = (wait + wait / 2).min(MAX_POLL);
    }
}

/// Validates the output (no fake success), then offers it as the job's result.
async fn finish(
    ctx: &WorkerContext,
    kind: &Kind,
    attempt: &AttemptRecord,
    output: Value,
) -> Ending {
    // The provider has answered; nothing of it is recorded yet (see `crate::fault`).
    crate::fault::after_answer();
    let by = Resolution::worker();
    match outcome::offer(&*ctx.store, kind, attempt, &output, &by).await {
        Ok(Offered::Won) => {
            tracing::info!("attempt won");
            Ending::Won
        }
        Ok(Offered::Discarded | Offered::NotUnknown(_)) => {
            tracing::info!("late result discarded");
            Ending::Discarded
        }
        Ok(Offered::Invalid(errors)) => {
            tracing::info!(?errors, "output is not a real result; attempt failed");
            Ending::Failed("the output does not pass the kind's output schema".into())
        }
        Err(error) => {
            tracing::error!(error = %Chain(&error), "could not record the result");
            Ending::Unrecorded(error.to_string())
        }
    }
}

async fn fail(ctx: &WorkerContext, kind: &Kind, attempt: &AttemptRecord, error: Value) -> Ending {
    let message = error["message"].as_str().unwrap_or("failed").to_owned();
    tracing::info!(%message, "attempt failed");
    let by = Resolution::worker();
    match outcome::fail(&*ctx.store, kind, attempt, Unsuccessful::Failed, error, &by).await {
        Ok(_) => Ending::Failed(message),
        Err(e) => Ending::Unrecorded(e.to_string()),
    }
}

async fn unknown(ctx: &WorkerContext, attempt: &AttemptRecord, reason: &str) -> Ending {
    tracing::warn!(%reason, "attempt outcome unknown");
    match ctx.store.mark_unknown(attempt.id, reason).await {
        Ok(became_unknown) => {
            if became_unknown {
                telemetry::attempt_ended(&attempt.provider, "unknown");
            }
            Ending::Unknown(reason.to_owned())
        }
        Err(e) => Ending::Unrecorded(e.to_string()),
    }
}
