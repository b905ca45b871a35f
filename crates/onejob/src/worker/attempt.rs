//! Running one attempt: check that it is still this worker's to send (the fence), send it,
//! record the acknowledgement and the task id the moment they come, follow an asynchronous
//! task until its deadline, validate the output, and end the attempt as won or discarded
//! (compare-and-swap), failed, cancelled, or unknown.
//!
//! Nothing here turns a timeout into a failure: a deadline, an ambiguous transport error or
//! a shutdown makes the attempt `unknown`, which blocks further attempts until proof arrives,
//! once its request went out; one stopped before its request went out was not sent.
//! Every wait is bounded (the deadline, shutdown, the job's cancellation), every store write
//! is retried while retrying can help ([`super::recording`]), and an answer that still cannot
//! be recorded is held for the reconciler ([`super::unrecorded`]), never dropped.

use crate::store::Chain;
use std::{sync::Arc, time::Duration};

use onejob_domain::AttemptState;
use serde_json::{Value, json};
use tokio::{sync::oneshot, time::Instant};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{
    WorkerContext, plan,
    recording::{self, with_retries},
    unrecorded::UnrecordedAnswer,
};
use crate::{
    certification::Certified,
    gateway::streams::{StreamEnd, StreamSink},
    kind::Kind,
    outcome::{self, Offered},
    provider::{AttemptRequest, Provider, ProviderError, Submitted, TaskStatus},
    store::{
        Acknowledged, AttemptRecord, JobRecord, Resolution, StoreError, UnknownBy, Unsuccessful,
    },
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
    Failed {
        /// Why.
        reason: String,
        /// The upstream's HTTP status, where its refusal ended the attempt.
        status: Option<u16>,
    },
    /// Its job was cancelled while it ran; it ended `cancelled`.
    Cancelled,
    /// Its outcome is unknown.
    Unknown(String),
    /// It was no longer this worker's (rescued as unknown, or resolved): the worker stopped
    /// without acting on it further; its task id, if any, was stored.
    Abandoned(String),
    /// The store could not record the ending; an answer is held for the reconciler, and an
    /// attempt left live is made unknown by lease rescue.
    Unrecorded(String),
}

/// How long a synchronous request is in flight before its acknowledgement is recorded on
/// its own; a provider that answers sooner is acknowledged by its answer, in the one write
/// that records it. Until then the attempt reads `starting`: nothing else tells the two
/// apart (the guard, the rescuer and the reconciler treat them alike), and a cancellation
/// reaches a request in flight through the heartbeat, a third of the lease (10 s by
/// default), so a quarter of a second loses nothing and spares the write for every answer
/// within it (on a loaded machine, many answers of even a fast provider take longer than
/// a few milliseconds to be read).
const ACK_AFTER: Duration = Duration::from_millis(250);

/// First wait between status polls; it grows by half each time up to [`MAX_POLL`].
const FIRST_POLL: Duration = Duration::from_millis(50);
const MAX_POLL: Duration = Duration::from_secs(2);

/// How much of its lease, and of its time before its deadline, a worker must still have when
/// it sends an attempt: a quarter of the lease and of the attempt timeout, at most a second
/// (the send follows within microseconds).
fn fence_margin(lease: Duration, timeout: Duration) -> Duration {
    (lease / 4).min(timeout / 4).min(Duration::from_secs(1))
}

/// How an attempt's send fence is checked.
#[derive(Debug, Clone, Copy)]
pub(super) enum Fenced {
    /// By reading the store ([`crate::store::Dispatch::owns_attempt`]).
    Store,
    /// By the time since `Instant`, taken before the transaction that started the attempt
    /// for this worker (intake's, [`super::handoff`]): while the lease and the attempt
    /// timeout, less the margin, have not passed since, the attempt is still this worker's
    /// with the margin left; after that, by reading the store.
    Since(Instant),
}

