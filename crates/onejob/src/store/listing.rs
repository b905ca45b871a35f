//! The listings behind the API's job list and the operator dashboard: newest first, bounded,
//! scoped to an owner or a tenant.

use async_trait::async_trait;
use onejob_domain::{AttemptState, EventKind, Principal};

use super::{AttemptRecord, EventRecord, JobFilter, JobRecord, Scope, StoreError};

/// Listings of jobs, attempts and events.
#[async_trait]
pub trait Listings: Send + Sync {
    /// The owner's jobs matching `filter`, newest first.
    async fn list_jobs(
        &self,
        owner: &Principal,
        filter: &JobFilter,
    ) -> Result<Vec<JobRecord>, StoreError>;

    /// Attempts in `scope` (optionally only in `state`), newest first, at most `limit`.
    async fn list_attempts(
        &self,
        scope: &Scope,
        state: Option<AttemptState>,
        limit: u32,
    ) -> Result<Vec<AttemptRecord>, StoreError>;

    /// Events in `scope` (optionally only of `kind`), newest first, at most `limit`.
    async fn recent_events(
        &self,
        scope: &Scope,
        kind: Option<EventKind>,
        limit: u32,
    ) -> Result<Vec<EventRecord>, StoreError>;

    /// How many attempts are `unknown` right now, across all tenants (for metrics).
    async fn count_unknown(&self) -> Result<u64, StoreError>;
}
