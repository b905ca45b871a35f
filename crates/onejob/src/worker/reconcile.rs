//! The reconciler: resolves `unknown` attempts by proof, never by guessing.
//!
//! It claims unknown attempts due for a check and asks their provider, each item time-boxed
//! and several at once, so one hung upstream holds up nothing else. A claim is a lease in the
//! database, longer than any item's time box ([`claim_lease`]): while one node checks (or
//! re-sends) an attempt, no other node, nor this one, claims it again. A check that proves
//! nothing sets the attempt's next check after a per-attempt exponential backoff.
//!
//! * **A task id is known**: its `status`. `succeeded` goes through the same validation and
//!   compare-and-swap as a live result (it may lose and be discarded); `failed` frees the
//!   job for its next attempt; still running stays unknown.
//! * **No task id** (the worker died, or timed out, before the provider's answer came):
//!   only once no copy of the request can still be in flight (its deadline plus
//!   [`IN_FLIGHT_MARGIN`] passed and its lease expired), the provider is asked by the
//!   forwarded idempotency key (`lookup_url`): a task found is followed by its id; "never
//!   received" fails the attempt **keeping its upstream key**, so a late copy and the next
//!   attempt deduplicate upstream. A provider without a lookup whose certificate proves it
//!   deduplicates by key gets the attempt **re-sent under the same key** (`resent` event): it
//!   answers the task it already has, or runs it for the first time.
//! * **Nothing can be asked**: it stays unknown until an operator resolves it — or, where the
//!   kind opts in with `settle_unknown_after`, until that long has passed, when it is settled
//!   as failed (keeping its key) and the event log says so.
//!
//! Each pass also offers again the answers this worker could not record ([`super::unrecorded`]).

use crate::store::Chain;
use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use serde_json::{Value, json};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use super::WorkerContext;
use crate::{
    certification::Certified,
    kind::Kind,
    outcome::{self, Offered},
    provider::{AttemptRequest, Provider, ProviderError, Submitted, TaskStatus},
    store::{AttemptRecord, NewEvent, Resolution, StoreError, Unsuccessful},
    telemetry,
};
use onejob_domain::EventKind;

/// The actor the reconciler's events carry.
pub const RECONCILER: &str = "reconciler";

/// First wait between checks of one attempt; doubles per check up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
const BATCH: usize = 32;

/// How many attempts one worker reconciles at once.
const CONCURRENT: usize = 16;

/// How long past its deadline a request may still be in flight somewhere (a slow network,
/// a proxy's buffer) before "never received" is believed.
pub const IN_FLIGHT_MARGIN: Duration = Duration::from_secs(5);

/// The least time one item gets (a re-send gets its kind's `attempt_timeout` on top).
const ITEM_BUDGET: Duration = Duration::from_secs(15);

/// How long after a copy of a request can no longer be in flight its attempt is checked.
const MIN_RECHECK: Duration = Duration::from_millis(50);

/// How much longer a claim's lease lasts than the longest item's time box.
const LEASE_MARGIN: Duration = Duration::from_secs(10);

/// How long a claim holds an attempt: longer than any item may take ([`ITEM_BUDGET`] plus the
/// longest `attempt_timeout` of the kinds), so a check or re-send in flight is never joined by
/// another one.
fn claim_lease(kinds: &crate::kind::Kinds) -> Duration {
    let longest = kinds
        .names()
        .into_iter()
        .filter_map(|name| kinds.get(name))
        .map(|kind| kind.attempt_timeout)
        .max()
        .unwrap_or_default();
    ITEM_BUDGET + longest + LEASE_MARGIN
}