/// Runs `attempt` of `job` to its end. `abandon` fires when the worker stops waiting for
/// in-flight attempts during shutdown.
pub async fn run(
    ctx: Arc<WorkerContext>,
    job: JobRecord,
    kind: Arc<Kind>,
    attempt: AttemptRecord,
    abandon: CancellationToken,
) -> Ending {
    run_fenced(ctx, job, kind, attempt, abandon, Fenced::Store).await
}

/// [`run`], its send fence checked as `fenced` says.
pub(super) async fn run_fenced(
    ctx: Arc<WorkerContext>,
    job: JobRecord,
    kind: Arc<Kind>,
    attempt: AttemptRecord,
    abandon: CancellationToken,
    fenced: Fenced,
) -> Ending {
    let span = tracing::info_span!("attempt", job = %job.id, attempt = %attempt.id, provider = %attempt.provider);
    let job_id = job.id;
    // A gateway job with a caller reading it live streams this attempt to them.
    let sink = kind
        .is_gateway()
        .then(|| ctx.hub.streams.start(&job.owner, &job.key_hash, attempt.id))
        .flatten();
    let ending = run_attempt(
        ctx.clone(),
        job,
        kind,
        attempt,
        abandon,
        sink.as_ref(),
        fenced,
    )
    .instrument(span)
    .await;
    if let Some(sink) = sink {
        sink.end(match &ending {
            Ending::Won => StreamEnd::Done,
            other => StreamEnd::Failed {
                message: stream_failure(job_id, other),
                status: match other {
                    Ending::Failed { status, .. } => *status,
                    _ => None,
                },
            },
        });
    }
    ctx.hub.watch.changed(job_id);
    ending
}

/// What a caller reading a stream is told when its attempt ended without relaying an answer.
fn stream_failure(job_id: uuid::Uuid, ending: &Ending) -> String {
    let what = match ending {
        Ending::Won => "won",
        Ending::Discarded => "lost to another attempt, whose answer is the job's result",
        Ending::Failed { .. } => "failed",
        Ending::Cancelled => "was cancelled with its job",
        Ending::Unknown(_) | Ending::Abandoned(_) | Ending::Unrecorded(_) => {
            "ended with its outcome unknown (the job awaits proof)"
        }
    };
    format!(
        "the attempt streaming job {job_id} {what}; send the request again with the same \
         Idempotency-Key to attach to the job's next attempt or its answer"
    )
}

/// What may stop an attempt before its provider answers.
struct Stops<'a> {
    deadline: Instant,
    /// The worker shuts down.
    abandon: &'a CancellationToken,
    /// The job was cancelled (learned by the heartbeat).
    cancelled: &'a CancellationToken,
}

