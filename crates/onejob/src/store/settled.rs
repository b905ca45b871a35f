//! What a store remembers of jobs that can no longer change, so that a replay of one is
//! answered without the database.
//!
//! A `succeeded` or `cancelled` job never changes again: its result (or its having none), its
//! kind, fingerprint and owner are final, and so is what a replay of its key answers. A
//! `failed` job can be recovered, and every other state moves on, so they are never kept.
//! Intake keeps each settled job a replay found, by its key, for a short time and up to a
//! number of jobs; the next replay of that key matches its intent against the kept job and
//! is answered from it (its `replayed` event is written as every replay's is, without
//! waiting). A key reused for another intent is a conflict whether the job is kept or read.
//!
//! The one thing that does change a settled job is retention deleting it: for at most
//! [`KEEP_FOR`] after that, this process may still answer a replay of its key with it.

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

use hashlink::LruCache;
use onejob_domain::{JobState, KeyHash, Principal};

use super::JobRecord;

/// How long a settled job is kept.
pub(crate) const KEEP_FOR: Duration = Duration::from_secs(30);

/// How many settled jobs are kept, at most.
const CAPACITY: usize = 10_000;

/// Jobs kept whose params and result, as JSON text, are larger than this are not kept: the
/// memory goes to many small answers, not a few large ones.
const MAX_SIZE: usize = 16 * 1024;

type Key = (String, String, KeyHash);

/// Settled jobs by key (see the module doc).
pub(crate) struct Settled {
    jobs: Mutex<LruCache<Key, (JobRecord, Instant)>>,
}

impl std::fmt::Debug for Settled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settled").finish_non_exhaustive()
    }
}

impl Default for Settled {
    fn default() -> Self {
        Self {
            jobs: Mutex::new(LruCache::new(CAPACITY)),
        }
    }
}

impl Settled {
    /// The settled job under this owner's key, if it is kept.
    pub(crate) fn get(&self, owner: &Principal, key_hash: &KeyHash) -> Option<JobRecord> {
        let key = (owner.tenant.clone(), owner.user.clone(), *key_hash);
        let mut jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        match jobs.get(&key) {
            Some((job, at)) if at.elapsed() < KEEP_FOR => Some(job.clone()),
            Some(_) => {
                jobs.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Keeps `job` if it is settled and small.
    pub(crate) fn keep(&self, job: &JobRecord) {
        if !matches!(job.state, JobState::Succeeded | JobState::Cancelled) {
            return;
        }
        let size = job.params.to_string().len()
            + job.request_body.as_ref().map_or(0, String::len)
            + job.result.as_ref().map_or(0, |r| r.to_string().len());
        if size > MAX_SIZE {
            return;
        }
        let key = (
            job.owner.tenant.clone(),
            job.owner.user.clone(),
            job.key_hash,
        );
        let mut jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        jobs.insert(key, (job.clone(), Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use onejob_domain::{Fingerprint, JobState, KeyHash, Principal};
    use serde_json::json;
    use uuid::Uuid;

    use super::{MAX_SIZE, Settled};
    use crate::store::JobRecord;

    fn job(state: JobState, result: serde_json::Value) -> JobRecord {
        let now = time::OffsetDateTime::now_utc();
        JobRecord {
            id: Uuid::now_v7(),
            owner: Principal::new("acme", "alice"),
            key_hash: KeyHash([7; 32]),
            kind: "chat".into(),
            fingerprint: Fingerprint([1; 32]),
            params: json!({}),
            request_body: None,
            state,
            version: 3,
            attempts: 1,
            recoveries: 0,
            completed_by: None,
            result: Some(result),
            error: None,
            created_at: now,
            updated_at: now,
        }
    }

    #[test]
    fn only_small_jobs_that_can_no_longer_change_are_kept() {
        let owner = Principal::new("acme", "alice");
        for state in [JobState::Succeeded, JobState::Cancelled] {
            let settled = Settled::default();
            let kept = job(state, json!({"text": "hi"}));
            settled.keep(&kept);
            assert_eq!(settled.get(&owner, &kept.key_hash), Some(kept));
            // Another owner's key of the same hash is another key.
            let bob = Principal::new("acme", "bob");
            assert_eq!(settled.get(&bob, &KeyHash([7; 32])), None);
        }
        for state in [
            JobState::Pending,
            JobState::Running,
            JobState::Unknown,
            JobState::Failed,
        ] {
            let settled = Settled::default();
            settled.keep(&job(state, json!({})));
            assert_eq!(settled.get(&owner, &KeyHash([7; 32])), None, "{state:?}");
        }
        let settled = Settled::default();
        settled.keep(&job(JobState::Succeeded, json!("x".repeat(MAX_SIZE))));
        assert_eq!(settled.get(&owner, &KeyHash([7; 32])), None);
    }
}
