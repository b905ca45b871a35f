//! The hand-off of a new job to this process's own worker: a gateway call that creates a
//! job on a node whose worker runs in the same process has its first attempt started by
//! intake, in the transaction that creates the job ([`StartAtIntake`]), and runs it here at
//! once, with no dispatch round (no wake-up, no look for due jobs, no batch of first
//! attempts, no second commit before the send).
//!
//! The slot comes first: a call [reserves](Handoff::reserve) one of the worker's slots
//! before it submits, and only a call that got one asks intake to start the attempt; with
//! no worker here, no free slot or a worker stopping, the job is created as any other and
//! waits for dispatch (on this node or another). The job is committed `running`, its
//! attempt `starting` and leased to this worker, so no other worker can start it; it is
//! then worked exactly as a dispatched attempt is (heartbeats, the deadline, the result's
//! compare-and-swap, lease rescue if this process dies before it ends).
//!
//! The send fence of such an attempt is its start: intake committed it leased to this
//! worker, for the whole lease and attempt timeout, a moment ago, after the hand-off began
//! ([`Handoff::reserve`] takes that moment). While less than the lease (and the timeout) less
//! the fence's margin has passed since then, the attempt is still this worker's with at
//! least that margin left, which is what the fence's read would find; past that, the fence
//! reads the store as for any other attempt.

use std::{
    fmt,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use onejob_domain::AttemptState;
use tokio::{
    sync::{Notify, OwnedSemaphorePermit, Semaphore},
    time::Instant,
};
use tokio_util::{
    sync::CancellationToken,
    task::{TaskTracker, task_tracker::TaskTrackerToken},
};
use uuid::Uuid;

use super::{Running, WorkerContext, attempt, recording::with_retries};
use crate::{
    kind::Kind,
    store::{AttemptRecord, Chain, JobRecord, StartAtIntake},
    telemetry,
};

/// Where this process's gateway hands new jobs to its worker: empty until a worker runs
/// here, and again once it stops.
#[derive(Clone, Default)]
pub struct Handoff(Arc<Mutex<Option<Arc<Runner>>>>);

impl fmt::Debug for Handoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handoff")
            .field("worker", &self.lock().as_ref().map(|r| &r.ctx.settings.id))
            .finish()
    }
}

/// A running worker, as the hand-off reaches it.
pub(super) struct Runner {
    /// The worker's context.
    pub(super) ctx: Arc<WorkerContext>,
    /// Its slots.
    pub(super) slots: Arc<Semaphore>,
    /// The attempts handed to it, which its shutdown waits for like its own.
    pub(super) handed: Arc<Mutex<Running>>,
    /// Fires when the worker stops waiting for in-flight attempts.
    pub(super) abandon: CancellationToken,
    /// Told when a handed attempt ends and frees its slot.
    pub(super) freed: Arc<Notify>,
    /// The reservations not yet run or freed (their intake is under way), which the
    /// worker's shutdown waits for too: each may yet hand it an attempt.
    pub(super) reservations: TaskTracker,
}

impl Handoff {
    fn lock(&self) -> MutexGuard<'_, Option<Arc<Runner>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot of this process's worker for a new job of `kind`, and the first attempt intake
    /// is to start with it; `None` when no worker runs here (or it is stopping), the kind
    /// has no provider, or every slot is busy: the job then waits for dispatch.
    pub fn reserve(&self, kind: &Kind) -> Option<Reserved> {
        // The token is taken under the lock that `clear` takes: a worker that stopped
        // handing over after this sees the reservation outstanding, and waits for it.
        let (runner, outstanding) = {
            let guard = self.lock();
            let runner = guard.clone()?;
            let outstanding = runner.reservations.token();
            (runner, outstanding)
        };
        let kind = runner.ctx.kinds.get(&kind.name)?.clone();
        let provider = kind.providers.first()?.clone();
        let permit = runner.slots.clone().try_acquire_owned().ok()?;
        let start = StartAtIntake {
            attempt_id: Uuid::now_v7(),
            provider,
            worker: runner.ctx.settings.id.clone(),
            lease: runner.ctx.settings.lease,
            timeout: kind.attempt_timeout,
        };
        Some(Reserved {
            outstanding,
            runner,
            permit,
            kind,
            start,
            since: Instant::now(),
        })
    }