/// Reconciles until `stop`. Each claimed attempt is reconciled in a task of its own, up to
/// [`CONCURRENT`] at once across passes: a slow provider holds one slot for at most its
/// item's budget, and the other attempts go on being resolved meanwhile.
pub async fn run(ctx: Arc<WorkerContext>, stop: CancellationToken) {
    let every = ctx
        .settings
        .poll_interval
        .clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut items = tokio::task::JoinSet::new();
    // Attempts being reconciled: a later claim of one (its backoff passed) is skipped.
    let mut busy = std::collections::HashSet::new();
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = stop.cancelled() => break,
        }
        while let Some(done) = items.try_join_next() {
            if let Ok((attempt_id, outcome)) = done {
                busy.remove(&attempt_id);
                if let Err(error) = outcome {
                    tracing::warn!(error = %Chain(&error), %attempt_id, "reconciling an attempt failed");
                }
            }
        }
        offer_unrecorded(&ctx).await;
        let free = CONCURRENT.saturating_sub(items.len()).min(BATCH);
        if free == 0 {
            continue;
        }
        let claimed = tokio::select! {
            claimed = claim(&ctx, free) => claimed,
            () = stop.cancelled() => break,
        };
        match claimed {
            Ok((attempts, certified)) => {
                for attempt in attempts {
                    if !busy.insert(attempt.id) {
                        continue;
                    }
                    let (ctx, certified) = (ctx.clone(), certified.clone());
                    items.spawn(async move {
                        let outcome = reconcile_within_budget(&ctx, &attempt, &certified).await;
                        (attempt.id, outcome)
                    });
                }
            }
            Err(error) => tracing::warn!(error = %Chain(&error), "reconciliation pass failed"),
        }
    }
    items.shutdown().await;
}

/// Claims up to `limit` unknown attempts due for a check, with the certificates their
/// reconciliation may need (read only when some attempt lacks a task id).
async fn claim(
    ctx: &WorkerContext,
    limit: usize,
) -> Result<(Vec<AttemptRecord>, Arc<Certified>), StoreError> {
    let claimed = ctx
        .store
        .claim_unknown(limit as u32, claim_lease(&ctx.kinds))
        .await?;
    let certified = if claimed.iter().any(|a| a.task_id.is_none()) {
        Certified::load(&*ctx.store, &ctx.kinds, ctx.providers.hashes()).await?
    } else {
        Certified::default()
    };
    Ok((claimed, Arc::new(certified)))
}

/// One pass over the unrecorded answers and the unknown attempts due for a check, waiting for
/// every item (each within its budget); returns how many unknown attempts were resolved.
pub async fn reconcile_once(ctx: &WorkerContext) -> Result<usize, StoreError> {
    offer_unrecorded(ctx).await;
    let (claimed, certified) = claim(ctx, BATCH).await?;
    let certified = &*certified;
    let outcomes: Vec<Result<bool, StoreError>> = futures::stream::iter(claimed)
        .map(|attempt| async move { reconcile_within_budget(ctx, &attempt, certified).await })
        .buffer_unordered(CONCURRENT)
        .collect()
        .await;
    let mut resolved = 0;
    for outcome in outcomes {
        match outcome {
            Ok(true) => resolved += 1,
            Ok(false) => {}
            Err(error) => tracing::warn!(error = %Chain(&error), "reconciling an attempt failed"),
        }
    }
    Ok(resolved)
}

/// One attempt, within its time budget; unless that resolved it, its next check is set after
/// its backoff (it was claimed for the lease, a check that proved nothing must not wait that
/// long).
async fn reconcile_within_budget(
    ctx: &WorkerContext,
    attempt: &AttemptRecord,
    certified: &Certified,
) -> Result<bool, StoreError> {
    // Without a task id, nothing can be proved while a copy of the request may still be on
    // its way: check again the moment none can be, not after a backoff grown meanwhile.
    let in_flight = attempt
        .task_id
        .is_none()
        .then(|| copy_in_flight_for(attempt, OffsetDateTime::now_utc()))
        .flatten();
    let (checked, backoff, max_backoff) = match in_flight {
        Some(wait) => (Ok(false), wait, wait),
        None => (
            check_within_budget(ctx, attempt, certified).await,
            FIRST_BACKOFF,
            MAX_BACKOFF,
        ),
    };
    if !matches!(checked, Ok(true)) {
        let later = ctx
            .store
            .recheck_unknown_later(attempt.id, attempt.reconcile_checks, backoff, max_backoff)
            .await;
        if let Err(error) = later {
            // The claim's lease ends on its own: the attempt is checked again then.
            tracing::warn!(error = %Chain(&error), attempt = %attempt.id, "could not set an attempt's next check");
        }
    }
    checked
}

