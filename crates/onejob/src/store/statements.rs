//! The statements the state changes run, written once: each binds its values and reads its
//! rows the same way on every backend, in the SQL the backend spells ([`super::dialect::Dialect::SQL`]).
//!
//! They are methods of a write transaction ([`Tx`]), so the rules in `transitions.rs` decide
//! what is atomic and these only what is said. None of them decides anything.

use std::{collections::HashMap, time::Duration};

use onejob_domain::{AttemptState, JobState, Principal};
use serde_json::Value;
use uuid::Uuid;

use super::{
    AttemptRecord, AttemptStart, Intake, JobRecord, NewEvent, NewJob, StoreError,
    backend::{Backend, Row, Tx},
    bound::Bound,
    records::{storable, storable_text},
    rows,
};

/// Intake's group commit for the stores that write each submission with its own statements
/// ([`Tx::submit_one`]), written once: SQLite (a batch, on its one writer) and Citus (a
/// tenant's share of a batch, on its shard). PostgreSQL's one-statement batch is its own
/// (`postgres/intake.rs`).
///
/// The submissions `jobs` share one transaction on `pool` (`insert_job` the backend's
/// insert, see [`Tx::submit_one`]), in the order given. If it fails in a way a retry may
/// cure ([`StoreError::is_retryable`]), every submission is answered that error; otherwise
/// each is written again alone, in a transaction of its own, so that only a failing one
/// fails (its statements may have failed halfway, its job inserted and its event not: the
/// rollback drops it whole). One result per submission, in order.
pub(crate) async fn submit_together<B: Backend>(
    pool: &sqlx::Pool<B::Db>,
    bound: &Bound,
    insert_job: &'static str,
    jobs: &[&NewJob],
) -> Vec<Result<Intake, StoreError>> {
    let together = submit_in_one::<B>(pool, bound, insert_job, jobs).await;
    match together {
        Ok(written) => written.into_iter().map(Ok).collect(),
        Err(error) if error.is_retryable() || jobs.len() == 1 => vec![Err(error); jobs.len()],
        Err(_) => {
            let mut results = Vec::with_capacity(jobs.len());
            for job in jobs {
                let alone = submit_in_one::<B>(pool, bound, insert_job, &[*job]).await;
                results.push(alone.map(|mut written| written.remove(0)));
            }
            results
        }
    }
}

/// `jobs` submitted in one transaction on `pool`, rolled back whole if one fails.
async fn submit_in_one<B: Backend>(
    pool: &sqlx::Pool<B::Db>,
    bound: &Bound,
    insert_job: &'static str,
    jobs: &[&NewJob],
) -> Result<Vec<Intake>, StoreError> {
    let mut tx = Tx::<B>::begin(pool, bound).await?;
    let mut written = Vec::with_capacity(jobs.len());
    for job in jobs {
        match tx.submit_one(insert_job, job).await {
            Ok(intake) => written.push(intake),
            Err(error) => {
                let _ = tx.rollback().await;
                return Err(error);
            }
        }
    }
    tx.commit().await?;
    Ok(written)
}

/// What the rules read of a job once they hold it: the fields a transition decides on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct JobHead {
    /// The job's state.
    pub state: JobState,
    /// Its version, for the result's compare-and-swap.
    pub version: i64,
    /// Attempts started in this recovery generation and before.
    pub attempts: i32,
    /// Controlled recoveries so far.
    pub recoveries: i32,
    /// The winning attempt, once there is one.
    pub completed_by: Option<Uuid>,
}

fn head<B: Backend>(row: &Row<B>) -> Result<JobHead, StoreError> {
    Ok(JobHead {
        state: rows::state::<B, _>(row, "state")?,
        version: B::int(row, "version")?,
        attempts: B::int32(row, "attempts")?,
        recoveries: B::int32(row, "recoveries")?,
        completed_by: B::opt_uuid(row, "completed_by")?,
    })
}

impl<B: Backend> Tx<B> {
    /// The tenant of a job: the one it was read with in this transaction, else read by the
    /// job's id (an empty tenant, matching no row, when there is no such job).
    pub(crate) async fn job_tenant(&mut self, job_id: Uuid) -> Result<String, StoreError> {
        if let Some(tenant) = self.tenants.get(&job_id) {
            return Ok(tenant.clone());
        }
        let row = self.optional(B::SQL.job_tenant, args![job_id]).await?;
        let tenant = row.map(|row| B::text(&row, "tenant")).transpose()?;
        Ok(self.remember(job_id, tenant))
    }

