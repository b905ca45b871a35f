//! Citus, the PostgreSQL extension that shards tables across worker nodes: what the
//! PostgreSQL store does differently on a database with the `citus` extension (DESIGN §5,
//! "Past one primary: Citus"; docs/scaling.md).
//!
//! * **The schema.** `onejob migrate` distributes `jobs`, `attempts` and `job_events` by
//!   `tenant`, colocated (a job's attempts and events live on its shard), and makes the
//!   small global tables reference tables (copied to every node): `api_keys` (looked up
//!   before the tenant is known), `certificates` (per provider and kind) and
//!   `onejob_retention_pass` (the event log's delete guard, read by the trigger on every
//!   shard). onejob's bookkeeping (`_sqlx_migrations`) stays on the coordinator. Every key
//!   already names the tenant (migration `20261205000011_tenant_keys.sql`), so each
//!   constraint that arbitrates an invariant holds per shard as it did on one server.
//! * **Work that spans tenants** never takes row locks across shards (Citus refuses a
//!   multi-shard `FOR UPDATE`): the statements that claim work (first attempts, unknown
//!   attempts, heartbeats, retention) run once per tenant, each on one shard; group commits
//!   of acknowledgements and completions are one transaction per tenant (`grouped.rs`).
//! * **Intake** group-commits per tenant: the submissions of one tenant in a batch share a
//!   transaction on the tenant's shard, a statement each (the insert that does nothing on
//!   conflict, the read-back by key, the event); the one batch statement of a single
//!   PostgreSQL spans tenants, which Citus cannot plan.
//! * **Wake-ups.** The dispatch trigger's `pg_notify` fires on the worker node holding the
//!   shard, where no onejob node listens: on Citus the store notifies the coordinator's
//!   channel itself after each change that made a job due.

use std::sync::Arc;

use futures::FutureExt;
use sqlx::{Executor, PgConnection, PgPool, types::Json};

use super::{PgStore, relaxed::Relaxed, statistics::Watch};
use crate::store::{
    AttemptRecord, AttemptStart, FirstAttempts, Intake, JobRecord, NewEvent, NewJob, Pruned,
    StartOutcome, StoreError, Transitions,
    backend::{Dialect, Tx, read_all, read_optional},
    batch::{Batcher, WriteBatch},
    bound::Bound,
    rows,
    tenants::Tenants,
};

/// The tables distributed by `tenant`, the first one the others are colocated with.
pub const DISTRIBUTED: [&str; 3] = ["jobs", "attempts", "job_events"];

/// The small global tables, copied to every node.
pub const REFERENCE: [&str; 3] = ["api_keys", "certificates", "onejob_retention_pass"];

/// The advisory lock migrators take turns with while distributing (`"onejob-citus"`).
const CITUS_LOCK: i64 = 0x6f6e_656a_6f62_6369;

/// Whether this database has the `citus` extension.
pub(super) async fn installed(connection: &mut PgConnection) -> Result<bool, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')")
            .fetch_one(connection)
            .await?,
    )
}

/// Distributes the job tables and makes the global ones reference tables, those not yet so
/// (each step reads the catalog first: a rerun, or a second migrator after the first, does
/// nothing). The cycle of foreign keys between `jobs` and `attempts` (the winner is one of
/// the job's own attempts) is taken apart for the moment the tables move, in the same
/// transaction, and put back as it was.
pub(super) async fn distribute(pool: &PgPool) -> Result<(), StoreError> {
    let mut connection = pool.acquire().await?;
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(CITUS_LOCK)
        .execute(&mut *connection)
        .await?;
    let done = distribute_locked(&mut connection).await;
    let unlocked = sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(CITUS_LOCK)
        .execute(&mut *connection)
        .await;
    done?;
    unlocked?;
    Ok(())
}