/// One attempt, within its time budget (shorter than the claim's lease).
async fn check_within_budget(
    ctx: &WorkerContext,
    attempt: &AttemptRecord,
    certified: &Certified,
) -> Result<bool, StoreError> {
    let Some(job) = ctx.store.job_for_dispatch(attempt.job_id).await? else {
        return Ok(false);
    };
    let Some(kind) = ctx.kinds.get(&job.kind).cloned() else {
        return Ok(false);
    };
    let budget = ITEM_BUDGET + kind.attempt_timeout;
    match tokio::time::timeout(
        budget,
        reconcile(
            ctx,
            &kind,
            (&job.params, job.request_body.as_deref()),
            attempt,
            certified,
        ),
    )
    .await
    {
        Ok(result) => result,
        Err(_) => {
            tracing::warn!(attempt = %attempt.id, ?budget, "reconciling an attempt took too long; it is checked again later");
            Ok(false)
        }
    }
}

/// What asking the provider established.
enum Proof {
    /// The task's status (or a re-send's answer).
    Status(TaskStatus),
    /// The provider never received the attempt.
    NeverReceived,
    /// The provider answered a re-send with a definite failure.
    Refused(ProviderError),
    /// Nothing (yet): stays unknown, unless the kind settles unknowns after a while.
    Nothing,
}

/// The job's params, and its request as sent (a gateway job's).
type Intent<'a> = (&'a Value, Option<&'a str>);

async fn reconcile(
    ctx: &WorkerContext,
    kind: &Kind,
    params: Intent<'_>,
    attempt: &AttemptRecord,
    certified: &Certified,
) -> Result<bool, StoreError> {
    let Some(provider) = ctx.providers.get(&attempt.provider).cloned() else {
        return settle_if_due(ctx, kind, attempt).await;
    };
    let key = attempt
        .upstream_key
        .clone()
        .unwrap_or_else(|| format!("onejob:{}", attempt.job_id));
    let proof = match &attempt.task_id {
        Some(task_id) => status(&*provider, task_id).await,
        None if !no_copy_in_flight(attempt, OffsetDateTime::now_utc()) => return Ok(false),
        None => match provider.task_by_idempotency_key(kind, &key).await {
            Ok(Some(task_id)) => {
                ctx.store.set_task_id(attempt.id, &task_id).await?;
                status(&*provider, &task_id).await
            }
            Ok(None) => Proof::NeverReceived,
            Err(ProviderError::Unsupported(_))
                if certified.dedupes(
                    &attempt.provider,
                    &kind.name,
                    provider.idempotency_header(),
                ) =>
            {
                resend(ctx, kind, params, attempt, &*provider, &key).await?
            }
            Err(_) => Proof::Nothing,
        },
    };
    match proof {
        Proof::Status(TaskStatus::Succeeded(output)) => {
            let output = if kind.is_gateway() {
                kind.endpoint.task_output(output, params.0)
            } else {
                output
            };
            let by = Resolution::of_unknown(RECONCILER, "provider status: succeeded");
            let offered = outcome::offer(&*ctx.store, kind, attempt, &output, &by).await?;
            tracing::info!(attempt = %attempt.id, ?offered, "unknown attempt reconciled: succeeded");
            Ok(!matches!(offered, Offered::NotUnknown(_)))
        }
        Proof::Status(TaskStatus::Failed(message)) => {
            let by = Resolution::of_unknown(RECONCILER, "provider status: failed");
            let error = json!({
                "message": "the provider reports the task failed",
                "internal": message,
            });
            outcome::fail(&*ctx.store, kind, attempt, Unsuccessful::Failed, error, &by).await?;
            tracing::info!(attempt = %attempt.id, "unknown attempt reconciled: failed");
            Ok(true)
        }
        Proof::NeverReceived => {
            let by = Resolution::of_unknown(RECONCILER, "provider lookup by idempotency key");
            let error = json!({
                "message": "the provider has no task under the attempt's idempotency key: it \
                            never received it (the key stays in force for the next attempt)",
            });
            outcome::fail(
                &*ctx.store,
                kind,
                attempt,
                Unsuccessful::FailedKeyKept,
                error,
                &by,
            )
            .await?;
            tracing::info!(attempt = %attempt.id, "unknown attempt reconciled: never received");
            Ok(true)
        }
        Proof::Refused(error) => {
            let by = Resolution::of_unknown(RECONCILER, "the provider answered a definite failure");
            let end = if error.spends_key() {
                Unsuccessful::Failed
            } else {
                Unsuccessful::FailedKeyKept
            };
            outcome::fail(&*ctx.store, kind, attempt, end, error.to_json(), &by).await?;
            Ok(true)
        }
        Proof::Status(TaskStatus::Running) | Proof::Nothing => {
            settle_if_due(ctx, kind, attempt).await
        }
    }
}