async fn run_attempt(
    ctx: Arc<WorkerContext>,
    job: JobRecord,
    kind: Arc<Kind>,
    attempt: AttemptRecord,
    abandon: CancellationToken,
    sink: Option<&StreamSink>,
    fenced: Fenced,
) -> Ending {
    let running = ctx.live.enter(attempt.id);
    // A stream relayed to a caller is bounded by its own limits (an idle gap between chunks,
    // enforced by the adapter, and `stream_max` in all), not by `attempt_timeout`: one that
    // keeps producing is not cut. Its deadline in the store moves too, so that no other
    // node's rescue takes it for overdue while it streams.
    let budget = if sink.is_some() {
        kind.stream_max
    } else {
        kind.attempt_timeout
    };
    let deadline = Instant::now() + budget;
    if sink.is_some()
        && let Err(error) = ctx.store.extend_deadline(attempt.id, budget).await
    {
        tracing::warn!(error = %Chain(&error), "could not move the streamed attempt's deadline");
    }
    let stops = Stops {
        deadline,
        abandon: &abandon,
        cancelled: running.cancelled(),
    };
    let Some(provider) = ctx.providers.get(&attempt.provider).cloned() else {
        let error =
            json!({ "message": format!("provider {:?} is not configured", attempt.provider) });
        return not_sent(&ctx, &kind, &attempt, error).await;
    };
    // Only a first (non-hedge) attempt asks for a hedge once it runs, and only if a
    // certified provider can take it; a refused one is logged now, once. No hedge starts
    // beside an attempt streamed to a caller: a stream relays one attempt.
    let hedge_after = if attempt.hedge || kind.hedge_after.is_none() || sink.is_some() {
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
        request_body: job.request_body.as_deref(),
        idempotency_key: attempt
            .upstream_key
            .clone()
            .unwrap_or_else(|| format!("onejob:{}", job.id)),
        temperature: None,
    };

    // The fence: nothing irreversible happens unless the attempt is still this worker's.
    let margin = fence_margin(ctx.settings.lease, kind.attempt_timeout);
    let owned = match fenced {
        // Started for this worker a moment ago, for the whole lease and timeout.
        Fenced::Since(since)
            if since.elapsed() + margin < ctx.settings.lease.min(kind.attempt_timeout) =>
        {
            Ok(true)
        }
        _ => {
            with_retries("the ownership check before sending", deadline, || {
                ctx.store.owns_attempt(attempt.id, &ctx.settings.id, margin)
            })
            .await
        }
    };
    match owned {
        Ok(true) => {}
        Ok(false) => {
            let error = json!({
                "message": "not sent: the attempt was no longer this worker's to send (its \
                            lease ran short, it was rescued, or its job was cancelled)",
            });
            return not_sent(&ctx, &kind, &attempt, error).await;
        }
        Err(error) => {
            // Never sent. Left `starting`, it is made unknown at its deadline and then found
            // never received (or resolved) like any attempt whose worker died.
            tracing::warn!(error = %Chain(&error), "could not check ownership; not sending");
            return Ending::Unrecorded(error.to_string());
        }
    }

    if attempt.number == 1 && !attempt.hedge {
        let waited = time::OffsetDateTime::now_utc() - job.created_at;
        telemetry::dispatch_latency(Duration::try_from(waited).unwrap_or_default());
    }
    let sent_at = Instant::now();
    let reports_sent = provider.reports_sent(&kind);
    let (sent_tx, mut sent_rx) = oneshot::channel();
    let submit = async {
        match sink {
            Some(sink) => {
                provider
                    .submit_streaming(&request, Some(sent_tx), sink)
                    .await
            }
            None => provider.submit(&request, Some(sent_tx)).await,
        }
    };
    tokio::pin!(submit);
    // The acknowledgement of a request sent is recorded once it has been in flight for
    // ACK_AFTER (at once when a hedge waits on it): an answer that comes sooner is itself
    // the acknowledgement, recorded with the result, one write instead of two.
    let ack_after = if hedge_after.is_some() {
        Duration::ZERO
    } else {
        ACK_AFTER
    };
    let mut sent: Option<Instant> = None;
    let mut acknowledged = false;
    let submitted = loop {
        let ack_at = sent.map(|at| at + ack_after);
        tokio::select! {
            result = &mut submit => break result,
            Ok(()) = &mut sent_rx, if sent.is_none() => sent = Some(Instant::now()),
            () = tokio::time::sleep_until(ack_at.unwrap_or(deadline)), if ack_at.is_some() && !acknowledged => {
                acknowledged = true;
                match acknowledge(&ctx, &attempt, None, hedge_after, deadline).await {
                    Ok(Acknowledged::Running) => {}
                    // The request in flight is dropped: its answer would be discarded anyway.
                    Ok(Acknowledged::JobCancelled) => return Ending::Cancelled,
                    Ok(Acknowledged::NotStarting(state)) => {
                        return abandoned(&format!("the attempt became {state} before it was sent"));
                    }
                    // Still in flight: its answer is worth waiting for and recording.
                    Err(error) => tracing::warn!(error = %Chain(&error), "could not record the acknowledgement"),
                }
            }
            () = tokio::time::sleep_until(deadline) => {
                let limit = if sink.is_some() { "stream_max" } else { "attempt_timeout" };
                if !went_out(reports_sent, sent, &mut sent_rx) {
                    let error = json!({ "message": format!(
                        "not sent: the request had not gone out within {limit} ({budget:?}); \
                         the provider could not be reached in time") });
                    return not_sent(&ctx, &kind, &attempt, error).await;
                }
                return unknown(&ctx, &attempt, json!({ "reason": format!(
                    "no answer within {limit} ({budget:?})") })).await;
            }
            () = abandon.cancelled() => {
                if !went_out(reports_sent, sent, &mut sent_rx) {
                    let error = json!({ "message":
                        "not sent: the worker shut down before the request went out" });
                    return not_sent(&ctx, &kind, &attempt, error).await;
                }
                return unknown(&ctx, &attempt, json!({
                    "reason": "the worker shut down before the provider answered" })).await;
            }
            // The job was cancelled while a synchronous request was in flight: it is
            // dropped. An asynchronous submit is waited for instead: its acknowledgement
            // sees the cancellation and the task it created is cancelled upstream.
            () = stops.cancelled.cancelled(), if acknowledged => {
                return cancelled(&ctx, &kind, &attempt, None, AskUpstream::Ask).await;
            }
        }
    };
    let mut upstream_request_id = None;
    let output = match submitted {
        Ok(Submitted::Output {
            output, request_id, ..
        }) => {
            upstream_request_id = request_id;
            output
        }
        Ok(Submitted::Accepted { task_id }) => {
            // Whether the task id is in the attempt's row: a node that cancels the job later
            // reads it there and asks the provider to cancel the task itself.
            let mut task_recorded = false;
            match acknowledge(&ctx, &attempt, Some(&task_id), hedge_after, deadline).await {
                Ok(Acknowledged::Running) => task_recorded = true,
                Ok(Acknowledged::JobCancelled) => {
                    cancel_upstream(&*provider, &task_id).await;
                    return Ending::Cancelled;
                }
                Ok(Acknowledged::NotStarting(state)) => {
                    return abandoned(&format!(
                        "the attempt became {state} before its task {task_id} was acknowledged; \
                         the task id is stored for whoever resolves it"
                    ));
                }
                // The task id is known here: keep following it, and record its outcome.
                Err(error) => {
                    tracing::warn!(error = %Chain(&error), %task_id, "could not record the task id");
                }
            }
            match follow(&*provider, &task_id, &stops).await {
                // A gateway kind's task result, as its endpoint answers (images: an
                // `ImagesResponse`).
                Followed::Output(output) if kind.is_gateway() => {
                    kind.endpoint.task_output(output, &job.params)
                }
                Followed::Output(output) => output,
                Followed::Failed { public, internal } => {
                    let error =
                        json!({ "message": public, "internal": internal, "task_id": task_id });
                    return fail(&ctx, &kind, &attempt, Unsuccessful::Failed, error).await;
                }
                Followed::Cancelled => {
                    let ask = if task_recorded {
                        AskUpstream::Asked
                    } else {
                        AskUpstream::Ask
                    };
                    return cancelled(&ctx, &kind, &attempt, Some(&task_id), ask).await;
                }
                Followed::Unknown(reason) => {
                    return unknown(
                        &ctx,
                        &attempt,
                        json!({ "reason": reason, "task_id": task_id }),
                    )
                    .await;
                }
            }
        }
        Err(error) if error.is_definite() => {
            if matches!(error, ProviderError::Unreachable(_)) {
                // The provider's own problem, for an operator: at WARN, with what was tried
                // (the error names the URL).
                tracing::warn!(provider = %attempt.provider, %error, "the provider could not be reached");
            }
            let end = if error.spends_key() {
                Unsuccessful::Failed
            } else {
                Unsuccessful::FailedKeyKept
            };
            let mut recorded = error.to_json();
            if matches!(error, ProviderError::Rejected { .. }) {
                // An upstream's refusal may be about onejob's account there (401, 403, 429):
                // the gateway names the provider to its caller.
                recorded["provider"] = json!(attempt.provider);
            }
            return fail(&ctx, &kind, &attempt, end, recorded).await;
        }
        Err(error) => {
            let why = json!({ "reason": error.public(), "internal": error.to_string() });
            return unknown(&ctx, &attempt, why).await;
        }
    };
    telemetry::provider_latency(&attempt.provider, sent_at.elapsed());
    // A gateway caller waiting in this process is told the winning answer itself, so it
    // answers without reading the job back (one database round trip less per call).
    let answer = kind.is_gateway().then(|| Arc::new(output.clone()));
    let ending = finish(&ctx, &kind, &job, &attempt, output, deadline).await;
    if ending == Ending::Won {
        // The caller waiting for this answer gets it, with the upstream's id of its request.
        ctx.hub.watch.answered(job.id, answer, upstream_request_id);
    }
    ending
}

