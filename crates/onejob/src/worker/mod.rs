//! The worker: its own loop that starts new jobs' first attempts in batches and claims the
//! other due jobs one by one, both through the store's attempt guard, and runs the attempts
//! against providers.
//!
//! It wakes on the store's signal (LISTEN/NOTIFY on PostgreSQL, in-process on SQLite) and
//! polls only as a fallback. It runs at most `concurrency` attempts at once, heartbeats
//! their leases, and rescues other workers' expired leases. On shutdown it stops claiming,
//! gives in-flight attempts `shutdown_grace` to finish, makes the rest `unknown`, and gives
//! up on whatever still hangs after [`ABANDON_WAIT`]: shutdown never waits without bound.
//!
//! A new gateway job created in this process may skip dispatch altogether: intake starts its
//! first attempt in the transaction that creates it, in a slot of this worker reserved
//! beforehand, and the attempt runs at once ([`handoff`]).

mod attempt;
mod handoff;
mod lease;
mod live;
pub mod plan;
mod reconcile;
mod recording;
pub mod retention;
mod unrecorded;

use crate::store::Chain;
use std::{collections::HashSet, sync::Arc, time::Duration};

use tokio::{
    sync::{Notify, Semaphore},
    task::JoinSet,
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use uuid::Uuid;

pub use attempt::Ending;
pub use handoff::{Handoff, Reserved};
pub use lease::rescue_once;
pub use live::Live;
pub use reconcile::reconcile_once;
pub use unrecorded::{Unrecorded, UnrecordedAnswer};

use onejob_domain::EventKind;

use crate::{
    certification::Certified,
    kind::Kinds,
    provider::Providers,
    store::{
        AttemptStart, FirstAttempts, FirstStart, NewEvent, StartOutcome, StartRefusal, Store, Woken,
    },
    telemetry,
};

/// The shortest sleep between claim rounds, so a due job that cannot start right now (its
/// row busy on another node) does not make the loop spin.
const MIN_WAIT: Duration = Duration::from_millis(20);

/// How often, at least, the loop claims due jobs one by one while new jobs keep every slot
/// busy.
const DUE_SCAN: Duration = Duration::from_secs(1);

/// Most first attempts one batch starts ([`crate::store::Transitions::start_first_attempts`]).
const MAX_FIRST: usize = 256;

/// How long shutdown waits, after abandoning in-flight attempts, for them (and the
/// background tasks) to write their endings before it stops them where they are.
pub const ABANDON_WAIT: Duration = Duration::from_secs(5);

/// How a worker behaves.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// This worker's id, written on the attempts it leases.
    pub id: String,
    /// Attempts run at once.
    pub concurrency: usize,
    /// Lease length.
    pub lease: Duration,
    /// Fallback poll interval.
    pub poll_interval: Duration,
    /// How long in-flight attempts may still finish after shutdown begins.
    pub shutdown_grace: Duration,
    /// Deleting finished jobs, where `[retention]` turns it on.
    pub retention: Option<retention::Retention>,
}

impl WorkerSettings {
    /// A fresh worker id: host, process and a random suffix.
    pub fn new_id() -> String {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "host".into());
        let suffix = Uuid::new_v4().simple().to_string();
        format!("{host}:{}:{}", std::process::id(), &suffix[..8])
    }
}

/// What the gateway's callers and the worker of one process share: live streams, job
/// change notices, and the hand-off of new jobs to the worker.
#[derive(Debug, Clone, Default)]
pub struct Hub {
    /// Live streams of running attempts.
    pub streams: crate::gateway::streams::LiveStreams,
    /// Notices of changed jobs.
    pub watch: crate::gateway::watch::JobWatch,
    /// This process's worker, where one runs, for the new jobs it takes straight from
    /// intake.
    pub worker: Handoff,
}

