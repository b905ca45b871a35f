//! Listings on PostgreSQL: a principal's jobs with filters and a keyset cursor, and a
//! tenant's attempts and recent events for operators and the dashboard.

use async_trait::async_trait;
use onejob_domain::{AttemptState, EventKind, Principal};

use super::{PgAttemptRow, PgEventRow, PgJobRow, PgStore};
use crate::store::{AttemptRecord, EventRecord, JobFilter, JobRecord, Listings, Scope, StoreError};

#[async_trait]
impl Listings for PgStore {
    async fn list_jobs(
        &self,
        owner: &Principal,
        filter: &JobFilter,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let rows: Vec<PgJobRow> = sqlx::query_as(concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE tenant = $1 AND user_id = $2 \
             AND ($3::text IS NULL OR state = $3) AND ($4::text IS NULL OR kind = $4) \
             AND ($5::uuid IS NULL OR id < $5) ORDER BY id DESC LIMIT $6"
        ))
        .bind(&owner.tenant)
        .bind(&owner.user)
        .bind(filter.state.map(|s| s.as_str()))
        .bind(filter.kind.as_deref())
        .bind(filter.before)
        .bind(i64::from(filter.limit))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(JobRecord::try_from).collect()
    }

    async fn list_attempts(
        &self,
        scope: &Scope,
        state: Option<AttemptState>,
        limit: u32,
    ) -> Result<Vec<AttemptRecord>, StoreError> {
        let rows: Vec<PgAttemptRow> = sqlx::query_as(concat!(
            "SELECT ",
            attempt_columns!(),
            " FROM attempts WHERE job_id IN (SELECT id FROM jobs WHERE tenant = $1 \
             AND ($2::text IS NULL OR user_id = $2)) AND ($3::text IS NULL OR state = $3) \
             ORDER BY id DESC LIMIT $4"
        ))
        .bind(&scope.tenant)
        .bind(scope.user.as_deref())
        .bind(state.map(|s| s.as_str()))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(AttemptRecord::try_from).collect()
    }

    async fn recent_events(
        &self,
        scope: &Scope,
        kind: Option<EventKind>,
        limit: u32,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let rows: Vec<PgEventRow> = sqlx::query_as(
            "SELECT e.id, e.job_id, e.attempt_id, e.kind, e.actor, e.detail, e.at \
             FROM job_events e JOIN jobs j ON j.id = e.job_id \
             WHERE j.tenant = $1 AND ($2::text IS NULL OR j.user_id = $2) \
             AND ($3::text IS NULL OR e.kind = $3) ORDER BY e.id DESC LIMIT $4",
        )
        .bind(&scope.tenant)
        .bind(scope.user.as_deref())
        .bind(kind.map(|k| k.as_str()))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(EventRecord::try_from).collect()
    }

    async fn count_unknown(&self) -> Result<u64, StoreError> {
        let count: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM attempts WHERE state = 'unknown'")
                .fetch_one(&self.pool)
                .await?;
        Ok(count.max(0) as u64)
    }
}