/// Whether the request may have gone out. It has not only where the adapter reports it
/// ([`Provider::reports_sent`]) and its notice is still unfired (`sent_rx` empty): such an
/// adapter fires it when it hands the body to the connection, and until then the upstream
/// has at most a request's head without its body, which it cannot act on. An attempt stopped
/// before is not sent, never `unknown` (docs/design.md §2, invariant 11).
fn went_out(reports: bool, sent: Option<Instant>, sent_rx: &mut oneshot::Receiver<()>) -> bool {
    !reports
        || sent.is_some()
        || !matches!(sent_rx.try_recv(), Err(oneshot::error::TryRecvError::Empty))
}

/// Records the acknowledgement (and task id), retrying while the store is unreachable.
///
/// A try whose reply was lost may have committed. Only this acknowledgement makes a
/// `starting` attempt `running` (or, its job cancelled, `cancelled`), so a retry that finds
/// the attempt so found its own earlier try's commit, and answers what that try did.
async fn acknowledge(
    ctx: &WorkerContext,
    attempt: &AttemptRecord,
    task_id: Option<&str>,
    hedge_after: Option<Duration>,
    deadline: Instant,
) -> Result<Acknowledged, StoreError> {
    let mut tried = false;
    with_retries("the acknowledgement", deadline, || {
        let again = std::mem::replace(&mut tried, true);
        async move {
            let recorded = ctx
                .store
                .acknowledge_attempt(attempt.id, task_id, hedge_after)
                .await;
            match crate::fault::lose_ack_reply(recorded) {
                Ok(Acknowledged::NotStarting(AttemptState::Running)) if again => {
                    Ok(Acknowledged::Running)
                }
                Ok(Acknowledged::NotStarting(AttemptState::Cancelled)) if again => {
                    Ok(Acknowledged::JobCancelled)
                }
                recorded => recorded,
            }
        }
    })
    .await
}

