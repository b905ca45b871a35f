//! The gateway's use case (docs/design.md §9): one call to any of its endpoints as one job.
//!
//! A call names a model; the kind serving it (`openai_models`) takes the request, less its
//! delivery (`stream`, `stream_options`), as a job's params under the caller's
//! Idempotency-Key, and the request's text as sent as what its upstream receives. The call
//! then waits, at most `[gateway] wait`, for the job's outcome: its completion, a live
//! stream of its attempt (a caller asking for a stream registers before the job exists,
//! so whichever attempt starts finds it), the stored completion as a stream, a failure
//! told as the upstream's, or the job still running. [`GatewayCalls`] decides all of this;
//! the HTTP adapter (`crate::http::gateway`) only parses the call and shapes the answer.
//!
//! The same holds at every endpoint of the gateway ([`Endpoint`]): a call names the
//! endpoint it came to, and only a kind serving the model there takes it.
//!
//! A new job made by a call on a node whose worker runs in the same process skips dispatch:
//! its first attempt is started with it, in one transaction, in a slot of that worker
//! reserved before, and runs at once (`crate::worker::Handoff`).
//!
//! A call belongs to its job, not to its caller: intake and the hand-off run as a task of
//! their own, so a caller that goes away (its connection closed, the request deadline) drops
//! only its wait. An attempt intake committed is always run, and a stream whose caller left
//! is still read to its end and stored, for the retry to replay.
//!
//! Its tests include properties over generated live streams of every streamed endpoint: a
//! replay, assembled, is what the live stream's callers assembled (`replays`).

use std::{sync::Arc, time::Duration};

use futures::{Stream, StreamExt, stream};
use onejob_domain::{IdempotencyKey, JobState, Principal};
use serde_json::{Map, Value};
use tokio::time::Instant;
use uuid::Uuid;

use super::{Jobs, Submission, SubmitError, Submitted};
use crate::{
    gateway::{
        Endpoint, split_request,
        streams::{Next, StreamEnd, Wanted},
        watch::Watcher,
    },
    kind::Kind,
    store::{JobRecord, StoreError},
    worker::{Hub, Reserved},
};

/// How often a waiting call looks at its job when no notice came (a job worked by another
/// process sends none).
const POLL: Duration = Duration::from_millis(250);

/// The gateway's calls, over the job use cases and this process's live streams and job
/// notices.
#[derive(Clone)]
pub struct GatewayCalls {
    jobs: Jobs,
    hub: Hub,
    allow_keyless: bool,
    wait: Duration,
}

/// Why a call was refused. Nothing was created.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// No Idempotency-Key, and keyless calls are not allowed.
    #[error("send an Idempotency-Key header naming this call, the same on every retry of it")]
    KeyMissing,
    /// The body is not a JSON object.
    #[error("the body must be an OpenAI chat completion request (a JSON object)")]
    NotAnObject,
    /// The request names no model.
    #[error("the request needs a `model` (one of GET /v1/models)")]
    NoModel,
    /// The model is served, but at another endpoint.
    #[error("the model {model:?} is served at {served_at}, not here")]
    OtherEndpoint {
        /// The model asked for.
        model: String,
        /// Where it is served.
        served_at: &'static str,
    },
    /// The request asks for conversation state, which onejob does not keep.
    #[error(
        "`{field}` is not supported: onejob does not keep conversation state yet (each call \
         is one stateless job); send `store: false` (or leave it out) and the whole \
         conversation as `input`"
    )]
    Stateful {
        /// The field (`store`, `previous_response_id`, `conversation`).
        field: &'static str,
    },
    /// A Responses API request asks to run in the background: the upstream would answer
    /// `queued` with no output, and keep the run (and its bill) to itself.
    #[error(
        "`background: true` is not supported: onejob's gateway runs the call and waits for \
         its answer itself (a call still running after the wait answers 409, and its retry \
         under the same Idempotency-Key attaches to it); send it without `background`"
    )]
    Background,
    /// A Responses API request's input refers to an item an upstream stored
    /// (`item_reference`), which onejob neither keeps nor asks upstreams to keep.
    #[error(
        "input item {index} is an `item_reference`: onejob keeps no conversation state and \
         sends every request upstream with `store: false`, so there is nothing to refer to; \
         send `store: false` and the whole conversation as `input` items (the Vercel AI SDK: \
         providerOptions.openai.store = false)"
    )]
    ItemReference {
        /// The item's index in `input`.
        index: usize,
    },
    /// No kind serves the model.
    #[error("the model {model:?} does not exist here; GET /v1/models lists the ones served")]
    UnknownModel {
        /// The model asked for.
        model: String,
        /// The models served.
        models: Vec<String>,
    },
    /// A delivery field has the wrong type.
    #[error("`{field}` must be {expected}")]
    Delivery {
        /// The field.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// The submission was refused (limits, schema, a reused key).
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The process is stopping: the call's intake was not run to its end here.
    #[error("onejob is stopping; send the call again with the same Idempotency-Key")]
    Stopping,
}

