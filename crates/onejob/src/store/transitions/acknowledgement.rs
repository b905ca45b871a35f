//! Acknowledging a started attempt: its task id stored, the attempt `running` (or
//! `cancelled`, when its job was cancelled while it was being sent), alone or grouped.

use super::*;

/// An acknowledgement ([`Transitions::acknowledge_attempt`]), grouped with others.
pub(crate) struct Ack {
    /// The attempt's tenant, if this process knows it.
    pub(super) tenant: Option<String>,
    pub(super) attempt_id: Uuid,
    pub(super) task_id: Option<String>,
    pub(super) hedge_after: Option<Duration>,
}

/// What an acknowledgement does, decided from the locked job and the attempt's state once
/// its task id is stored.
enum Acking {
    /// The attempt is no longer `starting`: it is not the caller's.
    NotStarting(AttemptState),
    /// The job was cancelled while the attempt was being sent: it ends `cancelled`.
    Cancel,
    /// It runs.
    Run,
}

fn acking(job: &JobHead, state: AttemptState) -> Acking {
    if state != AttemptState::Starting {
        Acking::NotStarting(state)
    } else if job.state == JobState::Cancelled {
        Acking::Cancel
    } else {
        Acking::Run
    }
}

/// The `attempt_resolved` event of an attempt acknowledged after its job was cancelled.
fn cancelled_while_sent(job_id: Uuid, attempt_id: Uuid) -> NewEvent {
    let detail = json!({
        "outcome": "cancelled",
        "note": "the job was cancelled while the attempt was being sent",
    });
    event(job_id, attempt_id, EventKind::AttemptResolved, detail)
}

impl<B: Backend> Change<B> for Ack {
    type Out = Acknowledged;

    fn attempt_id(&self) -> Uuid {
        self.attempt_id
    }

    fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }

    async fn apply_all(
        tx: &mut Tx<B>,
        changes: &[(Uuid, &Self)],
    ) -> Result<Option<Vec<Acknowledged>>, StoreError> {
        let attempts: Vec<Uuid> = changes.iter().map(|(_, ack)| ack.attempt_id).collect();
        if has_duplicates(&attempts) {
            return Ok(None);
        }
        // The jobs' locks first, as for one acknowledgement.
        let jobs = tx.lock_jobs(&distinct_jobs(changes)).await?;
        let task_ids: Vec<Option<&str>> = changes
            .iter()
            .map(|(_, ack)| ack.task_id.as_deref())
            .collect();
        let states = tx.keep_task_ids(&attempts, &task_ids).await?;
        let (mut outs, mut running, mut events) = (Vec::new(), Vec::new(), Vec::new());
        for &(job_id, ack) in changes {
            let job = jobs.get(&job_id).ok_or_else(|| no("job", job_id))?;
            let state = *states
                .get(&ack.attempt_id)
                .ok_or_else(|| no("attempt", ack.attempt_id))?;
            outs.push(match acking(job, state) {
                Acking::NotStarting(state) => Acknowledged::NotStarting(state),
                Acking::Cancel => {
                    tx.cancel_acknowledged(ack.attempt_id).await?;
                    events.push(cancelled_while_sent(job_id, ack.attempt_id));
                    Acknowledged::JobCancelled
                }
                Acking::Run => {
                    running.push(ack.attempt_id);
                    if let Some(after) = ack.hedge_after {
                        tx.schedule_hedge(job_id, after).await?;
                    }
                    Acknowledged::Running
                }
            });
        }
        if !running.is_empty() {
            tx.mark_all_running(&running).await?;
        }
        tx.insert_events(&events).await?;
        Ok(Some(outs))
    }

    async fn alone(&self, writer: &Writer<B>) -> Result<Acknowledged, StoreError> {
        let mut tx = writer.begin().await?;
        tx.remember(self.attempt_id, self.tenant.clone());
        let job_id = job_of(&mut tx, self.attempt_id).await?;
        // The job's lock first: a cancellation either committed before (and is seen here) or
        // waits until the attempt is running, when it returns it as live for an upstream
        // cancel.
        let job = locked(&mut tx, job_id).await?;
        // The task id is stored whatever the attempt's state: it is what proves what happened.
        let state = tx
            .keep_task_id(self.attempt_id, self.task_id.as_deref())
            .await?;
        let acknowledged = match acking(&job, state) {
            Acking::NotStarting(state) => Acknowledged::NotStarting(state),
            Acking::Cancel => {
                tx.cancel_acknowledged(self.attempt_id).await?;
                tx.insert_event(&cancelled_while_sent(job_id, self.attempt_id))
                    .await?;
                Acknowledged::JobCancelled
            }
            Acking::Run => {
                tx.mark_running(self.attempt_id).await?;
                if let Some(after) = self.hedge_after {
                    tx.schedule_hedge(job_id, after).await?;
                }
                Acknowledged::Running
            }
        };
        tx.commit().await?;
        Ok(acknowledged)
    }

    fn makes_due(&self, out: &Acknowledged) -> bool {
        self.hedge_after.is_some() && *out == Acknowledged::Running
    }

    /// The acknowledgements with no task id to store and no hedge to schedule, one per
    /// attempt, made at once where the backend can ([`Backend::acknowledge_starting`]):
    /// each runs if its attempt is still `starting` and its job not cancelled; the others,
    /// left untouched, go the general way.
    async fn at_once(
        writer: &Writer<B>,
        changes: &[Self],
    ) -> Result<Vec<Option<Acknowledged>>, StoreError> {
        let mut seen = HashSet::new();
        let mut offered = Vec::new();
        let mut offered_at = Vec::new();
        for (at, ack) in changes.iter().enumerate() {
            if ack.task_id.is_some() || ack.hedge_after.is_some() || !seen.insert(ack.attempt_id) {
                continue;
            }
            offered.push(ack.attempt_id);
            offered_at.push(at);
        }
        let running = if offered.is_empty() {
            None
        } else {
            B::acknowledge_starting(writer, &offered).await?
        };
        Ok(made_at(
            changes.len(),
            &offered_at,
            running,
            Acknowledged::Running,
        ))
    }
}