/// Where following a task ended.
enum Followed {
    Output(Value),
    /// The task definitely has no usable result: what the owner and the operator read.
    Failed {
        public: String,
        internal: String,
    },
    /// The job was cancelled while the task ran.
    Cancelled,
    Unknown(String),
}

/// Polls an accepted task until it finishes, the deadline passes, the worker gives up, or
/// the job is cancelled. Each status call is raced against all of these (and bounded by the
/// provider's `request_timeout`), so a hung status endpoint holds nothing up.
async fn follow(provider: &dyn Provider, task_id: &str, stops: &Stops<'_>) -> Followed {
    let mut wait = FIRST_POLL;
    // Why the last status answer could not be read, if it could not: at the deadline that,
    // not "still running", is what the operator needs (a pointer that finds nothing).
    let mut unreadable: Option<String> = None;
    let at_deadline = |unreadable: &Option<String>| match unreadable {
        Some(problem) => Followed::Unknown(format!(
            "task {task_id}: its status could not be read by the attempt's deadline: {problem}"
        )),
        None => Followed::Unknown(format!(
            "task {task_id} still running at the attempt's deadline"
        )),
    };
    loop {
        tokio::select! {
            status = provider.status(task_id) => match status {
                Ok(TaskStatus::Succeeded(output)) => return Followed::Output(output),
                Ok(TaskStatus::Failed(message)) => {
                    return Followed::Failed {
                        public: "the provider reports the task failed".into(),
                        internal: message,
                    };
                }
                Ok(TaskStatus::Running) => unreadable = None,
                Err(ProviderError::Unsupported(_)) => {
                    return Followed::Unknown("the provider cannot report the task's status".into());
                }
                // A finished task whose answer is too large to read has no usable result.
                Err(error @ ProviderError::TooLarge { .. }) => {
                    return Followed::Failed { public: error.public(), internal: error.to_string() };
                }
                // An answer the settings cannot read says nothing about the task either, but
                // is what the deadline reports.
                Err(ProviderError::BadAnswer(problem)) => {
                    if unreadable.as_ref() != Some(&problem) {
                        tracing::warn!(%problem, "status answer not readable");
                    }
                    unreadable = Some(problem);
                }
                // A status call that fails says nothing about the task: keep asking.
                Err(error) => tracing::debug!(%error, "status poll failed"),
            },
            () = tokio::time::sleep_until(stops.deadline) => return at_deadline(&unreadable),
            () = stops.abandon.cancelled() => {
                return Followed::Unknown("the worker shut down while the task was running".into());
            }
            () = stops.cancelled.cancelled() => return Followed::Cancelled,
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = tokio::time::sleep_until(stops.deadline) => return at_deadline(&unreadable),
            () = stops.abandon.cancelled() => {
                return Followed::Unknown("the worker shut down while the task was running".into());
            }
            () = stops.cancelled.cancelled() => return Followed::Cancelled,
        }
        wait = (wait + wait / 2).min(MAX_POLL);
    }
}

