//! The listings behind the API's job list and the operator dashboard: newest first, bounded,
//! scoped to an owner or a tenant.

use async_trait::async_trait;
use onejob_domain::{AttemptState, EventKind, Principal};

use super::{
    AttemptRecord, EventRecord, JobFilter, JobRecord, Scope, StoreError,
    backend::{Backend, read_all, read_one},
    rows,
};

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

#[async_trait]
impl<B: Backend> Listings for B {
    async fn list_jobs(
        &self,
        owner: &Principal,
        filter: &JobFilter,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let values = args![
            &owner.tenant,
            &owner.user,
            filter.state.map(|s| s.as_str()),
            filter.kind.as_deref(),
            filter.before,
            filter.limit,
        ];
        let jobs = read_all(self, B::SQL.list_jobs, values).await?;
        rows::all::<B, _>(&jobs, rows::job::<B>)
    }

    async fn list_attempts(
        &self,
        scope: &Scope,
        state: Option<AttemptState>,
        limit: u32,
    ) -> Result<Vec<AttemptRecord>, StoreError> {
        let values = args![
            &scope.tenant,
            scope.user.as_deref(),
            state.map(|s| s.as_str()),
            limit
        ];
        let attempts = read_all(self, B::SQL.list_attempts, values).await?;
        rows::all::<B, _>(&attempts, rows::attempt::<B>)
    }

    async fn recent_events(
        &self,
        scope: &Scope,
        kind: Option<EventKind>,
        limit: u32,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let values = args![
            &scope.tenant,
            scope.user.as_deref(),
            kind.map(|k| k.as_str()),
            limit
        ];
        let events = read_all(self, B::SQL.recent_events, values).await?;
        rows::all::<B, _>(&events, rows::event::<B>)
    }

    async fn count_unknown(&self) -> Result<u64, StoreError> {
        let row = read_one(self, B::SQL.count_unknown, args![]).await?;
        Ok(B::int(&row, "count")?.max(0) as u64)
    }
}
