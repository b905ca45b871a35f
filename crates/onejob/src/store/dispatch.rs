//! What workers, the rescuer and the reconciler read and write beside the state changes:
//! due jobs, the send fence, heartbeats, claims of unknown attempts, late task ids. Never
//! used with a client's principal.

use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

use super::{
    AttemptRecord, JobRecord, StoreError, Woken,
    backend::{Backend, Row, Variant, read_all, read_optional, write, write_all},
    grouped::Fence,
    records::storable_text,
    rows,
    spanning::{ByShard, read_spanning},
};

/// The ids of rows with `id` and `tenant` (due jobs), each one's tenant noted where the
/// store keeps them ([`Backend::tenants`]): the statements that follow about the job then
/// name its tenant (on Citus, they run on its shard alone).
fn noting_tenants<B: Backend>(store: &B, rows: &[Row<B>]) -> Result<Vec<Uuid>, StoreError> {
    rows.iter()
        .map(|row| {
            let id = B::uuid(row, "id")?;
            if store.tenants().is_some() {
                store.note_tenant(id, &B::text(row, "tenant")?);
            }
            Ok(id)
        })
        .collect()
}

/// The worker's statements outside [`super::Transitions`].
#[async_trait]
pub trait Dispatch: Send + Sync {
    /// Ids of jobs whose dispatch time has come, oldest first. Only candidates:
    /// [`super::Transitions::start_attempt`] decides.
    async fn due_jobs(&self, limit: u32) -> Result<Vec<Uuid>, StoreError>;

    /// [`Dispatch::due_jobs`] without the new jobs (`pending`, never attempted) of `kinds`:
    /// what is left for one-by-one claims beside batches of first attempts.
    async fn due_others(&self, limit: u32, kinds: &[String]) -> Result<Vec<Uuid>, StoreError>;

    /// A job by id, whoever owns it.
    async fn job_for_dispatch(&self, id: Uuid) -> Result<Option<JobRecord>, StoreError>;

    /// All attempts of a job, oldest first.
    async fn job_attempts(&self, job_id: Uuid) -> Result<Vec<AttemptRecord>, StoreError>;

    /// The fence before an attempt's irreversible send: whether `worker` still holds its
    /// `starting` attempt with at least `margin` of lease left and at least `margin` before
    /// its deadline, and its job is not cancelled. A rescuer makes an attempt unknown only
    /// once its lease expired (a conditional update on the database's clock), so an owner
    /// that finds `margin` left cannot lose the attempt for that long; and no attempt is sent
    /// after (or just before) its deadline, when "never received" would soon be believed of
    /// a request still on its way.
    async fn owns_attempt(
        &self,
        attempt_id: Uuid,
        worker: &str,
        margin: Duration,
    ) -> Result<bool, StoreError>;

    /// Renews the lease of every live attempt `worker` holds; returns those of them whose
    /// job was cancelled meanwhile (the worker stops them).
    async fn heartbeat(&self, worker: &str, lease: Duration) -> Result<Vec<Uuid>, StoreError>;

    /// Claims up to `limit` `unknown` attempts due for reconciliation, each for `lease`: its
    /// check is counted ([`AttemptRecord::reconcile_checks`]) and it is not due again before
    /// the lease ends, so no other node (or this one) checks or re-sends it meanwhile. The
    /// claimer bounds its check by less than the lease, then sets the next check with
    /// [`Dispatch::recheck_unknown_later`] unless the check resolved it.
    async fn claim_unknown(
        &self,
        limit: u32,
        lease: Duration,
    ) -> Result<Vec<AttemptRecord>, StoreError>;

    /// Sets the next check of an attempt whose check (the `check`-th, as claimed) left it
    /// `unknown`: after `backoff`, doubling with each check, at most `max_backoff`. Does
    /// nothing if the attempt is no longer `unknown` or was claimed again since (its lease
    /// ran out): that claimer's lease stands. Whether it applied.
    async fn recheck_unknown_later(
        &self,
        attempt_id: Uuid,
        check: i32,
        backoff: Duration,
        max_backoff: Duration,
    ) -> Result<bool, StoreError>;

    /// Stores a task id learned late (from a lookup by idempotency key, or a re-send), in
    /// whatever state the attempt is; a task id already stored is kept.
    async fn set_task_id(&self, attempt_id: Uuid, task_id: &str) -> Result<(), StoreError>;

    /// Moves a live attempt's deadline to `within` from now: an attempt streamed to a
    /// gateway caller is bounded by its stream's limits, not by `attempt_timeout`, and must
    /// not be rescued as overdue by another node while it still streams. An attempt no
    /// longer live is left as it is.
    async fn extend_deadline(&self, attempt_id: Uuid, within: Duration) -> Result<(), StoreError>;