/// Validates the output (no fake success), then offers it as the job's result, retrying
/// while the store cannot take it; an answer still unrecorded is held for the reconciler.
///
/// A try whose reply was lost may have won. The retry then finds the job's result already
/// this attempt's, which the rule answers as won again (`completing` in
/// `store/transitions.rs`): no race is lost to the attempt's own answer.
async fn finish(
    ctx: &WorkerContext,
    kind: &Kind,
    job: &JobRecord,
    attempt: &AttemptRecord,
    output: Value,
    deadline: Instant,
) -> Ending {
    // The provider has answered; nothing of it is recorded yet (see `crate::fault`).
    crate::fault::after_answer();
    let by = Resolution::worker();
    let offered = with_retries("the result", deadline, || {
        outcome::offer_in(
            &*ctx.store,
            kind,
            Some(&job.owner.tenant),
            attempt,
            &output,
            &by,
        )
    })
    .await;
    match offered {
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
            Ending::Failed {
                reason: "the output does not pass the kind's output schema".into(),
                status: None,
            }
        }
        Err(error) => {
            tracing::error!(error = %Chain(&error), "could not record the result");
            ctx.unrecorded.keep(UnrecordedAnswer {
                attempt: attempt.clone(),
                kind: kind.name.clone(),
                output,
            });
            Ending::Unrecorded(error.to_string())
        }
    }
}

async fn fail(
    ctx: &WorkerContext,
    kind: &Kind,
    attempt: &AttemptRecord,
    end: Unsuccessful,
    error: Value,
) -> Ending {
    end_with(ctx, kind, attempt, end, error, &Resolution::worker()).await
}

/// Ends an attempt this worker never sent (no provider, the fence refused, or it was stopped
/// before its request went out: see [`went_out`]): only while it
/// is still `starting`, since nobody else may have acted on it yet. The upstream key stays in
/// force (nothing was sent under it); an attempt of a cancelled job ends `cancelled`.
async fn not_sent(
    ctx: &WorkerContext,
    kind: &Kind,
    attempt: &AttemptRecord,
    error: Value,
) -> Ending {
    let by = Resolution::not_sent("never sent by its worker");
    end_with(ctx, kind, attempt, Unsuccessful::FailedKeyKept, error, &by).await
}

