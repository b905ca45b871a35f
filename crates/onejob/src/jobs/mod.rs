//! The job use cases over a store: what clients, operators and the dashboard can do, each
//! answering a typed error that says what went wrong (never an HTTP problem).
//!
//! This is the layer every adapter stands on: the HTTP API and the dashboard (`crate::http`),
//! the gateway and the CLI reach the store only through [`Jobs`] (and [`keys::ApiKeys`],
//! which `onejob keys` binds to a database it opens without the rest of the
//! configuration). Opening, migrating and checking the database itself is start-up's
//! (`crate::app`). The worker's loop is the one exception, on purpose (see the crate's
//! layout). This module owns intake and
//! reading one job: submit (create or replay), read, look up by key. It validates before it
//! writes, so a refused request never burns its key: unknown kind, params past the limits and
//! schema violations are all rejected before the store is touched. The rest is one concept
//! per file:
//! * [`lifecycle`]: the owner cancels a job (its live attempts' providers are asked to cancel
//!   upstream) or retries a failed one;
//! * [`resolution`]: an operator resolves an `unknown` attempt out of band;
//! * [`runs`]: an agent run's later model calls under its one key, each a step of its own;
//! * [`listing`]: jobs, attempts and event logs, paged, for the API and the dashboard;
//! * [`certificates`]: the `onejob verify` runs recorded, and read (paged, with whether
//!   each certifies now; whole, for failover);
//! * [`keys`]: API keys issued, listed and revoked by operators;
//! * [`gateway`]: an OpenAI chat call as one job, waited for, streamed or answered;
//! * [`health`]: what the probes and metrics read (the database answers, unknown attempts).

pub mod certificates;
pub mod gateway;
pub mod health;
pub mod keys;
pub mod lifecycle;
pub mod listing;
pub mod resolution;
pub mod runs;

use std::sync::Arc;

use onejob_domain::{
    EventKind, IdempotencyKey, ParamsError, ParamsLimits, Principal, changed_paths,
};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    gateway::watch::JobWatch,
    kind::{FieldError, Kinds},
    provider::Providers,
    store::{AttemptRecord, Intake, JobRecord, NewEvent, NewJob, StartAtIntake, Store, StoreError},
    telemetry,
};

/// A submission: which kind of job, with which params.
#[derive(Debug, Clone)]
pub struct Submission {
    /// The job's kind.
    pub kind: String,
    /// Its params.
    pub params: Value,
    /// The request as the caller sent it, for a gateway job: forwarded upstream as it is
    /// (see `crate::gateway::request`); `None` for every other job.
    pub request_body: Option<String>,
    /// Whether a request whose conversation extends the conversation of the job already
    /// under its key is that agent run's next step ([`runs`]): the gateway's calls.
    pub steps: bool,
}

/// A submission that was accepted.
#[derive(Debug, Clone)]
pub enum Submitted {
    /// A new job was created.
    Created(JobRecord),
    /// The key and fingerprint match an existing job; nothing new runs.
    Replayed(JobRecord),
}