async fn distribute_locked(connection: &mut PgConnection) -> Result<(), StoreError> {
    // onejob's triggers look only at their own row (and the retention guard at a reference
    // table): safe on shards, which Citus asks to be said explicitly. Kept for the
    // database, so that later migrations may replace a trigger of a distributed table.
    // (The database's name is quoted by PostgreSQL's `format('%I')`, not spliced here.)
    connection
        .execute(
            "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET citus.enable_unsafe_triggers = on', \
             current_database()); END $$",
        )
        .await?;
    connection
        .execute("SET citus.enable_unsafe_triggers = on")
        .await?;
    // The dispatch trigger's NOTIFY would fire on a worker node, where nobody listens (and
    // Citus cannot prepare a two-phase commit that notified): the store notifies instead.
    connection
        .execute("DROP TRIGGER IF EXISTS jobs_notify_dispatch ON jobs")
        .await?;
    for table in REFERENCE {
        if !is_distributed(connection, table).await? {
            sqlx::query("SELECT create_reference_table($1::regclass)")
                .bind(table)
                .execute(&mut *connection)
                .await?;
        }
    }
    if is_distributed(connection, DISTRIBUTED[0]).await? {
        return Ok(());
    }
    let mut tx = sqlx::Connection::begin(&mut *connection).await?;
    tx.execute("ALTER TABLE jobs DROP CONSTRAINT jobs_winner_is_own_attempt")
        .await?;
    sqlx::query("SELECT create_distributed_table('jobs', 'tenant')")
        .execute(&mut *tx)
        .await?;
    for table in &DISTRIBUTED[1..] {
        sqlx::query(
            "SELECT create_distributed_table($1::regclass, 'tenant', colocate_with => 'jobs')",
        )
        .bind(table)
        .execute(&mut *tx)
        .await?;
    }
    tx.execute(
        "ALTER TABLE jobs ADD CONSTRAINT jobs_winner_is_own_attempt \
         FOREIGN KEY (tenant, id, completed_by) REFERENCES attempts (tenant, job_id, id)",
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Whether Citus already knows `table` (distributed or reference).
async fn is_distributed(connection: &mut PgConnection, table: &str) -> Result<bool, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = $1::regclass)",
    )
    .bind(table)
    .fetch_one(connection)
    .await?)
}

/// The due jobs that never had an attempt, read without a lock across the shards: `$1`
/// limit, `$2` the kinds → `id, tenant, kind`. Each is then started alone, on its shard, by the
/// same guarded start as any attempt (`FOR UPDATE SKIP LOCKED` of that one job, the
/// conditions checked again on the locked row).
pub(super) const DUE_FIRST: &str = "SELECT id, tenant, kind FROM jobs WHERE dispatch_at <= now() \
     AND state = 'pending' AND attempts = 0 AND kind = ANY($2) ORDER BY dispatch_at LIMIT $1";

/// Starts a batch of first attempts on Citus: the due new jobs read across the shards
/// ([`DUE_FIRST`]), then each one started alone on its shard by the guarded start every
/// attempt goes through ([`Transitions::start_attempt`]); a job another starter took
/// meanwhile (held, or no longer new) is left to it.
pub(super) async fn start_first(
    store: &PgStore,
    batch: &FirstAttempts,
) -> Result<Vec<(JobRecord, AttemptRecord)>, StoreError> {
    store.statistics.poke();
    let kinds: Vec<Option<&str>> = batch.kinds.iter().map(|k| Some(k.kind.as_str())).collect();
    let due = read_all(store, DUE_FIRST, args![batch.limit, &kinds[..]]).await?;
    let mut started = Vec::with_capacity(due.len());
    for row in &due {
        let job_id = PgStore::uuid(row, "id")?;
        let tenant = PgStore::text(row, "tenant")?;
        let kind = PgStore::text(row, "kind")?;
        let Some(first) = batch.kinds.iter().find(|k| k.kind == kind) else {
            continue;
        };
        let start = AttemptStart {
            job_id,
            expected_attempts: 0,
            provider: first.provider.clone(),
            hedge: false,
            worker: batch.worker.clone(),
            lease: batch.lease,
            timeout: first.timeout,
            max_attempts: 1,
            upstream_key: format!("onejob:{job_id}"),
        };
        let StartOutcome::Started(attempt) = store.start_attempt(&start).await? else {
            continue;
        };
        let job = read_optional(store, PgStore::SQL.job_in_tenant, args![job_id, &tenant])
            .await?
            .ok_or_else(|| StoreError::Corrupt(format!("no job {job_id}")))?;
        started.push((rows::job::<PgStore>(&job)?, *attempt));
    }
    Ok(started)
}