/// What a call is answered.
pub struct GatewayAnswer {
    /// The job.
    pub job_id: Uuid,
    /// Whether the key already named the job.
    pub replayed: bool,
    /// The upstream's id of the request that made the answer, where it gave one (a live
    /// success, or a failure's last refusal).
    pub request_id: Option<String>,
    /// The outcome.
    pub outcome: GatewayOutcome,
}

/// The outcome a call is answered with.
pub enum GatewayOutcome {
    /// The winning completion, as JSON.
    Completion(Value),
    /// The winning completion, as the chunks of a stream (the stored one, replayed).
    Chunks(Vec<Value>),
    /// The live stream of the job's attempt, from its first chunk.
    Live(LiveStream),
    /// The job failed.
    Failed(UpstreamFailure),
    /// The job is not finished after the wait (`Running`, `Pending`), awaits proof
    /// (`Unknown`), or was cancelled.
    NotDone(JobState),
}

/// Why a job failed, as its caller is told: its last definite upstream error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamFailure {
    /// The upstream refused onejob's own credentials (`401`, `403`): about onejob's account
    /// with the provider, never the caller's key.
    AccountRefused {
        /// The provider.
        provider: String,
        /// Its status.
        status: u16,
    },
    /// The upstream's rate limit (`429`), and no certified provider took the job over.
    RateLimited {
        /// The provider.
        provider: String,
        /// Its `Retry-After`, in seconds.
        retry_after: Option<u64>,
    },
    /// Another definite status, with what the upstream or onejob said of it.
    Refused {
        /// The status.
        status: u16,
        /// The message.
        message: String,
    },
    /// No definite status (unreachable, unusable answers, …).
    NoAnswer {
        /// What happened.
        message: String,
    },
}

/// A live stream being read: its chunks, then its end. A chat caller that did not ask for
/// the usage (`stream_options.include_usage`) is relayed the chunks without it, as OpenAI
/// streams them (see [`LiveStream::events`]).
pub struct LiveStream {
    wanted: Wanted,
    endpoint: Endpoint,
    include_usage: bool,
}

/// One event of a live stream.
#[derive(Debug, Clone, PartialEq)]
pub enum LiveEvent {
    /// A `chat.completion.chunk`.
    Chunk(Value),
    /// Every chunk was relayed and the answer recorded.
    Done,
    /// The attempt ended without an answer to relay.
    Failed {
        /// What the caller is told, naming the job.
        message: String,
        /// The upstream's definite HTTP status, where its refusal ended the attempt.
        status: Option<u16>,
    },
}

impl LiveStream {
    /// The stream `wanted` names, read by a caller of `endpoint` who asked for the usage or
    /// not.
    pub fn new(wanted: Wanted, endpoint: Endpoint, include_usage: bool) -> Self {
        Self {
            wanted,
            endpoint,
            include_usage,
        }
    }

