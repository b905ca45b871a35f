//! Reading many records at once, for the API's listings and the dashboard's pages: the
//! owner's jobs, a job's attempts and event log, and attempts and events across a scope.
//!
//! Pages are cut here, once, so the API and the dashboard agree on where a page ends: a job
//! listing is newest first and continues `before` its last job; an event log is oldest first
//! and continues `after` its last event, and is read one entry past the page to tell whether
//! another page follows. A job that is missing and one that is another principal's look the
//! same ([`ListingError::NotFound`]).

use onejob_domain::{AttemptState, EventKind, Principal};
use uuid::Uuid;

use super::Jobs;
use crate::store::{AttemptRecord, EventRecord, JobFilter, JobRecord, Scope, StoreError};

/// Why a job's records were not listed.
#[derive(Debug, thiserror::Error)]
pub enum ListingError {
    /// The job does not exist or is not the owner's (the two look the same).
    #[error("no such job")]
    NotFound,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One page of the owner's jobs, newest first.
#[derive(Debug, Clone)]
pub struct JobsPage {
    /// The jobs.
    pub jobs: Vec<JobRecord>,
    /// The `before` of the next page: the last job's id when the page is full, else `None`.
    pub next_before: Option<Uuid>,
}

/// One page of a job's event log, oldest first.
#[derive(Debug, Clone)]
pub struct EventsPage {
    /// The events.
    pub events: Vec<EventRecord>,
    /// The `after` of the next page: the last event's id when more follow, else `None`.
    pub next_after: Option<i64>,
}

/// One job with everything the dashboard's job page shows.
#[derive(Debug, Clone)]
pub struct JobDetail {
    /// The job.
    pub job: JobRecord,
    /// Its attempts, oldest first.
    pub attempts: Vec<AttemptRecord>,
    /// The first page of its event log.
    pub events: EventsPage,
    /// Where it stands in its agent run, if it is in one.
    pub run: Option<super::runs::RunPlace>,
}

impl Jobs {
    /// One page of the owner's jobs matching `filter`, newest first.
    pub async fn jobs_page(
        &self,
        owner: &Principal,
        filter: &JobFilter,
    ) -> Result<JobsPage, StoreError> {
        let jobs = self.store.list_jobs(owner, filter).await?;
        let next_before = (jobs.len() == filter.limit as usize)
            .then(|| jobs.last().map(|j| j.id))
            .flatten();
        Ok(JobsPage { jobs, next_before })
    }

    /// The owner's job's attempts, oldest first.
    pub async fn attempts_of(
        &self,
        owner: &Principal,
        job_id: Uuid,
    ) -> Result<Vec<AttemptRecord>, ListingError> {
        self.store
            .attempts(owner, job_id)
            .await?
            .ok_or(ListingError::NotFound)
    }

    /// One page of the owner's job's event log, oldest first: at most `limit` events after
    /// `after` (from the start when `None`).
    pub async fn events_page(
        &self,
        owner: &Principal,
        job_id: Uuid,
        after: Option<i64>,
        limit: u32,
    ) -> Result<EventsPage, ListingError> {
        // One more than asked: whether it came tells whether there is a next page.
        let mut events = self
            .store
            .events(owner, job_id, after, limit + 1)
            .await?
            .ok_or(ListingError::NotFound)?;
        let more = events.len() > limit as usize;
        events.truncate(limit as usize);
        let next_after = more.then(|| events.last().map(|e| e.id)).flatten();
        Ok(EventsPage { events, next_after })
    }

    /// The owner's job with its attempts and the first `events` entries of its event log.
    pub async fn job_detail(
        &self,
        owner: &Principal,
        job_id: Uuid,
        events: u32,
    ) -> Result<JobDetail, ListingError> {
        let job = self
            .store
            .job(owner, job_id)
            .await?
            .ok_or(ListingError::NotFound)?;
        // Read right after the job: a job pruned in between shows without them.
        let attempts = self
            .store
            .attempts(owner, job_id)
            .await?
            .unwrap_or_default();
        let events = match self.events_page(owner, job_id, None, events).await {
            Err(ListingError::NotFound) => EventsPage {
                events: Vec::new(),
                next_after: None,
            },
            page => page?,
        };
        let run = self.run_place(&job).await?;
        Ok(JobDetail {
            job,
            attempts,
            events,
            run,
        })
    }

    /// Attempts in `scope` (only those in `state`, if given), newest first, at most `limit`;
    /// `state = unknown` is the unknown queue.
    pub async fn attempts_in(
        &self,
        scope: &Scope,
        state: Option<AttemptState>,
        limit: u32,
    ) -> Result<Vec<AttemptRecord>, StoreError> {
        self.store.list_attempts(scope, state, limit).await
    }

    /// Events in `scope` (only those of `kind`, if given), newest first, at most `limit`.
    pub async fn recent_events(
        &self,
        scope: &Scope,
        kind: Option<EventKind>,
        limit: u32,
    ) -> Result<Vec<EventRecord>, StoreError> {
        self.store.recent_events(scope, kind, limit).await
    }
}