    /// The tenant of an attempt (its job's), as [`Tx::job_tenant`].
    pub(crate) async fn attempt_tenant(&mut self, attempt_id: Uuid) -> Result<String, StoreError> {
        if let Some(tenant) = self.tenants.get(&attempt_id) {
            return Ok(tenant.clone());
        }
        let row = self
            .optional(B::SQL.attempt_tenant, args![attempt_id])
            .await?;
        let tenant = row.map(|row| B::text(&row, "tenant")).transpose()?;
        Ok(self.remember(attempt_id, tenant))
    }

    /// Keeps a job's or an attempt's tenant for the rest of the transaction (a missing one
    /// is not kept, and is the empty tenant).
    pub(crate) fn remember(&mut self, id: Uuid, tenant: Option<String>) -> String {
        match tenant {
            Some(tenant) => {
                self.tenants.insert(id, tenant.clone());
                tenant
            }
            None => String::new(),
        }
    }

    /// The tenants of these jobs or attempts, all read before in this transaction (a group
    /// reads them with its attempts' jobs), deduplicated.
    pub(crate) fn tenants_of(&self, ids: &[Uuid]) -> Vec<String> {
        let mut tenants: Vec<String> = ids
            .iter()
            .filter_map(|id| self.tenants.get(id).cloned())
            .collect();
        tenants.sort_unstable();
        tenants.dedup();
        tenants
    }

    /// Locks the job for a start unless another transaction holds it: `None` when it is
    /// held (PostgreSQL's `SKIP LOCKED`) or missing. With the head, whether the job is due.
    pub(crate) async fn lock_due_job(
        &mut self,
        job_id: Uuid,
    ) -> Result<Option<(JobHead, bool)>, StoreError> {
        let tenant = self.job_tenant(job_id).await?;
        let row = self
            .optional(B::SQL.lock_due_job, args![job_id, &tenant])
            .await?;
        row.map(|row| Ok((head::<B>(&row)?, B::flag(&row, "due")?)))
            .transpose()
    }

    /// Whether a job with this id exists.
    pub(crate) async fn job_exists(&mut self, job_id: Uuid) -> Result<bool, StoreError> {
        let row = self.one(B::SQL.job_exists, args![job_id]).await?;
        B::flag(&row, "found")
    }

    /// Locks the job (waiting for other holders) and reads its head; `None` if missing.
    pub(crate) async fn lock_job(&mut self, job_id: Uuid) -> Result<Option<JobHead>, StoreError> {
        let tenant = self.job_tenant(job_id).await?;
        let row = self
            .optional(B::SQL.lock_job, args![job_id, &tenant])
            .await?;
        row.as_ref().map(head::<B>).transpose()
    }

    /// Locks the owner's job and reads all of it; `None` if it is not the owner's.
    pub(crate) async fn lock_owned_job(
        &mut self,
        owner: &Principal,
        job_id: Uuid,
    ) -> Result<Option<JobRecord>, StoreError> {
        let sql = B::SQL.lock_owned_job;
        let row = self
            .optional(sql, args![job_id, &owner.tenant, &owner.user])
            .await?;
        if row.is_some() {
            self.remember(job_id, Some(owner.tenant.clone()));
        }
        row.as_ref().map(rows::job::<B>).transpose()
    }

    /// The whole job, read again inside the transaction.
    pub(crate) async fn reload_job(&mut self, job_id: Uuid) -> Result<JobRecord, StoreError> {
        let tenant = self.job_tenant(job_id).await?;
        rows::job::<B>(
            &self
                .one(B::SQL.job_in_tenant, args![job_id, &tenant])
                .await?,
        )
    }

    /// The job of an attempt (which never changes, so it needs no lock); `None` if the
    /// attempt does not exist.
    pub(crate) async fn job_of(&mut self, attempt_id: Uuid) -> Result<Option<Uuid>, StoreError> {
        let row = match self.tenants.get(&attempt_id).cloned() {
            Some(tenant) => {
                let values = args![attempt_id, &tenant];
                self.optional(B::SQL.job_of_in_tenant, values).await?
            }
            None => self.optional(B::SQL.job_of, args![attempt_id]).await?,
        };
        let Some(row) = row else {
            return Ok(None);
        };
        let (job_id, tenant) = (B::uuid(&row, "job_id")?, B::text(&row, "tenant")?);
        self.remember(attempt_id, Some(tenant.clone()));
        self.remember(job_id, Some(tenant));
        Ok(Some(job_id))
    }