/// Who asks the provider to cancel the task of an attempt whose job was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AskUpstream {
    /// The worker: the task id was not in the attempt's row when the job was cancelled.
    Ask,
    /// Already asked: the node that cancelled the job read the task id from the attempt's
    /// row (it was recorded before the cancel committed) and asked the provider itself.
    Asked,
}

/// Ends an attempt of a job cancelled while it ran: the provider is asked to cancel the task
/// (where there is one and the cancelling node could not have asked), and the attempt ends
/// `cancelled`.
async fn cancelled(
    ctx: &WorkerContext,
    kind: &Kind,
    attempt: &AttemptRecord,
    task_id: Option<&str>,
    ask: AskUpstream,
) -> Ending {
    if let (Some(task_id), Some(provider), AskUpstream::Ask) =
        (task_id, ctx.providers.get(&attempt.provider), ask)
    {
        cancel_upstream(&**provider, task_id).await;
    }
    let error =
        json!({ "message": "the job was cancelled while the attempt ran", "task_id": task_id });
    match end_with(
        ctx,
        kind,
        attempt,
        Unsuccessful::Cancelled,
        error,
        &Resolution::worker(),
    )
    .await
    {
        Ending::Failed { .. } => Ending::Cancelled,
        other => other,
    }
}

async fn end_with(
    ctx: &WorkerContext,
    kind: &Kind,
    attempt: &AttemptRecord,
    end: Unsuccessful,
    error: Value,
    by: &Resolution,
) -> Ending {
    let message = error["message"].as_str().unwrap_or("failed").to_owned();
    // `reason`, not `message`: a field named `message` is a second `message` key in a JSON
    // log line, beside the event's own. Operators read the whole error (`internal`).
    let internal = error["internal"].as_str().unwrap_or_default();
    tracing::info!(reason = %message, internal, ?end, "attempt ended without a result");
    let until = Instant::now() + recording::MIN_WINDOW;
    let recorded = with_retries("the failure", until, || {
        outcome::fail(&*ctx.store, kind, attempt, end, error.clone(), by)
    })
    .await;
    match recorded {
        Ok(_) => Ending::Failed {
            reason: message,
            // An upstream's refusal keeps its status (`ProviderError::to_json`).
            status: error["status"]
                .as_u64()
                .and_then(|status| u16::try_from(status).ok()),
        },
        Err(e) => Ending::Unrecorded(e.to_string()),
    }
}

async fn unknown(ctx: &WorkerContext, attempt: &AttemptRecord, why: Value) -> Ending {
    let reason = why["reason"].as_str().unwrap_or("unknown").to_owned();
    tracing::warn!(%reason, "attempt outcome unknown");
    let until = Instant::now() + recording::MIN_WINDOW;
    let marked = with_retries("the unknown outcome", until, || {
        ctx.store.mark_unknown(attempt.id, &why, UnknownBy::Worker)
    })
    .await;
    match marked {
        Ok(became_unknown) => {
            if became_unknown {
                telemetry::attempt_ended(&attempt.provider, "unknown");
            }
            Ending::Unknown(reason)
        }
        Err(e) => Ending::Unrecorded(e.to_string()),
    }
}

fn abandoned(why: &str) -> Ending {
    tracing::warn!(%why, "the attempt is no longer this worker's; stopping without acting on it");
    Ending::Abandoned(why.to_owned())
}

/// Asks the provider to cancel `task_id` (bounded by its `request_timeout`); a failure is
/// logged: the attempt ends cancelled either way, and a result that still comes is discarded.
pub(crate) async fn cancel_upstream(provider: &dyn Provider, task_id: &str) {
    match provider.cancel(task_id).await {
        Ok(()) => tracing::info!(%task_id, "asked the provider to cancel"),
        Err(ProviderError::Unsupported(_)) => {}
        Err(error) => tracing::warn!(%task_id, %error, "upstream cancel failed"),
    }
}