/// The insert of one submission: `$1`–`$8` the job's columns → job columns, or no row when
/// its key is taken.
const INSERT_JOB: &str = concat!(
    "INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params, request_body) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING RETURNING ",
    job_columns!()
);

/// Most submissions one intake batch carries, and the writers side by side.
const MAX_BATCH: usize = 256;
const WRITERS: usize = 2;

/// The intake batcher on Citus ([`crate::store::Store::create_or_replay`]): each batch is
/// written as one transaction per tenant among its submissions, each on the tenant's shard;
/// a created job wakes the workers of every node; the tenants of the jobs written are
/// noted in `tenants`, for the statements about them that carry only their id; each batch
/// pokes the statistics `watch` (of the shards: [`super::statistics`]).
pub(super) fn intake_batcher(
    pool: &PgPool,
    bound: &Bound,
    relaxed: Relaxed,
    tenants: Arc<Tenants>,
    watch: Watch,
) -> Batcher<NewJob, Intake> {
    let (pool, bound) = (pool.clone(), bound.clone());
    let write: WriteBatch<NewJob, Intake> = Arc::new(move |jobs| {
        let (pool, bound, relaxed) = (pool.clone(), bound.clone(), relaxed.clone());
        let (tenants, watch) = (tenants.clone(), watch.clone());
        async move {
            watch.poke();
            let results = write_batch(&pool, &bound, jobs).await;
            for result in &results {
                if let Ok(Intake::Created(job) | Intake::Replayed(job)) = result {
                    tenants.note(job.id, &job.owner.tenant);
                }
            }
            if results
                .iter()
                .any(|r| matches!(r, Ok(Intake::Created(job)) if job.attempts == 0))
            {
                relaxed.wake_workers();
            }
            results
        }
        .boxed()
    });
    Batcher::spawn(WRITERS, MAX_BATCH, write)
}

/// Writes a batch tenant by tenant; a tenant's transaction that fails is written again
/// submission by submission, so that only the failing one fails.
async fn write_batch(
    pool: &PgPool,
    bound: &Bound,
    jobs: Vec<NewJob>,
) -> Vec<Result<Intake, StoreError>> {
    let mut tenants: Vec<&str> = jobs.iter().map(|j| j.owner.tenant.as_str()).collect();
    tenants.sort_unstable();
    tenants.dedup();
    let mut results: Vec<Option<Result<Intake, StoreError>>> = jobs.iter().map(|_| None).collect();
    for tenant in tenants {
        // In the order of their keys, as one PostgreSQL's batch statement inserts: two
        // batches that share keys then wait for each other's inserts in one order, never in a
        // cycle.
        let mut members: Vec<usize> = (0..jobs.len())
            .filter(|&at| jobs[at].owner.tenant == tenant)
            .collect();
        members.sort_by(|&a, &b| {
            let key = |at: usize| (&jobs[at].key_hash.0, &jobs[at].owner.user);
            key(a).cmp(&key(b))
        });
        let together = async {
            let mut tx = Tx::<PgStore>::begin(pool, bound).await?;
            let mut written = Vec::with_capacity(members.len());
            for &at in &members {
                written.push(write_one(&mut tx, &jobs[at]).await?);
            }
            tx.commit().await?;
            Ok::<_, StoreError>(written)
        }
        .await;
        match together {
            Ok(written) => {
                for (at, intake) in members.into_iter().zip(written) {
                    results[at] = Some(Ok(intake));
                }
            }
            Err(error) if error.is_retryable() || members.len() == 1 => {
                for at in members {
                    results[at] = Some(Err(error.clone()));
                }
            }
            Err(_) => {
                for at in members {
                    let alone = async {
                        let mut tx = Tx::<PgStore>::begin(pool, bound).await?;
                        let intake = write_one(&mut tx, &jobs[at]).await?;
                        tx.commit().await?;
                        Ok(intake)
                    }
                    .await;
                    results[at] = Some(alone);
                }
            }
        }
    }
    results.into_iter().flatten().collect()
}

