//! An agent run's steps (docs/gateway.md, "Agent runs"): agent frameworks send one
//! Idempotency-Key for every model call of a run, and each call's conversation (chat's and
//! Anthropic's `messages`, the Responses API's `input`) holds the run so far. So a gateway
//! call whose conversation strictly extends the conversation of the run's jobs under its key
//! is the run's next step: a job of its own, under a key derived from the run's key and the
//! step ([`onejob_domain::KeyHash::step`]; the step is its number of conversation items),
//! with its own fingerprint, attempts and answer. The unique key index keeps one job per
//! step, so concurrent callers of one step share its job, and a re-run of the agent replays
//! every stored step and goes on live from the first unanswered one.
//!
//! The run's first call is the job under the key itself. A later call is compared with the
//! run's latest step before it (or the first job): its conversation must begin with that
//! step's conversation, item for item; anything else in the request (tools, `tool_choice`,
//! limits, instructions) may change from step to step, and is part of the step's own
//! fingerprint. A request no longer than the first job's conversation is not a step: under
//! the key it is the same intent or a conflict, as ever. The same step with other params,
//! and a longer conversation that changes an earlier item, are refused, naming the step.

use onejob_domain::{EventKind, IdempotencyKey, changed_paths};
use serde_json::json;

use super::{Jobs, SubmitError, Submitted};
use crate::{
    kind::Kind,
    store::{AttemptRecord, Intake, JobRecord, NewEvent, NewJob, RunStep},
    telemetry,
};

/// What one step's submission answers: as [`Jobs::submit_starting`] does.
type Stepped = (Submitted, Option<AttemptRecord>);

impl Jobs {
    /// `job`, whose key names `first` with another request, as the next step of the agent
    /// run `first` began, where its conversation is longer than `first`'s (see the module
    /// doc): the step's job created or found, or the step refused. `None`: it is no step
    /// (another kind, no conversation, or none longer than the first's), and the key's
    /// conflict is the caller's to report.
    pub(super) async fn submit_step(
        &self,
        kind: &Kind,
        job: &NewJob,
        key: &IdempotencyKey,
        first: &JobRecord,
    ) -> Result<Option<Stepped>, SubmitError> {
        let endpoint = kind.endpoint;
        let (Some(items), Some(first_items)) = (
            endpoint.conversation(&job.params),
            endpoint.conversation(&first.params),
        ) else {
            return Ok(None);
        };
        if !kind.is_gateway() || first.kind != job.kind || items.len() <= first_items.len() {
            return Ok(None);
        }
        let Ok(step) = i32::try_from(items.len()) else {
            return Ok(None);
        };
        let run_key = key.hash();
        let steps = self.store.run_steps(&job.owner, &run_key).await?;
        let mut submitted = job.clone();
        submitted.key_hash = run_key.step(step.unsigned_abs());
        submitted.run = Some(RunStep { key: run_key, step });
        // A step not stored yet must extend the run's latest step before it; one stored
        // already was checked so when it was made, and is replayed or refused as any job.
        if !steps
            .iter()
            .any(|s| s.run.is_some_and(|run| run.step == step))
        {
            let previous = steps
                .iter()
                .rfind(|s| s.run.is_some_and(|run| run.step < step))
                .unwrap_or(first);
            let previous_items = endpoint.conversation(&previous.params).unwrap_or_default();
            let member = endpoint.conversation_member().unwrap_or_default();
            let changed: Vec<String> = previous_items
                .iter()
                .zip(&items)
                .enumerate()
                .filter(|(_, (stored, sent))| stored != sent)
                .map(|(i, _)| format!("/{member}/{i}"))
                .collect();
            if !changed.is_empty() {
                let first_step = i32::try_from(first_items.len()).unwrap_or(step);
                let previous_step = previous.run.map_or(first_step, |r| r.step);
                self.log_conflict(previous, job, step, &changed).await?;
                telemetry::submitted("key_conflict");
                return Err(SubmitError::NotAnExtension {
                    job_id: previous.id,
                    step: previous_step,
                    changed,
                });
            }
        }
        match self.store.create_or_replay(submitted.clone()).await? {
            Intake::Created(record) => {
                telemetry::submitted("created");
                let started = submitted.started_attempt(&record);
                Ok(Some((Submitted::Created(record), started)))
            }
            Intake::Replayed(record) => {
                telemetry::submitted("replayed");
                Ok(Some((Submitted::Replayed(record), None)))
            }
            Intake::Conflict(existing) => {
                let changed = changed_paths(&existing.params, &job.params, None);
                self.log_conflict(&existing, job, step, &changed).await?;
                telemetry::submitted("key_conflict");
                Err(SubmitError::StepReused {
                    job_id: existing.id,
                    step,
                    changed,
                })
            }
        }
    }

