//! [`Submission`]: what `POST /v1/jobs` answered: the job the key names, new or replayed.

use crate::Job;

/// The answer to a submission.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Submission {
    /// The job the idempotency key names.
    pub job: Job,
    /// `true` when the key already named this job (`200` with `Idempotent-Replayed: true`):
    /// nothing new was created. It is also `true` when an earlier try of this same call
    /// created the job but its answer was lost and the client resent it.
    pub replayed: bool,
}
