//! Answers a provider gave that the store could not record in time.
//!
//! When recording an attempt's output keeps failing with retryable errors (the database
//! down, or a compare-and-swap that kept losing) until the attempt's recording window
//! closes, the output is not dropped: it is kept here, logged for operators with the
//! attempt id and the output itself (so `onejob attempts resolve` can use it if the process
//! dies), and the reconciler offers it again on every pass until the store takes it. Kept in
//! memory only: a process that dies loses it, and the attempt is then resolved by the
//! provider's status, a lookup, or an operator, as any unknown attempt.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use serde_json::Value;
use uuid::Uuid;

use crate::store::AttemptRecord;

/// One answer waiting to be recorded.
#[derive(Debug, Clone)]
pub struct UnrecordedAnswer {
    /// The attempt it answers.
    pub attempt: AttemptRecord,
    /// The job's kind (to validate and offer the output).
    pub kind: String,
    /// The provider's output.
    pub output: Value,
}

/// The answers one worker holds.
#[derive(Debug, Clone, Default)]
pub struct Unrecorded(Arc<Mutex<HashMap<Uuid, UnrecordedAnswer>>>);

impl Unrecorded {
    fn lock(&self) -> MutexGuard<'_, HashMap<Uuid, UnrecordedAnswer>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `answer` until it is recorded.
    pub fn keep(&self, answer: UnrecordedAnswer) {
        tracing::error!(
            attempt = %answer.attempt.id,
            job = %answer.attempt.job_id,
            output = %answer.output,
            "the provider answered but the answer could not be recorded; it is kept and \
             offered again (an operator can also resolve the attempt with this output)"
        );
        self.lock().insert(answer.attempt.id, answer);
    }

    /// The answers held now.
    pub fn all(&self) -> Vec<UnrecordedAnswer> {
        self.lock().values().cloned().collect()
    }

    /// Forgets the answer of `attempt_id` (recorded, or no longer wanted).
    pub fn forget(&self, attempt_id: Uuid) {
        self.lock().remove(&attempt_id);
    }

    /// How many answers are held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}