    /// An attempt's state.
    pub(crate) async fn attempt_state(
        &mut self,
        attempt_id: Uuid,
    ) -> Result<AttemptState, StoreError> {
        let tenant = self.attempt_tenant(attempt_id).await?;
        let row = self
            .one(B::SQL.attempt_state, args![attempt_id, &tenant])
            .await?;
        rows::state::<B, _>(&row, "state")
    }

    /// The job's `starting`, `running` and `unknown` attempts, oldest first.
    pub(crate) async fn open_attempts(
        &mut self,
        job_id: Uuid,
    ) -> Result<Vec<(Uuid, AttemptState)>, StoreError> {
        let tenant = self.job_tenant(job_id).await?;
        let open = self
            .all(B::SQL.open_attempts, args![job_id, &tenant])
            .await?;
        open.iter()
            .map(|row| Ok((B::uuid(row, "id")?, rows::state::<B, _>(row, "state")?)))
            .collect()
    }

    /// The states of all the job's attempts.
    pub(crate) async fn attempt_states(
        &mut self,
        job_id: Uuid,
    ) -> Result<Vec<AttemptState>, StoreError> {
        let tenant = self.job_tenant(job_id).await?;
        let states = self
            .all(B::SQL.attempt_states, args![job_id, &tenant])
            .await?;
        states
            .iter()
            .map(|row| rows::state::<B, _>(row, "state"))
            .collect()
    }

    /// The job's `starting` and `running` attempts, oldest first.
    pub(crate) async fn live_attempts(
        &mut self,
        job_id: Uuid,
    ) -> Result<Vec<AttemptRecord>, StoreError> {
        let tenant = self.job_tenant(job_id).await?;
        let live = self
            .all(B::SQL.live_attempts, args![job_id, &tenant])
            .await?;
        rows::all::<B, _>(&live, rows::attempt::<B>)
    }

    /// The provider of the job's latest attempt.
    pub(crate) async fn last_provider(
        &mut self,
        job_id: Uuid,
    ) -> Result<Option<String>, StoreError> {
        let tenant = self.job_tenant(job_id).await?;
        let row = self
            .optional(B::SQL.last_provider, args![job_id, &tenant])
            .await?;
        row.map(|row| B::text(&row, "provider")).transpose()
    }

    /// Inserts attempt `number` of `start`'s job, `starting`, with its lease and deadline
    /// counted from the database's clock.
    pub(crate) async fn insert_attempt(
        &mut self,
        start: &AttemptStart,
        number: i32,
    ) -> Result<AttemptRecord, StoreError> {
        self.insert_attempt_as(Uuid::now_v7(), start, number).await
    }

    /// [`Tx::insert_attempt`], the attempt's id chosen by the caller.
    pub(crate) async fn insert_attempt_as(
        &mut self,
        attempt_id: Uuid,
        start: &AttemptStart,
        number: i32,
    ) -> Result<AttemptRecord, StoreError> {
        let tenant = self.job_tenant(start.job_id).await?;
        self.remember(attempt_id, Some(tenant.clone()));
        let values = args![
            attempt_id,
            start.job_id,
            number,
            &start.provider,
            start.hedge,
            &start.worker,
            start.lease,
            start.timeout,
            &start.upstream_key,
            &tenant,
        ];
        rows::attempt::<B>(&self.one(B::SQL.insert_attempt, values).await?)
    }

    /// The job is `running` with one more attempt, and not due.
    pub(crate) async fn mark_job_started(&mut self, job_id: Uuid) -> Result<(), StoreError> {
        let tenant = self.job_tenant(job_id).await?;
        self.execute(B::SQL.mark_job_started, args![job_id, &tenant])
            .await?;
        Ok(())
    }