    /// Live attempts (id and provider) whose lease expired, or whose deadline passed more
    /// than `grace` ago.
    async fn expired_attempts(&self, grace: Duration) -> Result<Vec<(Uuid, String)>, StoreError>;

    /// Pushes a due job's dispatch time `delay` into the future, if the job is still at
    /// `version` (a job that changed meanwhile keeps its new dispatch time).
    async fn defer_dispatch(
        &self,
        job_id: Uuid,
        version: i64,
        delay: Duration,
    ) -> Result<bool, StoreError>;

    /// How long until the earliest job with a dispatch time is due (zero if one is due now);
    /// `None` if no job waits for dispatch.
    async fn next_due_in(&self) -> Result<Option<Duration>, StoreError>;

    /// Waits until work may have become due (a wake-up from this or another node), or
    /// `max_wait`; says whether only new jobs were created ([`Woken`]).
    async fn wait_for_work(&self, max_wait: Duration) -> Woken;
}

#[async_trait]
impl<B: Backend> Dispatch for B {
    async fn due_jobs(&self, limit: u32) -> Result<Vec<Uuid>, StoreError> {
        let due = read_spanning(self, B::SQL.due_jobs, |r| r.due_jobs, args![limit]).await?;
        noting_tenants(self, &due)
    }

    async fn due_others(&self, limit: u32, kinds: &[String]) -> Result<Vec<Uuid>, StoreError> {
        let kinds: Vec<Option<&str>> = kinds.iter().map(|k| Some(k.as_str())).collect();
        let args = args![limit, &kinds[..]];
        let due = read_spanning(self, B::SQL.due_others, |r| r.due_others, args).await?;
        noting_tenants(self, &due)
    }

    async fn job_for_dispatch(&self, id: Uuid) -> Result<Option<JobRecord>, StoreError> {
        // Where the tenant was noted (a due job's, say), the read names it: on Citus it then
        // runs on the job's shard alone.
        let row = match self.tenant_of(id) {
            Some(tenant) => read_optional(self, B::SQL.job_in_tenant, args![id, &tenant]).await?,
            None => read_optional(self, B::SQL.job_by_id, args![id]).await?,
        };
        row.as_ref().map(rows::job::<B>).transpose()
    }

    async fn job_attempts(&self, job_id: Uuid) -> Result<Vec<AttemptRecord>, StoreError> {
        let attempts = match self.tenant_of(job_id) {
            Some(tenant) => {
                let args = args![job_id, &tenant];
                read_all(self, B::SQL.job_attempts_in_tenant, args).await?
            }
            None => read_all(self, B::SQL.job_attempts, args![job_id]).await?,
        };
        rows::all::<B, _>(&attempts, rows::attempt::<B>)
    }

    async fn owns_attempt(
        &self,
        attempt_id: Uuid,
        worker: &str,
        margin: Duration,
    ) -> Result<bool, StoreError> {
        let fence = Fence {
            attempt_id,
            worker: worker.to_owned(),
            margin,
        };
        self.fences().submit(fence).await
    }

    async fn heartbeat(&self, worker: &str, lease: Duration) -> Result<Vec<Uuid>, StoreError> {
        if self.variant() == Variant::Citus {
            // Tenant by tenant, each renewal (and the read of its cancelled jobs) on its
            // shard, each its own transaction; a tenant whose renewal fails (its worker node
            // down, say) does not keep the others' from being renewed: their cancelled
            // attempts are answered, the error only when no tenant's renewal went through.
            let live = |r: &ByShard| r.live_tenants;
            let tenants = read_spanning(self, B::SQL.live_tenants, live, args![worker]).await?;
            let (mut cancelled, mut renewed_any, mut failed) = (Vec::new(), false, None);
            for row in &tenants {
                let tenant = B::text(row, "tenant")?;
                let renewed = async {
                    let mut tx = self.begin().await?;
                    tx.execute(B::SQL.renew_tenant_leases, args![worker, lease, &tenant])
                        .await?;
                    let sql = B::SQL.cancelled_tenant_leases;
                    let cancelled = tx.all(sql, args![worker, &tenant]).await?;
                    tx.commit().await?;
                    rows::ids::<B>(&cancelled)
                }
                .await;
                match renewed {
                    Ok(ids) => {
                        for id in &ids {
                            self.note_tenant(*id, &tenant);
                        }
                        cancelled.extend(ids);
                        renewed_any = true;
                    }
                    Err(error) => {
                        tracing::warn!(%tenant, error = %error, "renewing a tenant's leases failed");
                        failed.get_or_insert(error);
                    }
                }
            }
            return match failed {
                Some(error) if !renewed_any => Err(error),
                _ => Ok(cancelled),
            };
        }
        let mut tx = self.begin().await?;
        tx.execute(B::SQL.renew_leases, args![worker, lease])
            .await?;
        let cancelled = tx.all(B::SQL.cancelled_leases, args![worker]).await?;
        tx.commit().await?;
        rows::ids::<B>(&cancelled)
    }

