//! Listing jobs: the [`JobFilter`] of `GET /v1/jobs` and the [`JobPage`] it answers.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{Job, JobState};

/// Which jobs to list: the caller's own, newest first.
///
/// ```
/// use onejob_client::{JobFilter, JobState};
///
/// let filter = JobFilter::new().state(JobState::Failed).kind("chat.completion").limit(20);
/// # let _ = filter;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    state: Option<JobState>,
    kind: Option<String>,
    before: Option<Uuid>,
    limit: Option<u32>,
}

impl JobFilter {
    /// Every job (the server's default page size, 50).
    pub fn new() -> Self {
        Self::default()
    }

    /// Only jobs in this state.
    pub fn state(mut self, state: JobState) -> Self {
        self.state = Some(state);
        self
    }

    /// Only jobs of this kind.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Only jobs older than this one (the previous page's [`JobPage::next_before`]).
    pub fn before(mut self, job_id: Uuid) -> Self {
        self.before = Some(job_id);
        self
    }

    /// At most this many jobs (1–500).
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    /// The query string pairs.
    pub(crate) fn query(&self) -> Vec<(&'static str, String)> {
        let mut query = Vec::new();
        if let Some(state) = self.state {
            query.push(("state", state.as_str().to_owned()));
        }
        if let Some(kind) = &self.kind {
            query.push(("kind", kind.clone()));
        }
        if let Some(before) = self.before {
            query.push(("before", before.to_string()));
        }
        if let Some(limit) = self.limit {
            query.push(("limit", limit.to_string()));
        }
        query
    }
}

/// One page of jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct JobPage {
    /// Newest first.
    pub jobs: Vec<Job>,
    /// Where the next page starts (pass it to [`JobFilter::before`]); `None` on the last
    /// page.
    pub next_before: Option<Uuid>,
}

impl JobPage {
    /// The filter for the page after this one, or `None` when this is the last page.
    pub fn next_page(&self, filter: &JobFilter) -> Option<JobFilter> {
        self.next_before.map(|id| filter.clone().before(id))
    }
}