    /// Stores the attempt's task id unless one is stored; returns the attempt's state.
    pub(crate) async fn keep_task_id(
        &mut self,
        attempt_id: Uuid,
        task_id: Option<&str>,
    ) -> Result<AttemptState, StoreError> {
        // Without a task id there is nothing to store: the state is read, not the row
        // rewritten with what it holds (an update writes a new row version all the same).
        let Some(task_id) = task_id else {
            return self.attempt_state(attempt_id).await;
        };
        let task_id = Some(storable_text(task_id));
        let tenant = self.attempt_tenant(attempt_id).await?;
        let values = args![attempt_id, task_id.as_deref(), &tenant];
        let row = self.one(B::SQL.keep_task_id, values).await?;
        rows::state::<B, _>(&row, "state")
    }

    /// The acknowledged attempt becomes `running`.
    pub(crate) async fn mark_running(&mut self, attempt_id: Uuid) -> Result<(), StoreError> {
        let tenant = self.attempt_tenant(attempt_id).await?;
        self.execute(B::SQL.mark_running, args![attempt_id, &tenant])
            .await?;
        Ok(())
    }

    /// A `starting` attempt acknowledged after its job was cancelled ends `cancelled`, its
    /// key spent.
    pub(crate) async fn cancel_acknowledged(&mut self, attempt_id: Uuid) -> Result<(), StoreError> {
        let tenant = self.attempt_tenant(attempt_id).await?;
        self.execute(B::SQL.cancel_acknowledged, args![attempt_id, &tenant])
            .await?;
        Ok(())
    }

    /// A `running` job becomes due again `after` from now, for a hedge.
    pub(crate) async fn schedule_hedge(
        &mut self,
        job_id: Uuid,
        after: Duration,
    ) -> Result<(), StoreError> {
        let tenant = self.job_tenant(job_id).await?;
        self.execute(B::SQL.schedule_hedge, args![job_id, after, &tenant])
            .await?;
        Ok(())
    }

    /// An open attempt ends `discarded`.
    pub(crate) async fn discard_attempt(&mut self, attempt_id: Uuid) -> Result<(), StoreError> {
        let tenant = self.attempt_tenant(attempt_id).await?;
        self.execute(B::SQL.discard_attempt, args![attempt_id, &tenant])
            .await?;
        Ok(())
    }

    /// The compare-and-swap of the result: the job succeeds with `output` by `attempt_id` if
    /// it is still at `version`, open and without a winner, and the attempt, if still open,
    /// ends `succeeded`. Whether both happened (if not, the caller rolls back).
    pub(crate) async fn swap_result(
        &mut self,
        job_id: Uuid,
        version: i64,
        output: &Value,
        attempt_id: Uuid,
    ) -> Result<bool, StoreError> {
        let tenant = self.job_tenant(job_id).await?;
        let values = args![job_id, version, output, attempt_id, &tenant];
        if self.execute(B::SQL.swap_result, values).await? != 1 {
            return Ok(false);
        }
        let ended = self
            .execute(B::SQL.end_winner, args![attempt_id, &tenant])
            .await?;
        Ok(ended == 1)
    }

    /// The job's `unknown` attempts other than `winner` end `discarded`; returns them.
    pub(crate) async fn discard_unknown_siblings(
        &mut self,
        job_id: Uuid,
        winner: Uuid,
    ) -> Result<Vec<Uuid>, StoreError> {
        let tenant = self.job_tenant(job_id).await?;
        let sql = B::SQL.discard_unknown_siblings;
        rows::ids::<B>(&self.all(sql, args![job_id, winner, &tenant]).await?)
    }

    /// An attempt ends in `state` (failed, rejected, cancelled…) with `error`.
    pub(crate) async fn end_attempt(
        &mut self,
        attempt_id: Uuid,
        state: AttemptState,
        error: &Value,
        key_spent: bool,
    ) -> Result<(), StoreError> {
        let error = storable(error);
        let tenant = self.attempt_tenant(attempt_id).await?;
        let values = args![attempt_id, state.as_str(), &*error, key_spent, &tenant];
        self.execute(B::SQL.end_attempt, values).await?;
        Ok(())
    }

    /// Sets a job's recomputed state: due after `backoff` when `pending`, with `error` (or
    /// none), version bumped.
    pub(crate) async fn set_job_state(
        &mut self,
        job_id: Uuid,
        state: JobState,
        backoff: Duration,
        error: Option<&Value>,
    ) -> Result<(), StoreError> {
        let tenant = self.job_tenant(job_id).await?;
        let values = args![job_id, state.as_str(), backoff, error, &tenant];
        self.execute(B::SQL.set_job_state, values).await?;
        Ok(())
    }

