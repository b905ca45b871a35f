//! Offering an output as its job's result: the compare-and-swap that lets exactly one
//! attempt win, alone or grouped, and the one-statement offers of only attempts.

use super::*;

/// An output offered as a job's result ([`Transitions::complete_attempt`]), grouped with
/// others.
pub(crate) struct Offer {
    /// The attempt's tenant, if this process knows it.
    pub(super) tenant: Option<String>,
    /// The attempt's job, if the caller knows it (its tenant is then `tenant`).
    pub(super) job_id: Option<Uuid>,
    pub(super) attempt_id: Uuid,
    pub(super) output: Value,
    pub(super) by: Resolution,
}

/// What a completion does, decided from the locked job and the attempt's state.
enum Completing {
    /// Nothing to write: answer this.
    Answer(Completion),
    /// Another attempt won, or the job is settled, or the attempt already ended: it is
    /// discarded, and its race recorded.
    Discard {
        winner: Option<Uuid>,
        job_state: JobState,
    },
    /// The compare-and-swap of the result.
    Swap,
}

fn completing(
    job: &JobHead,
    attempt_state: AttemptState,
    attempt_id: Uuid,
    by: &Resolution,
) -> Completing {
    if by.only_unknown && attempt_state != AttemptState::Unknown {
        return Completing::Answer(Completion::NotUnknown(attempt_state));
    }
    let winner = job.completed_by;
    if winner == Some(attempt_id) {
        // The winner's own answer again (a recording resent after a lost reply, or the
        // upstream answering twice): it already is the result; no race was lost.
        return Completing::Answer(Completion::Won);
    }
    let open = matches!(
        job.state,
        JobState::Pending | JobState::Running | JobState::Unknown
    );
    if winner.is_some() || !open || attempt_state.is_terminal() {
        return Completing::Discard {
            winner,
            job_state: job.state,
        };
    }
    Completing::Swap
}

impl Offer {
    /// The rule of this offer alone, in a transaction that holds nothing of its job yet (or
    /// already holds its lock); `None` when its compare-and-swap lost (the caller rolls back
    /// and decides again).
    async fn complete_one<B: Backend>(
        &self,
        tx: &mut Tx<B>,
        job_id: Uuid,
    ) -> Result<Option<Completion>, StoreError> {
        let job = locked(tx, job_id).await?;
        let state = tx.attempt_state(self.attempt_id).await?;
        Ok(Some(
            match completing(&job, state, self.attempt_id, &self.by) {
                Completing::Answer(completion) => completion,
                Completing::Discard { winner, job_state } => {
                    tx.discard_attempt(self.attempt_id).await?;
                    tx.insert_event(&self.lost(job_id, winner, job_state))
                        .await?;
                    Completion::Discarded { winner, job_state }
                }
                Completing::Swap => {
                    // The compare-and-swap: exactly one attempt ever gets past this.
                    if !tx
                        .swap_result(job_id, job.version, &self.output, self.attempt_id)
                        .await?
                    {
                        return Ok(None);
                    }
                    // The unknown siblings' outcome no longer matters; left unknown they would
                    // wait for proof (and count as unknown) forever. A job with one attempt
                    // (its count, read under the lock, counts every attempt it ever had) has
                    // none.
                    let siblings = if job.attempts > 1 {
                        tx.discard_unknown_siblings(job_id, self.attempt_id).await?
                    } else {
                        Vec::new()
                    };
                    for sibling in siblings {
                        tx.insert_event(&sibling_event(job_id, sibling, self.attempt_id))
                            .await?;
                    }
                    tx.insert_event(&self.won(job_id)).await?;
                    Completion::Won
                }
            },
        ))
    }

    /// The `race_lost` event of this offer, discarded.
    fn lost(&self, job_id: Uuid, winner: Option<Uuid>, job_state: JobState) -> NewEvent {
        let mut detail = payload_digest(&self.output);
        detail["winner"] = json!(winner);
        detail["job_state"] = json!(job_state);
        detail["note"] = json!(self.by.note);
        self.by
            .event(job_id, self.attempt_id, EventKind::RaceLost, detail)
    }