/// Whether no copy of the attempt's request can still be on its way to the provider: its
/// deadline passed more than [`IN_FLIGHT_MARGIN`] ago and its lease expired (its worker no
/// longer holds it). Until then, "never received" could be contradicted by a late arrival.
pub fn no_copy_in_flight(attempt: &AttemptRecord, now: OffsetDateTime) -> bool {
    copy_in_flight_for(attempt, now).is_none()
}

/// How much longer a copy of the attempt's request may still be on its way to the provider
/// (see [`no_copy_in_flight`]); `None` once none can be.
fn copy_in_flight_for(attempt: &AttemptRecord, now: OffsetDateTime) -> Option<Duration> {
    let until = [
        attempt
            .deadline_at
            .map(|deadline| deadline + IN_FLIGHT_MARGIN),
        attempt.lease_expires_at,
    ]
    .into_iter()
    .flatten()
    .max()?;
    (now <= until).then(|| Duration::try_from(until - now).unwrap_or_default() + MIN_RECHECK)
}

async fn status(provider: &dyn Provider, task_id: &str) -> Proof {
    match provider.status(task_id).await {
        Ok(status) => Proof::Status(status),
        // Its answer exists but is too large to read: no usable result, definitely.
        Err(error @ ProviderError::TooLarge { .. }) => Proof::Refused(error),
        Err(error) => {
            tracing::debug!(%task_id, %error, "status check failed");
            Proof::Nothing
        }
    }
}