    /// A job without attempt budget ends `failed` with `error`.
    pub(crate) async fn fail_job(&mut self, job_id: Uuid, error: &Value) -> Result<(), StoreError> {
        let tenant = self.job_tenant(job_id).await?;
        self.execute(B::SQL.fail_job, args![job_id, error, &tenant])
            .await?;
        Ok(())
    }

    /// A live attempt ends `discarded` with `error`, if `grace` is `None` (its own worker)
    /// or its lease is still expired (or its deadline more than `grace` past) now. Whether it
    /// changed.
    pub(crate) async fn discard_live(
        &mut self,
        attempt_id: Uuid,
        error: &Value,
        grace: Option<Duration>,
    ) -> Result<bool, StoreError> {
        let tenant = self.attempt_tenant(attempt_id).await?;
        let values = args![attempt_id, error, grace, &tenant];
        Ok(self.execute(B::SQL.discard_live, values).await? > 0)
    }

    /// A live attempt becomes `unknown` with `why`, due for reconciliation now, on the same
    /// condition as [`Tx::discard_live`]. Whether it changed.
    pub(crate) async fn make_unknown(
        &mut self,
        attempt_id: Uuid,
        why: &Value,
        grace: Option<Duration>,
    ) -> Result<bool, StoreError> {
        let tenant = self.attempt_tenant(attempt_id).await?;
        let values = args![attempt_id, why, grace, &tenant];
        Ok(self.execute(B::SQL.make_unknown, values).await? > 0)
    }

    /// The job ends `cancelled`, not due, and its `unknown` attempts with it; returns those.
    pub(crate) async fn cancel_job_row(&mut self, job_id: Uuid) -> Result<Vec<Uuid>, StoreError> {
        let tenant = self.job_tenant(job_id).await?;
        self.execute(B::SQL.cancel_job, args![job_id, &tenant])
            .await?;
        let sql = B::SQL.cancel_unknown_attempts;
        rows::ids::<B>(&self.all(sql, args![job_id, &tenant]).await?)
    }

    /// A failed job goes back to `pending`, due now, in a new recovery generation.
    pub(crate) async fn recover_job_row(&mut self, job_id: Uuid) -> Result<(), StoreError> {
        let tenant = self.job_tenant(job_id).await?;
        self.execute(B::SQL.recover_job, args![job_id, &tenant])
            .await?;
        Ok(())
    }
    /// One submission written one by one: the job inserted by `insert_job` (the backend's
    /// `INSERT … ON CONFLICT DO NOTHING RETURNING` of `?1`–`?10`/`$1`–`$10`: id, tenant,
    /// user, key hash, kind, fingerprint, params, request body, run key, step) unless its key
    /// is taken, else the
    /// job under the key read back and compared; its `created` or `replayed` event written
    /// (a conflict writes nothing).
    pub(crate) async fn submit_one(
        &mut self,
        insert_job: &'static str,
        job: &NewJob,
    ) -> Result<Intake, StoreError> {
        let values = args![
            job.id,
            &job.owner.tenant,
            &job.owner.user,
            &job.key_hash.0[..],
            &job.kind,
            &job.fingerprint.0[..],
            &job.params,
            job.request_body.as_deref(),
            job.run.as_ref().map(|run| &run.key.0[..]),
            job.run.map(|run| i64::from(run.step)),
        ];
        // Its tenant, so that every statement about it names it (on Citus: its shard).
        self.remember(job.id, Some(job.owner.tenant.clone()));
        if let Some(row) = self.optional(insert_job, values).await? {
            let record = rows::job::<B>(&row)?;
            self.insert_event(&job.created_event()).await?;
            // Its first attempt, started before anyone else can see the job: the attempt
            // guard holds by construction (see `StartAtIntake`).
            if let (Some(start), Some(intake)) = (job.attempt_start(), job.start.as_ref()) {
                self.insert_attempt_as(intake.attempt_id, &start, 1).await?;
                self.mark_job_started(job.id).await?;
                if let Some(started) = job.started_event() {
                    self.insert_event(&started).await?;
                }
                return Ok(Intake::Created(self.reload_job(job.id).await?));
            }
            return Ok(Intake::Created(record));
        }
        let key = args![&job.owner.tenant, &job.owner.user, &job.key_hash.0[..]];
        let Some(row) = self.optional(B::SQL.job_by_key, key).await? else {
            return Err(StoreError::Vanished(
                "the job under the key was deleted before it could be read back".into(),
            ));
        };
        let existing = rows::job::<B>(&row)?;
        if job.matches(&existing) {
            self.insert_event(&job.replayed_event(&existing)).await?;
            Ok(Intake::Replayed(existing))
        } else {
            Ok(Intake::Conflict(existing))
        }
    }