    /// The `key_conflict` event on `existing` of a step refused under its key.
    async fn log_conflict(
        &self,
        existing: &JobRecord,
        job: &NewJob,
        step: i32,
        changed: &[String],
    ) -> Result<(), SubmitError> {
        self.store
            .append_event(NewEvent {
                tenant: Some(existing.owner.tenant.clone()),
                job_id: existing.id,
                attempt_id: None,
                kind: EventKind::KeyConflict,
                actor: Some(job.actor.clone()),
                detail: json!({
                    "kind_changed": false,
                    "changed": changed,
                    "step": step,
                    "submitted_fingerprint": job.fingerprint.to_string(),
                }),
            })
            .await?;
        Ok(())
    }

    /// The steps of the owner's agent run under `key`, in order: the job under the key
    /// itself, then each later step's; empty when the key names no job.
    pub async fn run(
        &self,
        owner: &onejob_domain::Principal,
        key: &IdempotencyKey,
    ) -> Result<Vec<JobRecord>, crate::store::StoreError> {
        let Some(first) = self.store.job_by_key(owner, &key.hash()).await? else {
            return Ok(Vec::new());
        };
        let mut steps = vec![first];
        steps.extend(self.store.run_steps(owner, &key.hash()).await?);
        Ok(steps)
    }
}

/// Where a job stands in its agent run: its step, and the steps before and after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPlace {
    /// Its step.
    pub step: i32,
    /// The step before it, if any.
    pub previous: Option<Neighbour>,
    /// The step after it, if any.
    pub next: Option<Neighbour>,
}

/// A neighbouring step of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neighbour {
    /// Its step.
    pub step: i32,
    /// Its job.
    pub id: uuid::Uuid,
}

impl Jobs {
    /// Where `job` stands in its agent run, if it is in one: a later step, or the first job
    /// of a key whose run has later steps.
    pub async fn run_place(
        &self,
        job: &JobRecord,
    ) -> Result<Option<RunPlace>, crate::store::StoreError> {
        let run_key = job.run.map_or(job.key_hash, |run| run.key);
        let later = self.store.run_steps(&job.owner, &run_key).await?;
        if later.is_empty() {
            return Ok(None);
        }
        let mut steps: Vec<Neighbour> = Vec::with_capacity(later.len() + 1);
        let first = match job.run {
            None => Some(job.clone()),
            Some(_) => self.store.job_by_key(&job.owner, &run_key).await?,
        };
        if let Some(first) = first {
            let kind = self.kinds.get(&first.kind).map(|k| &**k);
            steps.push(Neighbour {
                step: step_of(kind, &first).unwrap_or(0),
                id: first.id,
            });
        }
        steps.extend(later.iter().filter_map(|s| {
            Some(Neighbour {
                step: s.run?.step,
                id: s.id,
            })
        }));
        let Some(at) = steps.iter().position(|s| s.id == job.id) else {
            return Ok(None);
        };
        Ok(Some(RunPlace {
            step: steps[at].step,
            previous: at.checked_sub(1).map(|i| steps[i]),
            next: steps.get(at + 1).copied(),
        }))
    }
}

/// The step of a job in its run: a later step's own, else (the run's first job, or a job
/// that began none) its number of conversation items, where its kind's requests have a
/// conversation.
pub fn step_of(kind: Option<&Kind>, job: &JobRecord) -> Option<i32> {
    if let Some(run) = job.run {
        return Some(run.step);
    }
    let items = kind?.endpoint.conversation(&job.params)?;
    i32::try_from(items.len()).ok()
}