/// Re-sends an unknown attempt under its same upstream key, to a provider certified to
/// deduplicate by key; the answer is proof like a status.
async fn resend(
    ctx: &WorkerContext,
    kind: &Kind,
    (params, request_body): Intent<'_>,
    attempt: &AttemptRecord,
    provider: &dyn Provider,
    key: &str,
) -> Result<Proof, StoreError> {
    let event = NewEvent {
        tenant: None,
        job_id: attempt.job_id,
        attempt_id: Some(attempt.id),
        kind: EventKind::Resent,
        actor: Some(RECONCILER.into()),
        detail: json!({
            "upstream_key": key,
            "note": "re-sent under the same key: the provider's certificate proves it \
                     deduplicates by key, so it answers the task it already has or runs it once",
        }),
    };
    ctx.store.append_event(event).await?;
    telemetry::attempt_resent(&attempt.provider);
    let request = AttemptRequest {
        job_id: attempt.job_id,
        attempt_id: attempt.id,
        kind,
        params,
        request_body,
        idempotency_key: key.to_owned(),
        temperature: None,
    };
    let answer = tokio::time::timeout(kind.attempt_timeout, provider.submit(&request, None)).await;
    Ok(match answer {
        Ok(Ok(Submitted::Output { output, .. })) => Proof::Status(TaskStatus::Succeeded(output)),
        Ok(Ok(Submitted::Accepted { task_id })) => {
            ctx.store.set_task_id(attempt.id, &task_id).await?;
            status(provider, &task_id).await
        }
        Ok(Err(error)) if error.is_definite() => Proof::Refused(error),
        Ok(Err(error)) => {
            tracing::info!(attempt = %attempt.id, %error, "re-send answered nothing definite");
            Proof::Nothing
        }
        Err(_) => Proof::Nothing,
    })
}

/// Offers again the answers this worker could not record.
async fn offer_unrecorded(ctx: &WorkerContext) {
    for answer in ctx.unrecorded.all() {
        let Some(kind) = ctx.kinds.get(&answer.kind).cloned() else {
            ctx.unrecorded.forget(answer.attempt.id);
            continue;
        };
        let by = Resolution::worker();
        match outcome::offer(&*ctx.store, &kind, &answer.attempt, &answer.output, &by).await {
            Ok(offered) => {
                tracing::info!(attempt = %answer.attempt.id, ?offered, "an unrecorded answer was recorded");
                ctx.unrecorded.forget(answer.attempt.id);
            }
            Err(error) if error.is_retryable() => {
                tracing::warn!(error = %Chain(&error), attempt = %answer.attempt.id, "an unrecorded answer still cannot be recorded");
            }
            Err(error) => {
                tracing::error!(error = %Chain(&error), attempt = %answer.attempt.id, "an unrecorded answer cannot be recorded; giving up on it (its output was logged)");
                ctx.unrecorded.forget(answer.attempt.id);
            }
        }
    }
}

async fn settle_if_due(
    ctx: &WorkerContext,
    kind: &Kind,
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
    // Nothing proved the provider did not do the work: its key stays in force.
    outcome::fail(
        &*ctx.store,
        kind,
        attempt,
        Unsuccessful::FailedKeyKept,
        error,
        &by,
    )
    .await?;
    tracing::warn!(attempt = %attempt.id, "unknown attempt settled as failed");
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use onejob_domain::AttemptState;
    use uuid::Uuid;

    fn unknown(deadline: OffsetDateTime, lease: OffsetDateTime) -> AttemptRecord {
        AttemptRecord {
            id: Uuid::now_v7(),
            job_id: Uuid::now_v7(),
            number: 1,
            provider: "p".into(),
            state: AttemptState::Unknown,
            hedge: false,
            task_id: None,
            worker: None,
            lease_expires_at: Some(lease),
            deadline_at: Some(deadline),
            started_at: deadline - Duration::from_secs(30),
            acknowledged_at: None,
            finished_at: None,
            unknown_since: Some(deadline),
            upstream_key: None,
            key_spent: false,
            error: None,
            reconcile_checks: 0,
        }
    }

    #[test]
    fn never_received_is_believed_only_past_the_deadline_margin_and_the_lease() {
        let now = OffsetDateTime::now_utc();
        let second = Duration::from_secs(1);
        // The deadline just passed: a copy may still be on its way.
        assert!(!no_copy_in_flight(
            &unknown(now - second, now - second),
            now
        ));
        // Past the margin, but the worker's lease still runs.
        let long_ago = now - IN_FLIGHT_MARGIN - second;
        assert!(!no_copy_in_flight(&unknown(long_ago, now + second), now));
        // Past both.
        assert!(no_copy_in_flight(&unknown(long_ago, now - second), now));
    }
}