    /// The `won` event of this offer.
    fn won(&self, job_id: Uuid) -> NewEvent {
        self.by
            .event(job_id, self.attempt_id, EventKind::Won, self.won_detail())
    }

    /// The detail of its `won` event.
    fn won_detail(&self) -> Value {
        won_detail(&self.output, self.by.note.as_deref())
    }
}

/// The detail of a `won` event: the output's size and hash (of its canonical bytes), and the
/// resolution's note.
fn won_detail(output: &Value, note: Option<&str>) -> Value {
    let mut detail = payload_digest(output);
    detail["note"] = json!(note);
    detail
}

/// The `attempt_resolved` event of an unknown attempt discarded because `winner` won.
fn sibling_event(job_id: Uuid, sibling: Uuid, winner: Uuid) -> NewEvent {
    let detail = sibling_discarded(winner);
    event(job_id, sibling, EventKind::AttemptResolved, detail)
}

impl<B: Backend> Change<B> for Offer {
    type Out = Completion;

    fn attempt_id(&self) -> Uuid {
        self.attempt_id
    }

    fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }

    async fn apply_all(
        tx: &mut Tx<B>,
        changes: &[(Uuid, &Self)],
    ) -> Result<Option<Vec<Completion>>, StoreError> {
        // The first offer of each job is decided with the others at once; a second one of the
        // same job (its hedge, say) decides after it, on what it did, one by one.
        let mut firsts: Vec<(usize, Uuid, &Self)> = Vec::new();
        let mut seconds: Vec<(usize, Uuid, &Self)> = Vec::new();
        for (at, &(job_id, offer)) in changes.iter().enumerate() {
            if firsts.last().is_some_and(|&(_, job, _)| job == job_id) {
                seconds.push((at, job_id, offer));
            } else {
                firsts.push((at, job_id, offer));
            }
        }
        let jobs: Vec<Uuid> = firsts.iter().map(|&(_, job, _)| job).collect();
        let heads = tx.lock_jobs(&jobs).await?;
        let attempts: Vec<Uuid> = firsts.iter().map(|(_, _, o)| o.attempt_id).collect();
        let states = tx.attempt_states_of(&attempts).await?;
        let mut outs: Vec<Option<Completion>> = changes.iter().map(|_| None).collect();
        let (mut swaps, mut events) = (Vec::new(), Vec::new());
        for &(at, job_id, offer) in &firsts {
            let job = heads.get(&job_id).ok_or_else(|| no("job", job_id))?;
            let state = *states
                .get(&offer.attempt_id)
                .ok_or_else(|| no("attempt", offer.attempt_id))?;
            outs[at] = Some(match completing(job, state, offer.attempt_id, &offer.by) {
                Completing::Answer(completion) => completion,
                Completing::Discard { winner, job_state } => {
                    tx.discard_attempt(offer.attempt_id).await?;
                    events.push(offer.lost(job_id, winner, job_state));
                    Completion::Discarded { winner, job_state }
                }
                Completing::Swap => {
                    let swap = Swap {
                        job_id,
                        version: job.version,
                        output: &offer.output,
                        attempt_id: offer.attempt_id,
                    };
                    swaps.push((swap, offer));
                    Completion::Won
                }
            });
        }
        if !swaps.is_empty() {
            let cas: Vec<Swap<'_>> = swaps.iter().map(|&(swap, _)| swap).collect();
            // The compare-and-swap of each job: exactly one attempt ever gets past it.
            if !tx.swap_results(&cas).await? {
                return Ok(None);
            }
            // Only jobs with more than one attempt can have siblings to discard.
            let several: Vec<Swap<'_>> = cas
                .iter()
                .copied()
                .filter(|swap| heads.get(&swap.job_id).is_some_and(|job| job.attempts > 1))
                .collect();
            let siblings = if several.is_empty() {
                Vec::new()
            } else {
                tx.discard_unknown_siblings_of(&several).await?
            };
            for (swap, offer) in &swaps {
                for (sibling, _) in siblings.iter().filter(|(_, job)| *job == swap.job_id) {
                    events.push(sibling_event(swap.job_id, *sibling, swap.attempt_id));
                }
                events.push(offer.won(swap.job_id));
            }
        }
        tx.insert_events(&events).await?;
        for (at, job_id, offer) in seconds {
            match offer.complete_one(tx, job_id).await? {
                Some(completion) => outs[at] = Some(completion),
                None => return Ok(None),
            }
        }
        Ok(Some(outs.into_iter().flatten().collect()))
    }

    async fn alone(&self, writer: &Writer<B>) -> Result<Completion, StoreError> {
        for _ in 0..CAS_ROUNDS {
            let mut tx = writer.begin().await?;
            tx.remember(self.attempt_id, self.tenant.clone());
            let job_id = match self.job_id {
                Some(job_id) => {
                    tx.remember(job_id, self.tenant.clone());
                    job_id
                }
                None => job_of(&mut tx, self.attempt_id).await?,
            };
            match self.complete_one(&mut tx, job_id).await? {
                Some(completion) => {
                    tx.commit().await?;
                    return Ok(completion);
                }
                // The version or the attempt moved under us: read again and decide again.
                None => tx.rollback().await?,
            }
        }
        Err(StoreError::Contended("completion"))
    }

    fn makes_due(&self, _: &Completion) -> bool {
        false
    }

    /// The offers of outputs by whoever sent the attempt (not a resolution that needs an
    /// `unknown` or a `starting` attempt), one per attempt and per known job, made at once
    /// where the backend can ([`Backend::complete_only_attempts`]): each won if its job's
    /// only attempt is this one, open, and the job open without a winner; the others, left
    /// untouched, go the general way.
    async fn at_once(
        writer: &Writer<B>,
        changes: &[Self],
    ) -> Result<Vec<Option<Completion>>, StoreError> {
        let mut jobs = HashSet::new();
        let mut attempts = HashSet::new();
        let mut offered = Vec::new();
        let mut offered_at = Vec::new();
        for (at, offer) in changes.iter().enumerate() {
            if offer.by.only_unknown || offer.by.only_starting {
                continue;
            }
            // A second offer of the same attempt, or of the same job, goes the general way,
            // after the first.
            let job_seen = offer.job_id.is_some_and(|job| !jobs.insert(job));
            if job_seen || !attempts.insert(offer.attempt_id) {
                continue;
            }
            // The `won` event's detail (a hash of the output) is left to the backend, which
            // builds it only if it makes the offer.
            offered.push(OnlyAttempt {
                attempt_id: offer.attempt_id,
                output: &offer.output,
                actor: offer.by.actor.as_deref(),
                note: offer.by.note.as_deref(),
            });
            offered_at.push(at);
        }
        let won = if offered.is_empty() {
            None
        } else {
            B::complete_only_attempts(writer, &offered).await?
        };
        Ok(made_at(changes.len(), &offered_at, won, Completion::Won))
    }
}

/// An offer of the output of what may be its job's only attempt, made at once with others
/// ([`Backend::complete_only_attempts`]).
#[derive(Debug)]
pub(crate) struct OnlyAttempt<'a> {
    /// The attempt.
    pub attempt_id: Uuid,
    /// The output offered as its job's result.
    pub output: &'a Value,
    /// The actor of its `won` event (`None` for the worker).
    pub actor: Option<&'a str>,
    /// The resolution's note, kept in its `won` event's detail.
    pub note: Option<&'a str>,
}

impl OnlyAttempt<'_> {
    /// The detail of its `won` event, as the general rule writes it: the output's size and
    /// hash, and the note. Built by the backend that makes the offer, when it binds it, so
    /// a backend that makes none (`None` from [`Backend::complete_only_attempts`]) hashes
    /// nothing.
    pub fn won_detail(&self) -> Value {
        won_detail(self.output, self.note)
    }
}