    async fn claim_unknown(
        &self,
        limit: u32,
        lease: Duration,
    ) -> Result<Vec<AttemptRecord>, StoreError> {
        if self.variant() == Variant::Citus {
            // Tenant by tenant, each claim on its shard, until the limit is reached. A tenant
            // whose claim fails costs only its own attempts: those claimed are answered (they
            // are this worker's now, under lease), the error only when none was.
            let due = |r: &ByShard| r.unknown_due_tenants;
            let tenants =
                read_spanning(self, B::SQL.unknown_due_tenants, due, args![limit]).await?;
            let mut claimed = Vec::new();
            let mut failed = None;
            for row in &tenants {
                let left = limit.saturating_sub(claimed.len() as u32);
                if left == 0 {
                    break;
                }
                let tenant = B::text(row, "tenant")?;
                let batch = async {
                    let mut tx = self.begin().await?;
                    let locked = tx
                        .all(B::SQL.lock_tenant_unknown, args![left, &tenant])
                        .await?;
                    let ids = rows::ids::<B>(&locked)?;
                    let sql = B::SQL.claim_locked_unknown;
                    let batch = tx.all(sql, args![&ids[..], lease, &tenant]).await?;
                    tx.commit().await?;
                    rows::all::<B, _>(&batch, rows::attempt::<B>)
                }
                .await;
                match batch {
                    Ok(batch) => {
                        for attempt in &batch {
                            self.note_tenant(attempt.id, &tenant);
                            self.note_tenant(attempt.job_id, &tenant);
                        }
                        claimed.extend(batch);
                    }
                    Err(error) => {
                        failed.get_or_insert(error);
                    }
                }
            }
            return match failed {
                Some(error) if claimed.is_empty() => Err(error),
                _ => Ok(claimed),
            };
        }
        let claimed = write_all(self, B::SQL.claim_unknown, args![limit, lease]).await?;
        rows::all::<B, _>(&claimed, rows::attempt::<B>)
    }

    async fn recheck_unknown_later(
        &self,
        attempt_id: Uuid,
        check: i32,
        backoff: Duration,
        max_backoff: Duration,
    ) -> Result<bool, StoreError> {
        let values = args![attempt_id, check, backoff, max_backoff];
        Ok(write(self, B::SQL.recheck_unknown_later, values).await? == 1)
    }

    async fn set_task_id(&self, attempt_id: Uuid, task_id: &str) -> Result<(), StoreError> {
        let task_id = storable_text(task_id);
        write(self, B::SQL.set_task_id, args![attempt_id, &*task_id]).await?;
        Ok(())
    }

    async fn extend_deadline(&self, attempt_id: Uuid, within: Duration) -> Result<(), StoreError> {
        write(self, B::SQL.extend_deadline, args![attempt_id, within]).await?;
        Ok(())
    }

    async fn expired_attempts(&self, grace: Duration) -> Result<Vec<(Uuid, String)>, StoreError> {
        let by_shard = |r: &ByShard| r.expired_attempts;
        let expired = read_spanning(self, B::SQL.expired_attempts, by_shard, args![grace]).await?;
        expired
            .iter()
            .map(|row| {
                let id = B::uuid(row, "id")?;
                if self.tenants().is_some() {
                    self.note_tenant(id, &B::text(row, "tenant")?);
                }
                Ok((id, B::text(row, "provider")?))
            })
            .collect()
    }

    async fn defer_dispatch(
        &self,
        job_id: Uuid,
        version: i64,
        delay: Duration,
    ) -> Result<bool, StoreError> {
        let values = args![job_id, version, delay];
        Ok(write(self, B::SQL.defer_dispatch, values).await? == 1)
    }

    async fn next_due_in(&self) -> Result<Option<Duration>, StoreError> {
        let next = |r: &ByShard| r.next_due_in;
        let rows = read_spanning(self, B::SQL.next_due_in, next, args![]).await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let seconds = B::opt_float(row, "seconds")?;
        Ok(seconds.map(|s| Duration::from_secs_f64(s.max(0.0))))
    }

    async fn wait_for_work(&self, max_wait: Duration) -> Woken {
        self.until_work(max_wait).await
    }
}