    /// Appends an event to the job's log.
    pub(crate) async fn insert_event(&mut self, event: &NewEvent) -> Result<(), StoreError> {
        let actor = event.actor.as_deref().map(storable_text);
        let detail = storable(&event.detail);
        let kind = event.kind.as_str();
        let tenant = match &event.tenant {
            Some(tenant) => tenant.clone(),
            None => self.job_tenant(event.job_id).await?,
        };
        let values = args![
            event.job_id,
            event.attempt_id,
            kind,
            actor.as_deref(),
            &*detail,
            &tenant
        ];
        self.execute(B::SQL.insert_event, values).await?;
        Ok(())
    }

    /// Locks the jobs in the order of their ids and reads their heads; a missing job is
    /// left out.
    pub(crate) async fn lock_jobs(
        &mut self,
        job_ids: &[Uuid],
    ) -> Result<HashMap<Uuid, JobHead>, StoreError> {
        let tenants = self.tenants_of(job_ids);
        let tenants: Vec<Option<&str>> = tenants.iter().map(|t| Some(t.as_str())).collect();
        let heads = self
            .all(B::SQL.lock_jobs, args![job_ids, &tenants[..]])
            .await?;
        heads
            .iter()
            .map(|row| Ok((B::uuid(row, "id")?, head::<B>(row)?)))
            .collect()
    }

    /// The states of these attempts; a missing one is left out.
    pub(crate) async fn attempt_states_of(
        &mut self,
        attempt_ids: &[Uuid],
    ) -> Result<HashMap<Uuid, AttemptState>, StoreError> {
        let tenants = self.tenants_of(attempt_ids);
        let tenants: Vec<Option<&str>> = tenants.iter().map(|t| Some(t.as_str())).collect();
        let states = self
            .all(B::SQL.attempt_states_of, args![attempt_ids, &tenants[..]])
            .await?;
        id_states::<B>(&states)
    }

    /// Stores each attempt's task id unless one is stored; returns their states.
    pub(crate) async fn keep_task_ids(
        &mut self,
        attempt_ids: &[Uuid],
        task_ids: &[Option<&str>],
    ) -> Result<HashMap<Uuid, AttemptState>, StoreError> {
        // Attempts without a task id (every synchronous request's acknowledgement) have
        // nothing to store: their states are read, not their rows rewritten as they are.
        let (with, without): (Vec<_>, Vec<_>) = attempt_ids
            .iter()
            .zip(task_ids)
            .partition(|(_, task_id)| task_id.is_some());
        let mut states = HashMap::with_capacity(attempt_ids.len());
        if !without.is_empty() {
            let ids: Vec<Uuid> = without.iter().map(|(id, _)| **id).collect();
            states.extend(self.attempt_states_of(&ids).await?);
        }
        if with.is_empty() {
            return Ok(states);
        }
        let attempt_ids: Vec<Uuid> = with.iter().map(|(id, _)| **id).collect();
        let attempt_ids = &attempt_ids[..];
        let task_ids: Vec<_> = with.iter().map(|(_, t)| t.map(storable_text)).collect();
        let task_ids: Vec<Option<&str>> = task_ids.iter().map(|t| t.as_deref()).collect();
        let tenants = self.tenants_of(attempt_ids);
        let tenants: Vec<Option<&str>> = tenants.iter().map(|t| Some(t.as_str())).collect();
        let values = args![attempt_ids, &task_ids[..], &tenants[..]];
        states.extend(id_states::<B>(
            &self.all(B::SQL.keep_task_ids, values).await?,
        )?);
        Ok(states)
    }

    /// The acknowledged attempts become `running`.
    pub(crate) async fn mark_all_running(
        &mut self,
        attempt_ids: &[Uuid],
    ) -> Result<(), StoreError> {
        let tenants = self.tenants_of(attempt_ids);
        let tenants: Vec<Option<&str>> = tenants.iter().map(|t| Some(t.as_str())).collect();
        self.execute(B::SQL.mark_all_running, args![attempt_ids, &tenants[..]])
            .await?;
        Ok(())
    }