/// What the worker's tasks share.
pub struct WorkerContext {
    /// The store.
    pub store: Arc<dyn Store>,
    /// The kinds.
    pub kinds: Kinds,
    /// The providers.
    pub providers: Providers,
    /// The settings.
    pub settings: WorkerSettings,
    /// The attempts running in this worker.
    pub live: Live,
    /// Answers not recorded yet, offered again by the reconciler.
    pub unrecorded: Unrecorded,
    /// The gateway's live streams and job notices, shared with this process's HTTP API.
    pub hub: Hub,
}

impl WorkerContext {
    /// The context of a new worker: nothing running, nothing held.
    pub fn new(
        store: Arc<dyn Store>,
        kinds: Kinds,
        providers: Providers,
        settings: WorkerSettings,
        hub: Hub,
    ) -> Self {
        Self {
            store,
            kinds,
            providers,
            settings,
            live: Live::default(),
            unrecorded: Unrecorded::default(),
            hub,
        }
    }
}

/// A running worker.
pub struct WorkerHandle {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl WorkerHandle {
    /// Stops claiming, waits for in-flight attempts (up to the grace), then returns.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// Starts a worker loop in the background.
pub fn spawn(ctx: WorkerContext) -> WorkerHandle {
    let stop = CancellationToken::new();
    let task = tokio::spawn(run(Arc::new(ctx), stop.clone()));
    WorkerHandle { stop, task }
}

async fn run(ctx: Arc<WorkerContext>, stop: CancellationToken) {
    tracing::info!(worker = %ctx.settings.id, concurrency = ctx.settings.concurrency, "worker started");
    let background = CancellationToken::new();
    let abandon = CancellationToken::new();
    let heartbeat = tokio::spawn(lease::heartbeat(ctx.clone(), background.clone()));
    let rescue = tokio::spawn(lease::rescue(ctx.clone(), background.clone()));
    let reconcile = tokio::spawn(reconcile::run(ctx.clone(), background.clone()));
    let prune = ctx
        .settings
        .retention
        .map(|settings| tokio::spawn(retention::run(ctx.clone(), settings, background.clone())));
    let slots = Arc::new(Semaphore::new(ctx.settings.concurrency.max(1)));
    let claiming = Claiming::default();
    let mut running = JoinSet::new();
    // New gateway jobs of this process, started at intake in slots reserved from `slots`.
    let handed = Arc::new(std::sync::Mutex::new(JoinSet::new()));
    let freed = Arc::new(Notify::new());
    let reservations = TaskTracker::new();
    ctx.hub.worker.install(handoff::Runner {
        ctx: ctx.clone(),
        slots: slots.clone(),
        handed: handed.clone(),
        abandon: abandon.clone(),
        freed: freed.clone(),
        reservations: reservations.clone(),
    });
    let first = first_starts(&ctx.kinds);
    let first_kinds: Vec<String> = first.iter().map(|f| f.kind.clone()).collect();
    // Whether every kind's new jobs start in batches: if not, new jobs of the others are
    // claimed one by one, and a wake-up for new jobs is one for the one-by-one claims too.
    let all_batched = first.len() == ctx.kinds.names().len();

    let mut scanned = tokio::time::Instant::now();
    let mut started_new = tokio::time::Instant::now();
    let mut woken = Woken::Anything;
    // When the next job is due, as the last look found it (`None`: none was waiting).
    let mut next_due: Option<tokio::time::Instant> = None;
    // Whether due work other than new jobs waits for a slot: the last claim of it found more
    // than it had slots for, or a look at it was due while every slot was busy. New jobs then
    // wait: each slot that frees goes to it first.
    let mut due_waiting = false;
    // Whether new jobs wait for a slot (the last batch was full, or found no slot free).
    let mut backlog = false;

    while !stop.is_cancelled() {
        // Retries, failovers, hedges and recoveries (and new jobs of kinds without a
        // provider) come first: they are claimed one by one, oldest due first, and a backlog
        // of new jobs never holds them up for longer than DUE_SCAN plus the time until a slot
        // frees. New jobs start many at a time in whatever slots are left. A wake-up for new
        // jobs alone, their first attempts just started, leaves what the last look found as
        // it was: look again only when something else may have changed, or the next due
        // job's time has come.
        let now = tokio::time::Instant::now();
        let look = woken == Woken::Anything || !all_batched || next_due.is_some_and(|at| at <= now);
        let mut saturated = false;
        if due_waiting || (look && !backlog) || scanned.elapsed() >= DUE_SCAN {
            if slots.available_permits() == 0 {
                due_waiting = true;
                saturated = true;
            } else {
                due_waiting = claim_due(
                    &ctx,
                    &first_kinds,
                    &slots,
                    &claiming,
                    &mut running,
                    &abandon,
                    &stop,
                )
                .await;
                saturated |= due_waiting;
                scanned = tokio::time::Instant::now();
            }
        }
        // New jobs still start at least every DUE_SCAN while due work keeps every slot: the
        // two never starve each other.
        if !due_waiting || started_new.elapsed() >= DUE_SCAN {
            backlog = start_new(&ctx, &first, &slots, &mut running, &abandon).await;
            saturated |= backlog;
            started_new = tokio::time::Instant::now();
        }
        while running.try_join_next().is_some() {}
        while lock(&handed).try_join_next().is_some() {}
        if saturated && slots.available_permits() > 0 {
            continue;
        }
        // More is due than there are slots: the next attempt to end frees one. Otherwise
        // nothing more is due now: sleep until a wake-up, or the next job's dispatch time (a
        // retry's backoff may be shorter than the poll interval), or the poll interval,
        // whichever comes first. (An attempt ending then frees a slot nothing waits for.)
        let wait = if saturated {
            ctx.settings.poll_interval
        } else {
            if look {
                let now = tokio::time::Instant::now();
                next_due = match ctx.store.next_due_in().await {
                    Ok(due) => due.map(|due| now + due),
                    Err(_) => None,
                };
            }
            let now = tokio::time::Instant::now();
            match next_due {
                Some(at) => at
                    .saturating_duration_since(now)
                    .clamp(MIN_WAIT, ctx.settings.poll_interval.max(MIN_WAIT)),
                None => ctx.settings.poll_interval,
            }
        };
        woken = tokio::select! {
            woken = ctx.store.wait_for_work(wait) => woken,
            Some(_) = running.join_next(), if saturated && !running.is_empty() => Woken::Anything,
            () = freed.notified(), if saturated => Woken::Anything,
            () = stop.cancelled() => Woken::Anything,
        };
    }

    // No more hand-offs; those already made (and the reservations whose intake is still
    // under way, each of which may yet hand an attempt over) are waited for like the loop's
    // own attempts.
    ctx.hub.worker.clear();
    reservations.close();
    tracing::info!(
        in_flight = running.len() + lock(&handed).len(),
        "worker stopping: no new attempts"
    );
    let drained = tokio::time::timeout(
        ctx.settings.shutdown_grace,
        drain(&mut running, &handed, &reservations),
    )
    .await;
    if drained.is_err() {
        // Whatever is still in flight becomes unknown: honest, and blocks re-sending.
        abandon.cancel();
        let ended =
            tokio::time::timeout(ABANDON_WAIT, drain(&mut running, &handed, &reservations)).await;
        if ended.is_err() {
            tracing::warn!(
                stuck = running.len(),
                "attempts still not ended after the worker abandoned them; stopping them where \
                 they are (their leases expire and they are rescued as unknown)"
            );
            let mut handed = std::mem::take(&mut *lock(&handed));
            running.shutdown().await;
            handed.shutdown().await;
        }
    }
    background.cancel();
    for task in [heartbeat, rescue, reconcile].into_iter().chain(prune) {
        let abort = task.abort_handle();
        if tokio::time::timeout(ABANDON_WAIT, task).await.is_err() {
            abort.abort();
        }
    }
    if !ctx.unrecorded.is_empty() {
        tracing::error!(
            answers = ctx.unrecorded.len(),
            "stopping with provider answers not recorded (each was logged with its output)"
        );
    }
    tracing::info!("worker stopped");
}

/// The running attempts of the worker loop; `None` for a claim that started nothing.
type Running = JoinSet<Option<Ending>>;

fn lock(handed: &std::sync::Mutex<Running>) -> std::sync::MutexGuard<'_, Running> {
    handed
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Waits for every attempt of the loop's and every attempt handed to the worker (also one
/// handed while this waits, by a reservation still outstanding in `reservations`) to end;
/// the handed ones are moved into `running`, so that stopping `running` stops them too.
async fn drain(
    running: &mut Running,
    handed: &std::sync::Mutex<Running>,
    reservations: &TaskTracker,
) {
    loop {
        while running.join_next().await.is_some() {}
        let more = std::mem::take(&mut *lock(handed));
        if !more.is_empty() {
            *running = more;
            continue;
        }
        if reservations.is_empty() {
            return;
        }
        // A reservation is handed over (its task already in `handed`) or freed.
        reservations.wait().await;
    }
}

/// Starts the first attempts of new jobs, as many as there are free slots, in one batch.
/// Whether the batch was full, or no slot was free (more may be waiting: the loop then
/// waits for an attempt to end, whatever the last look at due work found).
async fn start_new(
    ctx: &Arc<WorkerContext>,
    first: &[FirstStart],
    slots: &Arc<Semaphore>,
    running: &mut Running,
    abandon: &CancellationToken,
) -> bool {
    let free = slots.available_permits();
    if first.is_empty() {
        return false;
    }
    if free == 0 {
        return true;
    }
    let batch = FirstAttempts {
        limit: free.min(MAX_FIRST) as u32,
        worker: ctx.settings.id.clone(),
        lease: ctx.settings.lease,
        kinds: first.to_vec(),
    };
    let started = match ctx.store.start_first_attempts(&batch).await {
        Ok(started) => started,
        Err(error) => {
            tracing::warn!(error = %Chain(&error), "starting new jobs' first attempts failed");
            return false;
        }
    };
    let full = started.len() == batch.limit as usize;
    for (job, attempt) in started {
        telemetry::attempt_started(&attempt.provider, attempt.hedge);
        let Some(kind) = ctx.kinds.get(&job.kind).cloned() else {
            continue;
        };
        // A slot the loop counted free may have gone to a job handed over since: the
        // attempt, started, then waits for the next slot to free.
        let slots = slots.clone();
        let permit = slots.clone().try_acquire_owned().ok();
        let ctx = ctx.clone();
        let abandon = abandon.clone();
        running.spawn(async move {
            let permit = match permit {
                Some(permit) => permit,
                None => slots
                    .acquire_owned()
                    .await
                    .expect("the worker's slots are never closed"),
            };
            let ending = attempt::run(ctx, job, kind, attempt, abandon).await;
            drop(permit);
            Some(ending)
        });
    }
    full
}

/// Claims due jobs one by one, each in a task of its own, as many as there are free slots,
/// leaving the new jobs of `new_kinds` to batches. Whether more were due than slots.
async fn claim_due(
    ctx: &Arc<WorkerContext>,
    new_kinds: &[String],
    slots: &Arc<Semaphore>,
    claiming: &Claiming,
    running: &mut Running,
    abandon: &CancellationToken,
    stop: &CancellationToken,
) -> bool {
    let free = slots.available_permits();
    if free == 0 {
        return false;
    }
    // Jobs whose claim is still in flight stay due until it commits: ask for enough to fill
    // every free slot with others.
    let limit = free + claiming.len();
    let due = match ctx.store.due_others(limit as u32, new_kinds).await {
        Ok(due) => due,
        Err(error) => {
            tracing::warn!(error = %Chain(&error), "looking for due jobs failed");
            return false;
        }
    };
    let saturated = due.len() == limit;
    for job_id in due {
        let Some(claim_guard) = claiming.begin(job_id) else {
            continue;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            break;
        };
        let ctx = ctx.clone();
        let abandon = abandon.clone();
        let stop = stop.clone();
        running.spawn(async move {
            let claimed = if stop.is_cancelled() {
                None
            } else {
                claim(&ctx, job_id).await
            };
            drop(claim_guard);
            let ending = match claimed {
                Some((job, kind, attempt)) => {
                    Some(attempt::run(ctx, job, kind, attempt, abandon).await)
                }
                None => None,
            };
            drop(permit);
            ending
        });
    }
    saturated
}

/// How the first attempt of each configured kind starts: on its primary provider, with its
/// attempt timeout. A kind without providers has none.
fn first_starts(kinds: &Kinds) -> Vec<FirstStart> {
    kinds
        .names()
        .into_iter()
        .filter_map(|name| {
            let kind = kinds.get(name)?;
            Some(FirstStart {
                kind: kind.name.clone(),
                provider: kind.providers.first()?.clone(),
                timeout: kind.attempt_timeout,
            })
        })
        .collect()
}

/// The jobs this worker is claiming right now.
///
/// Claims run concurrently, each in its own task (so that their `start_attempt` commits can
/// share WAL flushes instead of queueing behind one another in the loop), and a job stays
/// due until its claim commits: the loop skips the jobs in here instead of claiming them
/// twice. (Two claims of one job would still start at most one attempt, since the store's
/// attempt guard decides; this only saves the wasted round trips.)
#[derive(Clone, Default)]
struct Claiming(Arc<std::sync::Mutex<HashSet<Uuid>>>);

impl Claiming {
    /// Marks `job_id` as being claimed, until the guard is dropped; `None` if it already is.
    fn begin(&self, job_id: Uuid) -> Option<ClaimGuard> {
        let mut jobs = self.0.lock().expect("the claiming set is never poisoned");
        jobs.insert(job_id).then(|| ClaimGuard {
            claiming: self.clone(),
            job_id,
        })
    }