/// One submission in `tx` ([`Tx::submit_one`]), its tenant remembered so that every
/// statement names it.
async fn write_one(tx: &mut Tx<PgStore>, job: &NewJob) -> Result<Intake, StoreError> {
    tx.remember(job.id, Some(job.owner.tenant.clone()));
    tx.submit_one(INSERT_JOB, job).await
}

/// One event: `$1` job id, `$2` attempt id or NULL, `$3` kind, `$4` actor or NULL, `$5`
/// detail, `$6` the job's tenant. On the tenant's shard alone; refused by the event log's
/// foreign key when the job is gone (deleted by retention since the event was queued),
/// which the writer counts as written: the job's log went with it.
const INSERT_EVENT: &str = "INSERT INTO job_events (job_id, attempt_id, kind, actor, detail, tenant) \
     VALUES ($1, $2, $3, $4, $5, $6)";

/// The relaxed writer's events on Citus ([`super::relaxed`]): one statement each, each on
/// its job's shard, one result per event (an event without its tenant is refused: every
/// queued event is a replay's, which carries it).
pub(super) async fn write_events(
    connection: &mut PgConnection,
    events: &[NewEvent],
) -> Vec<Result<(), StoreError>> {
    let mut results = Vec::with_capacity(events.len());
    for event in events {
        let Some(tenant) = &event.tenant else {
            results.push(Err(StoreError::Corrupt(format!(
                "an event of job {} without its tenant",
                event.job_id
            ))));
            continue;
        };
        let written = sqlx::query(INSERT_EVENT)
            .bind(event.job_id)
            .bind(event.attempt_id)
            .bind(event.kind.as_str())
            .bind(event.actor.as_deref())
            .bind(Json(&event.detail))
            .bind(tenant)
            .execute(&mut *connection)
            .await;
        results.push(match written {
            Err(sqlx::Error::Database(error)) if error.is_foreign_key_violation() => Ok(()),
            written => written.map(drop).map_err(StoreError::from),
        });
    }
    results
}

/// The tenants with finished jobs old enough for retention, those finished longest ago
/// first: `$1` seconds, `$2` most tenants → `tenant`. Read without a lock across shards.
pub(super) const PRUNABLE_TENANTS: &str = "SELECT tenant FROM jobs \
     WHERE state IN ('succeeded', 'failed', 'cancelled') \
     AND updated_at < now() - make_interval(secs => $1) \
     GROUP BY tenant ORDER BY min(updated_at) LIMIT $2";

/// Retention's statement for one tenant (`$3`), on its shard: the PostgreSQL store's
/// (`retention.rs`), each table's delete naming the tenant.
pub(super) const PRUNE_TENANT: &str = "WITH doomed AS (SELECT id FROM jobs \
       WHERE tenant = $3 AND state IN ('succeeded', 'failed', 'cancelled') \
       AND updated_at < now() - make_interval(secs => $1) \
       ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED), \
     events AS (DELETE FROM job_events e USING doomed d \
       WHERE e.tenant = $3 AND e.job_id = d.id RETURNING 1), \
     attempts AS (DELETE FROM attempts a USING doomed d \
       WHERE a.tenant = $3 AND a.job_id = d.id RETURNING 1), \
     jobs AS (DELETE FROM jobs j USING doomed d WHERE j.tenant = $3 AND j.id = d.id \
       RETURNING j.tenant, j.user_id, j.key_hash) \
     SELECT tenant, user_id, key_hash, (SELECT count(*) FROM attempts) AS attempts, \
       (SELECT count(*) FROM events) AS events FROM jobs";

/// What one tenant's pass deleted (its jobs' keys, and the counts) is added to `pruned`.
pub(super) fn count_pruned(
    rows: &[sqlx::postgres::PgRow],
    pruned: &mut Pruned,
) -> Result<(), StoreError> {
    use sqlx::Row as _;
    if let Some(row) = rows.first() {
        pruned.attempts += row.try_get::<i64, _>("attempts")?.max(0) as u64;
        pruned.events += row.try_get::<i64, _>("events")?.max(0) as u64;
    }
    pruned.jobs += rows.len() as u64;
    Ok(())
}
