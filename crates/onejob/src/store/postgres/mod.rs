//! The PostgreSQL store: production, and several onejob nodes sharing one database.
//!
//! Every statement is a static string with bound parameters. Intake relies on
//! `INSERT … ON CONFLICT DO NOTHING` on the key's unique index: under READ COMMITTED a
//! conflicting insert waits for the other transaction, and the read-back that follows (a new
//! statement, so a new snapshot) sees the winner's committed row.

use async_trait::async_trait;
use std::{sync::Arc, time::Duration};

use onejob_domain::{AttemptState, EventKind, Fingerprint, JobState, KeyHash, Principal};
use serde_json::Value;
use sqlx::{
    Connection, PgConnection, PgPool, Postgres, Transaction, postgres::PgPoolOptions, types::Json,
};
use time::OffsetDateTime;
use uuid::Uuid;

use super::{
    AttemptRecord, EventRecord, Intake, JobRecord, NewEvent, NewJob, Store, StoreError,
    StoreOptions,
    batch::Batcher,
    records::{storable, storable_text},
};

/// The column list every job query returns, in [`PgJobRow`] order.
macro_rules! job_columns {
    () => {
        "id, tenant, user_id, key_hash, kind, fingerprint, params, state, version, attempts, \
         recoveries, completed_by, result, error, created_at, updated_at"
    };
}

/// The column list every attempt query returns, in [`PgAttemptRow`] order.
macro_rules! attempt_columns {
    () => {
        "id, job_id, number, provider, state, hedge, task_id, worker, lease_expires_at, \
         deadline_at, started_at, acknowledged_at, finished_at, unknown_since, upstream_key, key_spent, \
         error"
    };
}

mod certificates;
mod dispatch;
mod held;
pub mod hosts;
mod intake;
mod keys;
mod listing;
pub mod online;
mod relaxed;
mod retention;
mod statements;
mod statistics;
mod tls;
mod wake;

/// The channel workers LISTEN on: intake notifies it after each batch that created jobs,
/// and a trigger when a job's dispatch time is set again (failover, retry, recovery).
pub const DISPATCH_CHANNEL: &str = "onejob_dispatch";

/// A [`Store`] on PostgreSQL.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    wake: wake::Wake,
    intake: Arc<Batcher<NewJob, Intake>>,
    /// The hosts of a URL naming several (or asking for a writable session), which keep
    /// every pool of this store on the host that accepts writes; `None` for a plain URL.
    /// Held, not read: their watcher runs as long as the store.
    _hosts: Option<Arc<hosts::Hosts>>,
}

impl PgStore {
    /// Connects a pool to `url` and checks that one connection can be opened.
    ///
    /// `url` may list several hosts, `postgres://u@h1:5432,h2:5432/db`, with libpq's
    /// `target_session_attrs` (`any`, `read-write`, `primary`): the store then uses the
    /// first host whose session matches and follows a failover ([`hosts`]).
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self, StoreError> {
        let list = hosts::HostList::parse(url)?;
        let followed =
            (!list.is_plain()).then(|| hosts::Hosts::new(list.clone(), options.acquire_timeout));
        let first = &list.targets[0];
        let tls = tls::TlsSettings::of(&first.url, &first.options);
        tls.check_root_cert()?;
        // One direct connection first: a pool would retry until its timeout and then report
        // only that it timed out, hiding why (refused, unknown host, bad password, a
        // certificate not trusted…).
        let mut probe = match &followed {
            Some(hosts) => hosts.choose().await?,
            None => tokio::time::timeout(
                options.acquire_timeout,
                PgConnection::connect_with(&first.options),
            )
            .await
            .map_err(|_| StoreError::unavailable(sqlx::Error::PoolTimedOut))?
            .map_err(|e| tls.explain(e))?,
        };
        warn_without_autovacuum(&mut probe).await;
        probe.close().await?;
        let connect = match &followed {
            Some(hosts) => hosts.options(&[]),
            None => first.options.clone(),
        };
        let pool = held::checked_after_idle(
            PgPoolOptions::new(),
            followed.as_ref().map(|hosts| hosts.switches()),
        )
        .max_connections(options.max_connections)
        .acquire_timeout(options.acquire_timeout)
        .connect_with(connect)
        .await?;
        if let Some(hosts) = &followed {
            hosts.follow(&pool, &[]);
            hosts::Hosts::watch(hosts);
        }
        Ok(Self::following(pool, followed))
    }

    /// Wraps an existing pool (inside a Tokio runtime: it starts the intake writers).
    pub fn from_pool(pool: PgPool) -> Self {
        Self::following(pool, None)
    }