    /// How many claims are in flight.
    fn len(&self) -> usize {
        self.0
            .lock()
            .expect("the claiming set is never poisoned")
            .len()
    }
}

/// One job's claim in flight; dropping it ends the claim.
struct ClaimGuard {
    claiming: Claiming,
    job_id: Uuid,
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        if let Ok(mut jobs) = self.claiming.0.lock() {
            jobs.remove(&self.job_id);
        }
    }
}

/// Plans and starts the next attempt of a due job; `None` if nothing was started.
async fn claim(
    ctx: &WorkerContext,
    job_id: Uuid,
) -> Option<(
    crate::store::JobRecord,
    Arc<crate::kind::Kind>,
    crate::store::AttemptRecord,
)> {
    let job = match ctx.store.job_for_dispatch(job_id).await {
        Ok(Some(job)) => job,
        Ok(None) => return None,
        Err(error) => {
            tracing::warn!(error = %Chain(&error), %job_id, "loading a due job failed");
            return None;
        }
    };
    if job.attempts == 0
        && job.state == onejob_domain::JobState::Pending
        && ctx
            .kinds
            .get(&job.kind)
            .is_some_and(|kind| !kind.providers.is_empty())
    {
        // A new job of a kind with a provider: the next batch of first attempts takes it.
        return None;
    }
    let Some(kind) = ctx.kinds.get(&job.kind).cloned() else {
        tracing::warn!(%job_id, kind = %job.kind, "a due job's kind is not configured; deferring it");
        let _ = ctx
            .store
            .defer_dispatch(job_id, job.version, Duration::from_secs(60))
            .await;
        return None;
    };
    let attempts = ctx.store.job_attempts(job_id).await.ok()?;
    // A first attempt goes to the kind's primary provider, certified or not: only failover
    // and hedging read the certificates.
    let certified = if attempts.is_empty() {
        Certified::default()
    } else {
        Certified::load(&*ctx.store, &ctx.kinds, ctx.providers.hashes())
            .await
            .ok()?
    };
    let decision = plan::next_attempt(&kind, &attempts, &certified);
    let Some(next) = decision.plan.clone() else {
        log_refusals(ctx, job_id, "hedge", &decision).await;
        let _ = ctx
            .store
            .defer_dispatch(job_id, job.version, Duration::from_secs(60))
            .await;
        return None;
    };
    let start = AttemptStart {
        job_id,
        expected_attempts: job.attempts,
        provider: next.provider.clone(),
        hedge: next.hedge,
        worker: ctx.settings.id.clone(),
        lease: ctx.settings.lease,
        timeout: kind.attempt_timeout,
        max_attempts: kind.max_attempts,
        upstream_key: plan::upstream_key(job_id, &attempts, &next.provider),
    };
    match ctx.store.start_attempt(&start).await {
        Ok(StartOutcome::Started(attempt)) => {
            telemetry::attempt_started(&attempt.provider, attempt.hedge);
            log_refusals(
                ctx,
                job_id,
                if next.hedge { "hedge" } else { "failover" },
                &decision,
            )
            .await;
            Some((job, kind, *attempt))
        }
        Ok(StartOutcome::Refused(StartRefusal::Exhausted)) => {
            // No budget left (max_attempts lowered since the job last ran): settle it failed,
            // instead of deferring it for ever.
            match ctx.store.settle_exhausted(job_id, kind.max_attempts).await {
                Ok(true) => tracing::info!(%job_id, "job out of attempts settled as failed"),
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(error = %Chain(&error), %job_id, "settling an exhausted job failed");
                }
            }
            None
        }
        Ok(StartOutcome::Refused(reason)) => {
            tracing::debug!(%job_id, ?reason, "attempt not started");
            if matches!(reason, StartRefusal::NotHedgeable) {
                let _ = ctx
                    .store
                    .defer_dispatch(job_id, job.version, Duration::from_secs(60))
                    .await;
            }
            None
        }
        Err(error) => {
            tracing::warn!(error = %Chain(&error), %job_id, "starting an attempt failed");
            None
        }
    }
}