    /// The events, read as they come. The reader holds the stream while it reads; one that
    /// goes away (the client disconnected) stops reading, and the job goes on.
    ///
    /// onejob always asks a chat upstream for the usage (the job's completion keeps it), so
    /// its chunks carry a `usage` member (`null` in all but the last, the usage chunk without
    /// choices); a chat caller that did not ask is relayed them without it, as OpenAI
    /// streams to such a caller: no usage chunk, no `usage` member.
    pub fn events(self) -> impl Stream<Item = LiveEvent> + Send + 'static {
        let LiveStream {
            wanted,
            endpoint,
            include_usage,
        } = self;
        let strip_usage = endpoint == Endpoint::Chat && !include_usage;
        stream::unfold(
            (wanted, 0usize, false),
            move |(wanted, read, over)| async move {
                if over {
                    return None;
                }
                match wanted.stream().next(read).await {
                    Next::Chunks(chunks) => {
                        let read = read + chunks.len();
                        let events: Vec<LiveEvent> = chunks
                            .into_iter()
                            .filter(|chunk| !(strip_usage && usage_only(chunk)))
                            .map(|mut chunk| {
                                if strip_usage && let Some(chunk) = chunk.as_object_mut() {
                                    chunk.remove("usage");
                                }
                                LiveEvent::Chunk(chunk)
                            })
                            .collect();
                        Some((stream::iter(events), (wanted, read, false)))
                    }
                    Next::End(StreamEnd::Done) => {
                        Some((stream::iter(vec![LiveEvent::Done]), (wanted, read, true)))
                    }
                    Next::End(StreamEnd::Failed { message, status }) => Some((
                        stream::iter(vec![LiveEvent::Failed { message, status }]),
                        (wanted, read, true),
                    )),
                }
            },
        )
        .flatten()
    }
}

/// Whether a streamed chunk is the one that closes a stream asked with `include_usage`: no
/// choices, only the usage. It is relayed only to callers that asked for it, as OpenAI does:
/// a caller that did not reads `choices[0]` of every chunk, as OpenAI's own examples do.
fn usage_only(chunk: &Value) -> bool {
    chunk
        .get("choices")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
        && chunk.get("usage").is_some_and(|usage| !usage.is_null())
}

impl GatewayCalls {
    /// The calls over `jobs` and `hub`; a call waits at most `wait` for its job, and a call
    /// without a key is served (as its own job) only if `allow_keyless`.
    pub fn new(jobs: Jobs, hub: Hub, allow_keyless: bool, wait: Duration) -> Self {
        Self {
            jobs,
            hub,
            allow_keyless,
            wait,
        }
    }

    /// The key a call runs under: the caller's, or, for a call without one where keyless
    /// calls are allowed, a key of its own that nobody can send again.
    pub fn key(&self, sent: Option<IdempotencyKey>) -> Result<IdempotencyKey, GatewayError> {
        match (sent, self.allow_keyless) {
            (Some(key), _) => Ok(key),
            (None, true) => Ok(
                IdempotencyKey::parse(&format!("keyless:{}", Uuid::now_v7()))
                    .expect("a generated key is valid"),
            ),
            (None, false) => Err(GatewayError::KeyMissing),
        }
    }