    /// Wraps `pool`, whose side pools follow `hosts` when given.
    fn following(pool: PgPool, hosts: Option<Arc<hosts::Hosts>>) -> Self {
        Self {
            wake: wake::Wake::new(pool.clone(), hosts.as_ref().map(|h| h.moved())),
            intake: Arc::new(intake::intake_batcher(
                &pool,
                hosts.as_ref(),
                relaxed::Relaxed::spawn(&pool, hosts.as_ref()),
            )),
            pool,
            _hosts: hosts,
        }
    }

    /// The underlying pool (for tests and tools).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// A small pool of its own for one hot path, with `pool`'s connection settings plus the
/// session `settings`, built from `base` (e.g. with an `after_connect` hook); its connections
/// open on first use. With `hosts`, it follows them as `pool` does (its `before_acquire` is
/// then the one that drops connections opened before a failover).
fn side_pool(
    base: PgPoolOptions,
    pool: &PgPool,
    hosts: Option<&Arc<hosts::Hosts>>,
    connections: u32,
    settings: &[(&str, &str)],
) -> PgPool {
    let options = (*pool.connect_options())
        .clone()
        .options(settings.iter().copied());
    let base = match hosts {
        Some(hosts) => {
            let switches = hosts.switches();
            base.before_acquire(move |_, meta| {
                let current = !switches.outdated(meta.age);
                Box::pin(async move { Ok(current) })
            })
        }
        None => base,
    };
    let side = base
        .max_connections(connections)
        .acquire_timeout(pool.options().get_acquire_timeout())
        .connect_lazy_with(options);
    if let Some(hosts) = hosts {
        hosts.follow(&side, settings);
    }
    side
}

/// Warns when autovacuum is off: without the statistics it gathers, the planner guesses (it
/// can look keys up through the owner's index and read all of that owner's jobs; see
/// [`statistics`]).
async fn warn_without_autovacuum(connection: &mut PgConnection) {
    let setting: Result<String, _> = sqlx::query_scalar("SELECT current_setting('autovacuum')")
        .fetch_one(connection)
        .await;
    if matches!(setting.as_deref(), Ok("off")) {
        tracing::warn!(
            "autovacuum is off on this PostgreSQL: run ANALYZE regularly, or the planner \
             works without statistics on jobs, attempts and events"
        );
    }
}

#[derive(sqlx::FromRow)]
struct PgJobRow {
    id: Uuid,
    tenant: String,
    user_id: String,
    key_hash: Vec<u8>,
    kind: String,
    fingerprint: Vec<u8>,
    params: Json<Value>,
    state: String,
    version: i64,
    attempts: i32,
    recoveries: i32,
    completed_by: Option<Uuid>,
    result: Option<Json<Value>>,
    error: Option<Json<Value>>,
    created_at: OffsetDateTime,
    updated_at: OffsetDateTime,
}

impl TryFrom<PgJobRow> for JobRecord {
    type Error = StoreError;

    fn try_from(row: PgJobRow) -> Result<Self, StoreError> {
        Ok(JobRecord {
            id: row.id,
            owner: Principal::new(row.tenant, row.user_id),
            key_hash: KeyHash(
                row.key_hash
                    .try_into()
                    .map_err(|_| StoreError::Corrupt("key_hash is not 32 bytes".into()))?,
            ),
            kind: row.kind,
            fingerprint: Fingerprint::from_slice(&row.fingerprint)
                .ok_or_else(|| StoreError::Corrupt("fingerprint is not 32 bytes".into()))?,
            params: row.params.0,
            state: row
                .state
                .parse::<JobState>()
                .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            version: row.version,
            attempts: row.attempts,
            recoveries: row.recoveries,
            completed_by: row.completed_by,
            result: row.result.map(|j| j.0),
            error: row.error.map(|j| j.0),
            created_at: row.created_at,
            updated_at: row.updated_at,
        })
    }
}

#[derive(sqlx::FromRow)]
struct PgAttemptRow {
    id: Uuid,
    job_id: Uuid,
    number: i32,
    provider: String,
    state: String,
    hedge: bool,
    task_id: Option<String>,
    worker: Option<String>,
    lease_expires_at: Option<OffsetDateTime>,
    deadline_at: Option<OffsetDateTime>,
    started_at: OffsetDateTime,
    acknowledged_at: Option<OffsetDateTime>,
    finished_at: Option<OffsetDateTime>,
    unknown_since: Option<OffsetDateTime>,
    upstream_key: Option<String>,
    key_spent: bool,
    error: Option<Json<Value>>,
}

impl TryFrom<PgAttemptRow> for AttemptRecord {
    type Error = StoreError;