/// Appends a `failover_refused` event for each provider a decision passed over.
pub(crate) async fn log_refusals(
    ctx: &WorkerContext,
    job_id: Uuid,
    purpose: &str,
    decision: &plan::Decision,
) {
    for refusal in &decision.refused {
        let event = NewEvent {
            tenant: None,
            job_id,
            attempt_id: None,
            kind: EventKind::FailoverRefused,
            actor: None,
            detail: serde_json::json!({
                "for": purpose,
                "provider": refusal.provider,
                "reason": refusal.reason,
                "instead": decision.plan.as_ref().map(|p| p.provider.clone()),
            }),
        };
        if let Err(error) = ctx.store.append_event(event).await {
            tracing::warn!(error = %Chain(&error), %job_id, "could not log a refused failover");
        }
    }
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::Claiming;

    #[test]
    fn a_job_is_claimed_once_until_its_claim_ends() {
        let claiming = Claiming::default();
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let first = claiming.begin(a).expect("a free job can be claimed");
        assert!(claiming.begin(a).is_none(), "claimed twice while in flight");
        let other = claiming.begin(b).expect("another job is not blocked");
        assert_eq!(claiming.len(), 2);
        drop(first);
        assert_eq!(claiming.len(), 1);
        assert!(
            claiming.begin(a).is_some(),
            "claimable again once its claim ended"
        );
        drop(other);
    }
}