    /// The compare-and-swap of each job's result ([`Tx::swap_result`], job by job), and each
    /// winner, if still open, ends `succeeded`. Whether all of them went through (if not,
    /// the caller rolls back).
    pub(crate) async fn swap_results(&mut self, swaps: &[Swap<'_>]) -> Result<bool, StoreError> {
        let jobs: Vec<Uuid> = swaps.iter().map(|s| s.job_id).collect();
        let versions: Vec<i64> = swaps.iter().map(|s| s.version).collect();
        let outputs: Vec<&Value> = swaps.iter().map(|s| s.output).collect();
        let winners: Vec<Uuid> = swaps.iter().map(|s| s.attempt_id).collect();
        let tenants = self.tenants_of(&jobs);
        let tenants: Vec<Option<&str>> = tenants.iter().map(|t| Some(t.as_str())).collect();
        let values = args![
            &jobs[..],
            &versions[..],
            &outputs[..],
            &winners[..],
            &tenants[..]
        ];
        if self.all(B::SQL.swap_results, values).await?.len() != swaps.len() {
            return Ok(false);
        }
        let ended = self
            .execute(B::SQL.end_winners, args![&winners[..], &tenants[..]])
            .await?;
        Ok(ended == swaps.len() as u64)
    }

    /// The `unknown` attempts of the swaps' jobs other than their winners end `discarded`;
    /// returns them (attempt, job).
    pub(crate) async fn discard_unknown_siblings_of(
        &mut self,
        swaps: &[Swap<'_>],
    ) -> Result<Vec<(Uuid, Uuid)>, StoreError> {
        let jobs: Vec<Uuid> = swaps.iter().map(|s| s.job_id).collect();
        let winners: Vec<Uuid> = swaps.iter().map(|s| s.attempt_id).collect();
        let tenants = self.tenants_of(&jobs);
        let tenants: Vec<Option<&str>> = tenants.iter().map(|t| Some(t.as_str())).collect();
        let sql = B::SQL.discard_unknown_siblings_of;
        let rows = self
            .all(sql, args![&jobs[..], &winners[..], &tenants[..]])
            .await?;
        rows.iter()
            .map(|row| Ok((B::uuid(row, "id")?, B::uuid(row, "job_id")?)))
            .collect()
    }

    /// Appends events to their jobs' logs, in order, with one statement.
    pub(crate) async fn insert_events(&mut self, events: &[NewEvent]) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let jobs: Vec<Uuid> = events.iter().map(|e| e.job_id).collect();
        let mut tenants = Vec::with_capacity(jobs.len());
        for event in events {
            tenants.push(match &event.tenant {
                Some(tenant) => tenant.clone(),
                None => self.job_tenant(event.job_id).await?,
            });
        }
        let tenants: Vec<Option<&str>> = tenants.iter().map(|t| Some(t.as_str())).collect();
        let attempts: Vec<Option<Uuid>> = events.iter().map(|e| e.attempt_id).collect();
        let kinds: Vec<Option<&str>> = events.iter().map(|e| Some(e.kind.as_str())).collect();
        let actors: Vec<_> = events
            .iter()
            .map(|e| e.actor.as_deref().map(storable_text))
            .collect();
        let actors: Vec<Option<&str>> = actors.iter().map(|a| a.as_deref()).collect();
        let details: Vec<_> = events.iter().map(|e| storable(&e.detail)).collect();
        let details: Vec<&Value> = details.iter().map(|d| &**d).collect();
        let values = args![
            &jobs[..],
            &attempts[..],
            &kinds[..],
            &actors[..],
            &details[..],
            &tenants[..]
        ];
        self.execute(B::SQL.insert_events, values).await?;
        Ok(())
    }
}

/// One compare-and-swap of a group ([`Tx::swap_results`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Swap<'a> {
    /// The job.
    pub job_id: Uuid,
    /// The version it was read at.
    pub version: i64,
    /// The winner's output.
    pub output: &'a Value,
    /// The winner.
    pub attempt_id: Uuid,
}

/// `id, state` rows by id.
fn id_states<B: Backend>(rows: &[Row<B>]) -> Result<HashMap<Uuid, AttemptState>, StoreError> {
    rows.iter()
        .map(|row| Ok((B::uuid(row, "id")?, rows::state::<B, _>(row, "state")?)))
        .collect()
}