    fn try_from(row: PgAttemptRow) -> Result<Self, StoreError> {
        Ok(AttemptRecord {
            id: row.id,
            job_id: row.job_id,
            number: row.number,
            provider: row.provider,
            state: row
                .state
                .parse::<AttemptState>()
                .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            hedge: row.hedge,
            task_id: row.task_id,
            worker: row.worker,
            lease_expires_at: row.lease_expires_at,
            deadline_at: row.deadline_at,
            started_at: row.started_at,
            acknowledged_at: row.acknowledged_at,
            finished_at: row.finished_at,
            unknown_since: row.unknown_since,
            upstream_key: row.upstream_key,
            key_spent: row.key_spent,
            error: row.error.map(|j| j.0),
        })
    }
}

#[derive(sqlx::FromRow)]
struct PgEventRow {
    id: i64,
    job_id: Uuid,
    attempt_id: Option<Uuid>,
    kind: String,
    actor: Option<String>,
    detail: Json<Value>,
    at: OffsetDateTime,
}

impl TryFrom<PgEventRow> for EventRecord {
    type Error = StoreError;

    fn try_from(row: PgEventRow) -> Result<Self, StoreError> {
        Ok(EventRecord {
            id: row.id,
            job_id: row.job_id,
            attempt_id: row.attempt_id,
            kind: row
                .kind
                .parse::<EventKind>()
                .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            actor: row.actor,
            detail: row.detail.0,
            at: row.at,
        })
    }
}

/// Seconds as PostgreSQL's `make_interval(secs => …)` takes them.
fn secs(duration: Duration) -> f64 {
    duration.as_secs_f64()
}

/// A state column parsed; an unknown spelling is corrupt data.
fn parse_state<T: std::str::FromStr>(text: &str) -> Result<T, StoreError>
where
    T::Err: std::fmt::Display,
{
    text.parse::<T>()
        .map_err(|e| StoreError::Corrupt(e.to_string()))
}

async fn insert_event(
    tx: &mut Transaction<'static, Postgres>,
    event: &NewEvent,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO job_events (job_id, attempt_id, kind, actor, detail) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(event.job_id)
    .bind(event.attempt_id)
    .bind(event.kind.as_str())
    .bind(event.actor.as_deref().map(storable_text))
    .bind(Json(&*storable(&event.detail)))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        sqlx::migrate!("./migrations/postgres")
            .run(&self.pool)
            .await?;
        online::widen_key_scope(&self.pool).await?;
        Ok(())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn create_or_replay(&self, job: NewJob) -> Result<Intake, StoreError> {
        self.intake.submit(job).await
    }

    async fn append_event(&self, event: NewEvent) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        insert_event(&mut tx, &event).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn job(&self, owner: &Principal, id: Uuid) -> Result<Option<JobRecord>, StoreError> {
        let row: Option<PgJobRow> = sqlx::query_as(concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE id = $1 AND tenant = $2 AND user_id = $3"
        ))
        .bind(id)
        .bind(&owner.tenant)
        .bind(&owner.user)
        .fetch_optional(&self.pool)
        .await?;
        row.map(JobRecord::try_from).transpose()
    }

    async fn job_by_key(
        &self,
        owner: &Principal,
        key_hash: &KeyHash,
    ) -> Result<Option<JobRecord>, StoreError> {
        let row: Option<PgJobRow> = sqlx::query_as(concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE tenant = $1 AND user_id = $2 AND key_hash = $3 AND environment = 'default'"
        ))
        .bind(&owner.tenant)
        .bind(&owner.user)
        .bind(&key_hash.0[..])
        .fetch_optional(&self.pool)
        .await?;
        row.map(JobRecord::try_from).transpose()
    }

    async fn events(
        &self,
        owner: &Principal,
        job_id: Uuid,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Option<Vec<EventRecord>>, StoreError> {
        if self.job(owner, job_id).await?.is_none() {
            return Ok(None);
        }
        let rows: Vec<PgEventRow> = sqlx::query_as(
            "SELECT id, job_id, attempt_id, kind, actor, detail, at FROM job_events \
             WHERE job_id = $1 AND ($2::bigint IS NULL OR id > $2) ORDER BY id LIMIT $3",
        )
        .bind(job_id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(EventRecord::try_from)
            .collect::<Result<_, _>>()
            .map(Some)
    }

    async fn attempt_in_tenant(
        &self,
        tenant: &str,
        attempt_id: Uuid,
    ) -> Result<Option<(AttemptRecord, JobRecord)>, StoreError> {
        let row: Option<PgAttemptRow> = sqlx::query_as(concat!(
            "SELECT ",
            attempt_columns!(),
            " FROM attempts WHERE id = $1"
        ))
        .bind(attempt_id)
        .fetch_optional(&self.pool)
        .await?;
        let Some(attempt) = row.map(AttemptRecord::try_from).transpose()? else {
            return Ok(None);
        };
        let job: Option<PgJobRow> = sqlx::query_as(concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE id = $1 AND tenant = $2"
        ))
        .bind(attempt.job_id)
        .bind(tenant)
        .fetch_optional(&self.pool)
        .await?;
        Ok(job
            .map(JobRecord::try_from)
            .transpose()?
            .map(|job| (attempt, job)))
    }
}