/// Why a submission was refused. Nothing was created.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The kind is not configured.
    #[error("unknown kind {kind:?}")]
    UnknownKind {
        /// The submitted kind.
        kind: String,
        /// The configured kinds.
        known: Vec<String>,
    },
    /// The params break an explicit limit.
    #[error(transparent)]
    ParamsLimit(#[from] ParamsError),
    /// The params fail the kind's schema.
    #[error("params fail the kind's schema")]
    ParamsSchema(Vec<FieldError>),
    /// The key's agent run already has this step (as many conversation items) with other
    /// params.
    #[error("step {step} of the agent run under this idempotency key was sent with other params")]
    StepReused {
        /// The step's job.
        job_id: Uuid,
        /// The step.
        step: i32,
        /// JSON Pointers of the params that differ (never their values).
        changed: Vec<String>,
    },
    /// The request's conversation is longer than that of the agent run under its key, but
    /// does not extend it: an earlier item differs.
    #[error("the conversation does not extend the agent run under this idempotency key")]
    NotAnExtension {
        /// The run's job whose conversation it was compared with (the latest step before).
        job_id: Uuid,
        /// That job's step (its number of conversation items).
        step: i32,
        /// JSON Pointers of the conversation items that differ.
        changed: Vec<String>,
    },
    /// The key already names a job with another kind or fingerprint.
    #[error("the idempotency key is already used for a different request")]
    KeyReused {
        /// The job the key belongs to.
        job_id: Uuid,
        /// Whether the kind differs.
        kind_changed: bool,
        /// JSON Pointers of the params that differ (never their values).
        changed: Vec<String>,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How many times intake tries a submission whose key's job retention deleted meanwhile.
const INTAKE_TRIES: u32 = 3;

/// The job use cases, bound to one store, one set of kinds and the providers behind them.
///
/// The store stays private: an adapter asks for a use case, never for the store.
#[derive(Clone)]
pub struct Jobs {
    store: Arc<dyn Store>,
    kinds: Kinds,
    limits: ParamsLimits,
    providers: Providers,
    watch: JobWatch,
}

impl Jobs {
    /// Binds the use cases to a store and kinds, the providers (asked to cancel upstream,
    /// and whose settings certificates are made against) and the job change notices a
    /// change made here is announced on.
    pub fn new(
        store: Arc<dyn Store>,
        kinds: Kinds,
        limits: ParamsLimits,
        providers: Providers,
        watch: JobWatch,
    ) -> Self {
        Self {
            store,
            kinds,
            limits,
            providers,
            watch,
        }
    }

    /// The kinds.
    pub fn kinds(&self) -> &Kinds {
        &self.kinds
    }

    /// Submits a job under `key`: creates it, or answers the job the key already names.
    pub async fn submit(
        &self,
        owner: &Principal,
        actor: &str,
        key: &IdempotencyKey,
        submission: Submission,
    ) -> Result<Submitted, SubmitError> {
        let (submitted, _) = self
            .submit_starting(owner, actor, key, submission, None)
            .await?;
        Ok(submitted)
    }

    /// [`Jobs::submit`], and a job it creates starts its first attempt as `start` says, in
    /// the transaction that creates it ([`StartAtIntake`]), where the store can: that
    /// attempt is answered beside the job, for the caller to run at once. `None` beside a
    /// created job: it waits for dispatch like any other.
    pub async fn submit_starting(
        &self,
        owner: &Principal,
        actor: &str,
        key: &IdempotencyKey,
        submission: Submission,
        start: Option<StartAtIntake>,
    ) -> Result<(Submitted, Option<AttemptRecord>), SubmitError> {
        let kind = self
            .kinds
            .get(&submission.kind)
            .ok_or_else(|| SubmitError::UnknownKind {
                kind: submission.kind.clone(),
                known: self.kinds.names().into_iter().map(str::to_owned).collect(),
            })?;
        self.limits.check(&submission.params)?;
        kind.check_params(&submission.params)
            .map_err(SubmitError::ParamsSchema)?;
        let submission_steps = submission.steps;
        let job = NewJob {
            id: Uuid::now_v7(),
            owner: owner.clone(),
            key_hash: key.hash(),
            kind: kind.name.clone(),
            fingerprint: kind.fingerprint(&submission.params),
            params: submission.params,
            request_body: submission.request_body,
            run: None,
            actor: actor.to_owned(),
            start,
        };
        // A job retention deletes between intake's steps leaves its key naming nothing:
        // intake then tries again, and creates the job anew.
        let mut tries = 0;
        loop {
            tries += 1;
            let again = tries < INTAKE_TRIES;
            let intake = self.store.create_or_replay(job.clone()).await;
            let started = job.start.is_some() && matches!(intake, Ok(Intake::Created(_)));
            let intake = match crate::fault::lose_intake_reply(intake, started) {
                Err(StoreError::Vanished(_)) if again => continue,
                intake => intake?,
            };
            let existing = match intake {
                Intake::Created(record) => {
                    telemetry::submitted("created");
                    let started = job.started_attempt(&record);
                    return Ok((Submitted::Created(record), started));
                }
                Intake::Replayed(record) => {
                    telemetry::submitted("replayed");
                    return Ok((Submitted::Replayed(record), None));
                }
                Intake::Conflict(existing) => existing,
            };
            if submission_steps
                && let Some(step) = self.submit_step(kind, &job, key, &existing).await?
            {
                return Ok(step);
            }
            let kind_changed = existing.kind != job.kind;
            let fields = if kind_changed {
                None
            } else {
                kind.intent_fields.as_deref()
            };
            let changed = changed_paths(&existing.params, &job.params, fields);
            let logged = self
                .store
                .append_event(NewEvent {
                    tenant: None,
                    job_id: existing.id,
                    attempt_id: None,
                    kind: EventKind::KeyConflict,
                    actor: Some(actor.to_owned()),
                    detail: json!({
                        "kind_changed": kind_changed,
                        "changed": changed,
                        "submitted_fingerprint": job.fingerprint.to_string(),
                    }),
                })
                .await;
            match logged {
                Err(StoreError::Vanished(_)) if again => continue,
                logged => logged?,
            }
            telemetry::submitted("key_conflict");
            return Err(SubmitError::KeyReused {
                job_id: existing.id,
                kind_changed,
                changed,
            });
        }
    }

    /// The owner's job, or `None` (missing and foreign jobs look the same).
    pub async fn get(&self, owner: &Principal, id: Uuid) -> Result<Option<JobRecord>, StoreError> {
        self.store.job(owner, id).await
    }

    /// The owner's job under `key`.
    pub async fn by_key(
        &self,
        owner: &Principal,
        key: &IdempotencyKey,
    ) -> Result<Option<JobRecord>, StoreError> {
        self.store.job_by_key(owner, &key.hash()).await
    }
}