    /// The model names served, sorted.
    pub fn models(&self) -> Vec<String> {
        self.jobs
            .kinds()
            .models()
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    /// Whether `model` is served.
    pub fn serves(&self, model: &str) -> bool {
        self.jobs.kinds().by_model(model).is_some()
    }

    /// Makes `request` to `endpoint` (its text as `sent`) the job of the kind serving its
    /// model there under `key`, or finds the job the key names, and answers its outcome
    /// after the wait.
    pub async fn call(
        &self,
        endpoint: Endpoint,
        owner: &Principal,
        actor: &str,
        key: &IdempotencyKey,
        request: Value,
        sent: String,
    ) -> Result<GatewayAnswer, GatewayError> {
        let Value::Object(request) = request else {
            return Err(GatewayError::NotAnObject);
        };
        let kind = self.kind_of(endpoint, &request)?;
        check_delivery(endpoint, &request)?;
        check_stateless(endpoint, &request)?;
        let (params, delivery) = split_request(endpoint, request);
        // Registered before the job exists, so whichever attempt starts finds the reader.
        let wanted = delivery
            .stream
            .then(|| self.hub.streams.want(owner, &key.hash()));
        let submission = Submission {
            kind: kind.name.clone(),
            params,
            request_body: Some(sent),
            steps: true,
        };
        // A slot of this process's worker, where one runs and has one free: a new job then
        // starts its first attempt in the transaction that creates it, and runs here at
        // once, without waiting for dispatch.
        let reserved = self.hub.worker.reserve(&kind);
        // Listening before the attempt can start, so that no notice of it is missed.
        let watcher = self.hub.watch.subscribe();
        // Intake, and the hand-off of the attempt it starts, run as a task of their own: a
        // caller that goes away here (its connection closed, the request deadline, a load
        // balancer's timeout) drops only its wait for them. An attempt intake committed is
        // always run.
        let intake = tokio::spawn(start(
            self.jobs.clone(),
            owner.clone(),
            actor.to_owned(),
            key.clone(),
            submission,
            reserved,
        ));
        let submitted = match intake.await {
            Ok(submitted) => submitted?,
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            Err(_) => return Err(GatewayError::Stopping),
        };
        let (job, replayed) = match submitted {
            Submitted::Created(job) => (job, false),
            Submitted::Replayed(job) => (job, true),
        };
        let deadline = Instant::now() + self.wait;
        let job_id = job.id;
        let (settled, request_id) = self
            .settled(owner, job, watcher, deadline, wanted.as_ref())
            .await?;
        let job = match settled {
            Settled::Live => {
                let wanted = wanted.expect("a live stream was wished for");
                return Ok(GatewayAnswer {
                    job_id,
                    replayed,
                    request_id: request_id.as_deref().map(str::to_owned),
                    outcome: GatewayOutcome::Live(LiveStream::new(
                        wanted,
                        endpoint,
                        delivery.include_usage,
                    )),
                });
            }
            Settled::Job(job) => *job,
            // Won in this process while the call waited: answered as it was written.
            Settled::Won(result) => {
                let outcome = if delivery.stream {
                    GatewayOutcome::Chunks(endpoint.events_of(&result, delivery.include_usage))
                } else {
                    GatewayOutcome::Completion(Arc::unwrap_or_clone(result))
                };
                return Ok(GatewayAnswer {
                    job_id,
                    replayed,
                    request_id: request_id.as_deref().map(str::to_owned),
                    outcome,
                });
            }
        };
        let mut answer = GatewayAnswer {
            job_id: job.id,
            replayed,
            request_id: request_id.as_deref().map(str::to_owned),
            outcome: GatewayOutcome::NotDone(job.state),
        };
        answer.outcome = match job.state {
            JobState::Succeeded => {
                let completion = job.result.unwrap_or(Value::Null);
                if delivery.stream {
                    GatewayOutcome::Chunks(endpoint.events_of(&completion, delivery.include_usage))
                } else {
                    GatewayOutcome::Completion(completion)
                }
            }
            JobState::Failed => {
                let (failure, request_id) = failure_of(job.error.as_ref());
                answer.request_id = request_id;
                GatewayOutcome::Failed(failure)
            }
            state => GatewayOutcome::NotDone(state),
        };
        Ok(answer)
    }

    /// The kind serving the request's `model` at `endpoint`.
    fn kind_of(
        &self,
        endpoint: Endpoint,
        request: &Map<String, Value>,
    ) -> Result<Arc<Kind>, GatewayError> {
        let Some(Value::String(model)) = request.get("model") else {
            return Err(GatewayError::NoModel);
        };
        let kind = self.jobs.kinds().by_model(model).cloned().ok_or_else(|| {
            GatewayError::UnknownModel {
                model: model.clone(),
                models: self.models(),
            }
        })?;
        if kind.endpoint != endpoint {
            return Err(GatewayError::OtherEndpoint {
                model: model.clone(),
                served_at: kind.endpoint.path(),
            });
        }
        Ok(kind)
    }

    /// [`Settled::Live`] once an attempt streams (or streamed) into `stream` and is to be
    /// relayed ([`crate::gateway::streams::LiveStream::relays`]); otherwise the job once it
    /// is finished or unknown (told by `watcher`, subscribed before the job could change),
    /// or at `deadline` as it is then, or the answer it won in this process while the call
    /// waited (told by the worker: no need to read the job back); with the upstream's id of
    /// the request that won it, where the upstream gave one.
    async fn settled(
        &self,
        owner: &Principal,
        mut job: JobRecord,
        mut watcher: Watcher,
        deadline: Instant,
        stream: Option<&Wanted>,
    ) -> Result<(Settled, Option<Arc<str>>), StoreError> {
        let mut request_id = None;
        // An attempt streaming for the caller is relayed from its first chunk, also when its
        // answer finished the job before the caller looked (on a busy machine a quick stream
        // can end before the waiting caller runs again).
        let live = |finished: bool| stream.is_some_and(|s| s.stream().relays(finished));
        loop {
            if live(job.state.is_terminal()) {
                return Ok((Settled::Live, request_id));
            }
            if job.state.is_terminal() || job.state == JobState::Unknown {
                return Ok((Settled::Job(Box::new(job)), request_id));
            }
            let started = async {
                match stream {
                    Some(wanted) => {
                        wanted.stream().started().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                won = watcher.changed(job.id) => if let Some(won) = won {
                    request_id = won.request_id.or(request_id);
                    if live(true) {
                        return Ok((Settled::Live, request_id));
                    }
                    if let Some(result) = won.result {
                        return Ok((Settled::Won(result), request_id));
                    }
                },
                () = tokio::time::sleep(POLL) => {}
                () = started => {}
                () = tokio::time::sleep_until(deadline) => {
                    let settled = if live(false) {
                        Settled::Live
                    } else {
                        Settled::Job(Box::new(job))
                    };
                    return Ok((settled, request_id));
                }
            }
            let id = job.id;
            job = self.jobs.get(owner, id).await?.ok_or_else(|| {
                StoreError::Corrupt(format!("job {id} vanished while its caller waited"))
            })?;
        }
    }
}

/// Submits a gateway call's job under `key`, its first attempt started with it where
/// `reserved` holds a slot of this process's worker, and hands that attempt to the worker.
///
/// Run as a task of its own, never as part of the caller's future, so that it ends whatever
/// happens to the caller: an attempt intake committed `starting` always has a runner. Where
/// the store's answer was lost (an error after a commit that may have happened), the
/// reservation looks the attempt up by its id and runs it, or frees its slot
/// ([`Reserved::recover`]).
async fn start(
    jobs: Jobs,
    owner: Principal,
    actor: String,
    key: IdempotencyKey,
    submission: Submission,
    reserved: Option<Reserved>,
) -> Result<Submitted, SubmitError> {
    let start = reserved.as_ref().map(Reserved::start);
    match jobs
        .submit_starting(&owner, &actor, &key, submission, start)
        .await
    {
        Ok((submitted, started)) => {
            if let (Some(reserved), Submitted::Created(job), Some(attempt)) =
                (reserved, &submitted, started)
            {
                reserved.run(job.clone(), attempt);
            }
            Ok(submitted)
        }
        Err(error) => {
            if let (Some(reserved), SubmitError::Store(_)) = (reserved, &error) {
                reserved.recover(owner.tenant);
            }
            Err(error)
        }
    }
}

/// Where waiting for a job ended.
enum Settled {
    /// An attempt streams (or streamed) for the caller: relayed live from its first chunk.
    Live,
    /// The job, as read.
    Job(Box<JobRecord>),
    /// The result its attempt won in this process while the call waited.
    Won(Arc<Value>),
}

/// A Responses API call may not ask for conversation state (`store: true`,
/// `previous_response_id`, `conversation`, an `item_reference` input item) nor to run in the
/// background. Left out, `store` is taken as `false`, and sent upstream so
/// (`crate::provider::model_api`): onejob keeps nothing to continue from, nor lets its
/// upstream keep it.
fn check_stateless(endpoint: Endpoint, request: &Map<String, Value>) -> Result<(), GatewayError> {
    if endpoint != Endpoint::Responses {
        return Ok(());
    }
    if request.get("store") == Some(&Value::Bool(true)) {
        return Err(GatewayError::Stateful { field: "store" });
    }
    for field in ["previous_response_id", "conversation"] {
        if request.get(field).is_some_and(|v| !v.is_null()) {
            return Err(GatewayError::Stateful { field });
        }
    }
    if request.get("background") == Some(&Value::Bool(true)) {
        return Err(GatewayError::Background);
    }
    let items = request.get("input").and_then(Value::as_array);
    if let Some(index) = items.and_then(|items| {
        items
            .iter()
            .position(|item| item.get("type").and_then(Value::as_str) == Some("item_reference"))
    }) {
        return Err(GatewayError::ItemReference { index });
    }
    Ok(())
}

/// `stream` must be a boolean and `stream_options` an object, where given; an endpoint that
/// does not stream refuses `stream: true`.
fn check_delivery(endpoint: Endpoint, request: &Map<String, Value>) -> Result<(), GatewayError> {
    let wrong = |field, expected| Err(GatewayError::Delivery { field, expected });
    if !endpoint.streams() && request.get("stream") == Some(&Value::Bool(true)) {
        return wrong(
            "stream",
            "false here: onejob does not stream this endpoint's answers",
        );
    }
    if request
        .get("stream")
        .is_some_and(|s| !s.is_boolean() && !s.is_null())
    {
        return wrong("stream", "true or false");
    }
    if let Some(options) = request.get("stream_options").filter(|o| !o.is_null()) {
        let Some(options) = options.as_object() else {
            return wrong("stream_options", "an object");
        };
        if options
            .get("include_usage")
            .is_some_and(|u| !u.is_boolean() && !u.is_null())
        {
            return wrong("stream_options.include_usage", "true or false");
        }
    }
    Ok(())
}

/// A failed job's last definite upstream error (from the job's `error`), as its caller is
/// told, with the upstream's id of that request.
fn failure_of(error: Option<&Value>) -> (UpstreamFailure, Option<String>) {
    let last = error
        .and_then(|e| e.get("last_error"))
        .cloned()
        .unwrap_or(Value::Null);
    let text = |field: &str| last.get(field).and_then(Value::as_str).map(str::to_owned);
    let status = last
        .get("status")
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok())
        .filter(|s| (400..600).contains(s));
    let provider = text("provider").unwrap_or_else(|| "its upstream".to_owned());
    let message = text("upstream_message")
        .or_else(|| text("message"))
        .unwrap_or_else(|| "no attempt succeeded".to_owned());
    let failure = match status {
        Some(status @ (401 | 403)) => UpstreamFailure::AccountRefused { provider, status },
        Some(429) => UpstreamFailure::RateLimited {
            provider,
            retry_after: last.get("retry_after").and_then(Value::as_u64),
        },
        Some(status) => UpstreamFailure::Refused { status, message },
        None => UpstreamFailure::NoAnswer { message },
    };
    (failure, text("request_id"))
}

#[cfg(test)]
mod replays;

#[cfg(test)]
mod tests;