    /// Hands new jobs to `runner` from now on.
    pub(super) fn install(&self, runner: Runner) {
        *self.lock() = Some(Arc::new(runner));
    }

    /// Hands no more jobs to the worker (it stops).
    pub(super) fn clear(&self) {
        self.lock().take();
    }
}

/// A slot of this process's worker, held for one new job.
pub struct Reserved {
    runner: Arc<Runner>,
    permit: OwnedSemaphorePermit,
    kind: Arc<Kind>,
    start: StartAtIntake,
    /// When the reservation was made: before intake's statement was sent, so before the
    /// database took the time the attempt's lease and deadline count from.
    since: Instant,
    /// Held until the reservation is run or freed (see [`Runner::reservations`]).
    outstanding: TaskTrackerToken,
}

impl Reserved {
    /// The first attempt intake is to start.
    pub fn start(&self) -> StartAtIntake {
        self.start.clone()
    }

    /// Runs `attempt`, which intake started with `job`, in the reserved slot. Dropping the
    /// reservation instead (the job was replayed, or not started) frees the slot.
    pub fn run(self, job: JobRecord, attempt: AttemptRecord) {
        let Reserved {
            runner,
            permit,
            kind,
            since,
            outstanding,
            ..
        } = self;
        telemetry::attempt_started(&attempt.provider, attempt.hedge);
        let ctx = runner.ctx.clone();
        let abandon = runner.abandon.clone();
        let freed = runner.freed.clone();
        let mut handed = runner.handed.lock().unwrap_or_else(PoisonError::into_inner);
        handed.spawn(async move {
            let fenced = attempt::Fenced::Since(since);
            let ending = attempt::run_fenced(ctx, job, kind, attempt, abandon, fenced).await;
            drop(permit);
            freed.notify_one();
            Some(ending)
        });
        // Handed over (the worker's shutdown now waits for the task): no longer outstanding.
        drop(outstanding);
    }

    /// Runs the attempt intake may have started with this reservation though intake failed:
    /// an error after a commit that may have happened (the store's reply was lost). The
    /// attempt is looked up by its id in `tenant`, and run if it exists, is still `starting`
    /// and is this worker's; otherwise the slot is freed. It is looked for while it could
    /// still be sent (the lease and the attempt timeout from the reservation); one never
    /// found is rescued as `unknown` at its lease's end, as when a worker dies.
    pub fn recover(self, tenant: String) {
        let Reserved {
            runner,
            permit,
            kind,
            start,
            since,
            outstanding,
        } = self;
        let ctx = runner.ctx.clone();
        let abandon = runner.abandon.clone();
        let freed = runner.freed.clone();
        let mut handed = runner.handed.lock().unwrap_or_else(PoisonError::into_inner);
        handed.spawn(async move {
            let until = since + start.lease.min(start.timeout);
            let found = with_retries("finding the attempt intake started", until, || {
                ctx.store.attempt_in_tenant(&tenant, start.attempt_id)
            })
            .await;
            let ending = match found {
                Ok(Some((attempt, job)))
                    if attempt.state == AttemptState::Starting
                        && attempt.worker.as_deref() == Some(ctx.settings.id.as_str()) =>
                {
                    tracing::info!(job = %job.id, attempt = %attempt.id, "intake's answer was lost; running the attempt it started");
                    telemetry::attempt_started(&attempt.provider, attempt.hedge);
                    let fenced = attempt::Fenced::Since(since);
                    Some(attempt::run_fenced(ctx, job, kind, attempt, abandon, fenced).await)
                }
                Ok(_) => None,
                Err(error) => {
                    tracing::warn!(error = %Chain(&error), attempt = %start.attempt_id, "could not look for the attempt intake may have started; lease rescue will find it");
                    None
                }
            };
            drop(permit);
            freed.notify_one();
            ending
        });
        drop(outstanding);
    }
}
