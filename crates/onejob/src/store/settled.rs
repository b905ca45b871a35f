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
//! The one thing that does change a settled job is retention deleting it, after which its
//! key names nothing (the next submission under it is a new job). So where retention is on
//! (`finished_after`, on any node), a job is answered from memory only while it is far from
//! retention's reach: until [`MARGIN`] before it could be deleted, reckoned from the time it
//! finished (`updated_at`, the database's clock; the margin also covers a modest skew between
//! that clock and this node's). A job closer than that is not kept at all, and the pass that
//! deletes jobs forgets them here at once ([`Settled::forget`]).

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

use hashlink::LruCache;
use onejob_domain::{JobState, KeyHash, Principal};
use time::OffsetDateTime;

use super::JobRecord;

/// How long a settled job is kept.
pub(crate) const KEEP_FOR: Duration = Duration::from_secs(30);

/// How many settled jobs are kept, at most.
const CAPACITY: usize = 10_000;

/// Jobs kept whose params and result, as JSON text, are larger than this are not kept: the
/// memory goes to many small answers, not a few large ones.
const MAX_SIZE: usize = 16 * 1024;

/// How long before retention could delete a job this process stops answering from memory.
pub(crate) const MARGIN: Duration = Duration::from_secs(10);

type Key = (String, String, KeyHash);

/// Settled jobs by key (see the module doc).
pub(crate) struct Settled {
    /// Each job with the moment it stops being answered from here.
    jobs: Mutex<LruCache<Key, (JobRecord, Instant)>>,
    /// Retention's `finished_after`, where it is on.
    finished_after: Option<Duration>,
}

impl std::fmt::Debug for Settled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settled").finish_non_exhaustive()
    }
}

impl Settled {
    /// Nothing kept yet; `finished_after` is retention's setting where it is on (on any node
    /// of the database), `None` where jobs are never deleted.
    pub(crate) fn new(finished_after: Option<Duration>) -> Self {
        Self {
            jobs: Mutex::new(LruCache::new(CAPACITY)),
            finished_after,
        }
    }

    /// The settled job under this owner's key, if it is kept.
    pub(crate) fn get(&self, owner: &Principal, key_hash: &KeyHash) -> Option<JobRecord> {
        let key = (owner.tenant.clone(), owner.user.clone(), *key_hash);
        let mut jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        match jobs.get(&key) {
            Some((job, until)) if Instant::now() < *until => Some(job.clone()),
            Some(_) => {
                jobs.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Keeps `job` if it is settled, small, and far enough from retention's reach.
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
        let mut until = Instant::now() + KEEP_FOR;
        if let Some(finished_after) = self.finished_after {
            // How long until retention may delete it, less the margin; a job closer than
            // that is read from the database every time.
            let deletable_at = job.updated_at + finished_after;
            let left = deletable_at - OffsetDateTime::now_utc() - MARGIN;
            let Ok(left) = Duration::try_from(left) else {
                return;
            };
            if left.is_zero() {
                return;
            }
            until = until.min(Instant::now() + left);
        }
        let key = (
            job.owner.tenant.clone(),
            job.owner.user.clone(),
            job.key_hash,
        );
        let mut jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        jobs.insert(key, (job.clone(), until));
    }

    /// Forgets the jobs under these keys (deleted by retention).
    pub(crate) fn forget(&self, keys: impl IntoIterator<Item = (String, String, KeyHash)>) {
        let mut jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        for key in keys {
            jobs.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use onejob_domain::{Fingerprint, JobState, KeyHash, Principal};
    use serde_json::json;
    use uuid::Uuid;

    use std::time::Duration;

    use super::{KEEP_FOR, MARGIN, MAX_SIZE, Settled};
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
            run: None,
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
            let settled = Settled::new(None);
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
            let settled = Settled::new(None);
            settled.keep(&job(state, json!({})));
            assert_eq!(settled.get(&owner, &KeyHash([7; 32])), None, "{state:?}");
        }
        let settled = Settled::new(None);
        settled.keep(&job(JobState::Succeeded, json!("x".repeat(MAX_SIZE))));
        assert_eq!(settled.get(&owner, &KeyHash([7; 32])), None);
    }

    /// Where retention is on, a job is answered from memory only while it is more than
    /// [`MARGIN`] from being deletable: never one that retention may delete meanwhile.
    #[test]
    fn a_job_near_retention_is_never_answered_from_memory() {
        let owner = Principal::new("acme", "alice");
        let mut near = job(JobState::Succeeded, json!({"text": "hi"}));
        // Finished long enough ago that retention (2 s) may delete it now.
        near.updated_at -= Duration::from_secs(3);
        let settled = Settled::new(Some(Duration::from_secs(2)));
        settled.keep(&near);
        assert_eq!(settled.get(&owner, &near.key_hash), None);
        // Just finished, but with only 2 s of retention it is within the margin already.
        let fresh = job(JobState::Succeeded, json!({"text": "hi"}));
        settled.keep(&fresh);
        assert_eq!(settled.get(&owner, &fresh.key_hash), None);
        // Far from retention's reach: kept (for at most KEEP_FOR).
        let far = Settled::new(Some(KEEP_FOR + MARGIN + Duration::from_secs(60)));
        far.keep(&fresh);
        assert_eq!(far.get(&owner, &fresh.key_hash), Some(fresh.clone()));
    }

    #[test]
    fn a_pruned_job_is_forgotten() {
        let owner = Principal::new("acme", "alice");
        let settled = Settled::new(None);
        let kept = job(JobState::Succeeded, json!({"text": "hi"}));
        settled.keep(&kept);
        settled.forget([("acme".to_owned(), "alice".to_owned(), kept.key_hash)]);
        assert_eq!(settled.get(&owner, &kept.key_hash), None);
    }
}
