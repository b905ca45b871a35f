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
//!   attempts, heartbeats, retention) run once per tenant, each on one shard; a batch of
//!   first attempts is one transaction per tenant, a few tenants at once
//!   ([`start_first_of_tenant`]), and a worker node down costs only its tenants' jobs (the
//!   read of which tenants have due jobs goes shard by shard when the read across the shards
//!   fails: `spanning.rs`; a tenant whose transaction fails is left out); group
//!   commits of acknowledgements and completions are one transaction per tenant, a few
//!   tenants at once (`grouped.rs`). The other reads that span tenants go shard by shard
//!   too when a node is down (`spanning.rs`).
//! * **Intake** group-commits per tenant: the submissions of one tenant in a batch share a
//!   transaction on the tenant's shard (a few tenants at once), a statement each (the insert that does nothing on
//!   conflict, the read-back by key, the event), by the group commit SQLite's intake shares
//!   (`statements.rs`'s `submit_together`); the one batch statement of a single PostgreSQL
//!   spans tenants, which Citus cannot plan.
//! * **Wake-ups.** The dispatch trigger's `pg_notify` fires on the worker node holding the
//!   shard, where no onejob node listens: on Citus the store notifies the coordinator's
//!   channel itself after each change that made a job due.

use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use sqlx::{Executor, PgConnection, PgPool, types::Json};
use uuid::Uuid;

use super::{PgStore, Variant, relaxed::Relaxed, statistics::Watch};
use crate::store::{
    AttemptRecord, FirstAttempts, Intake, JobRecord, NewEvent, NewJob, Pruned, StoreError,
    backend::{Dialect, Tx},
    batch::{Batcher, WriteBatch},
    bound::Bound,
    rows,
    spanning::read_spanning,
    statements::submit_together,
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

/// The tenants of the due jobs that never had an attempt, read without a lock across the
/// shards, a row per job, oldest first: `$1` limit, `$2` the kinds → `tenant`. Each tenant's
/// share is then started on its shard ([`start_first_of_tenant`]).
pub(super) const DUE_FIRST: &str = "SELECT tenant FROM jobs WHERE dispatch_at <= now() \
     AND state = 'pending' AND attempts = 0 AND kind = ANY($2) ORDER BY dispatch_at LIMIT $1";

/// One tenant's first starts, step 1 of 3 (router: every table named with `tenant = $1`):
/// locks up to `$3` of the tenant's due jobs that never had an attempt, of the kinds `$2`,
/// skipping those another transaction holds, the conditions checked again on the locked row;
/// makes them `running` (as the single start's `mark_job_started`) → the jobs as started.
///
/// The single PostgreSQL's one-statement batch (`first.rs`) cannot be routed: Citus plans an
/// `INSERT … SELECT` inside a `WITH` apart from the rest (each part a subplan, its rows
/// pulled through the coordinator), so the attempts and events are the next two statements
/// of the same transaction.
const START_JOBS: &str = concat!(
    "WITH due AS (SELECT id AS due_id FROM jobs WHERE tenant = $1 AND dispatch_at <= now() \
       AND state = 'pending' AND attempts = 0 AND kind = ANY($2) \
       ORDER BY dispatch_at LIMIT $3 FOR UPDATE SKIP LOCKED) \
     UPDATE jobs SET state = 'running', attempts = attempts + 1, version = version + 1, \
       dispatch_at = NULL, updated_at = now() \
     FROM due WHERE tenant = $1 AND id = due_id RETURNING ",
    job_columns!()
);

/// Step 2 of 3: the attempts, numbered 1, of the jobs started in step 1 (`$3`), each with
/// its id from `$2` (same order) and its kind's provider and timeout (`$5`, `$6` for the
/// kinds `$4`), `$7` the worker, `$8` the lease (seconds) → the attempts. Read from the
/// jobs' own shard and inserted into the colocated one (Citus pushes the whole statement
/// down to that shard); the table's alias keeps Citus's deparsed `RETURNING` valid.
const START_ATTEMPTS: &str = concat!(
    "INSERT INTO attempts AS a (",
    new_attempt_columns!(),
    ") SELECT ",
    first_attempt_values!(
        "$2[array_position($3, j.id)]",
        "j.id",
        "$5[array_position($4, j.kind)]",
        "$7",
        "$8",
        "$6[array_position($4, j.kind)]",
        "j.tenant"
    ),
    " FROM jobs j WHERE j.tenant = $1 AND j.id = ANY($3) RETURNING ",
    "a.id, a.job_id, a.number, a.provider, a.state, a.hedge, a.task_id, a.worker, \
     a.lease_expires_at, a.deadline_at, a.started_at, a.acknowledged_at, a.finished_at, \
     a.unknown_since, a.upstream_key, a.key_spent, a.error, a.reconcile_checks"
);

/// Step 3 of 3: each attempt's `attempt_started` event: `$1` the tenant, `$2` the jobs,
/// `$3` their attempts, `$4` their providers. Its rows are made on the coordinator (which
/// draws the events' ids from its sequence, as for every event) and sent to the tenant's
/// shard alone.
const START_EVENTS: &str = concat!(
    "INSERT INTO job_events (job_id, attempt_id, kind, detail, tenant) \
     SELECT u.job_id, u.attempt_id, 'attempt_started', ",
    attempt_started_detail!("1", "u.provider", "false"),
    ", $1 FROM unnest($2::uuid[], $3::uuid[], $4::text[]) AS u (job_id, attempt_id, provider)"
);

/// Starts a batch of first attempts on Citus, shard by shard: the due new jobs' tenants are
/// read across the shards ([`DUE_FIRST`]; when that fails, a worker node down say, shard by
/// shard, those that answer: `spanning.rs`), then each tenant's share is started in
/// one transaction on its shard ([`start_first_of_tenant`]), [`Variant::TENANTS_AT_ONCE`]
/// tenants at a time. A tenant whose transaction fails (its worker node down, say) costs only its own
/// jobs: the others' starts are returned, and the error only when no tenant's went through.
pub(super) async fn start_first(
    store: &PgStore,
    batch: &FirstAttempts,
) -> Result<Vec<(JobRecord, AttemptRecord)>, StoreError> {
    store.statistics.poke();
    let kinds: Vec<Option<&str>> = batch.kinds.iter().map(|k| Some(k.kind.as_str())).collect();
    let args = args![batch.limit, &kinds[..]];
    let due = read_spanning(store, DUE_FIRST, |r| r.due_first, args).await?;
    // Each tenant with how many of its jobs were due, oldest first.
    let mut shares: Vec<(String, u32)> = Vec::new();
    for row in &due {
        let tenant = PgStore::text(row, "tenant")?;
        match shares.iter_mut().find(|(t, _)| *t == tenant) {
            Some((_, count)) => *count += 1,
            None => shares.push((tenant, 1)),
        }
    }
    let outcomes: Vec<_> = futures::stream::iter(shares)
        .map(|(tenant, count)| async move {
            let share = FirstAttempts {
                limit: count,
                ..batch.clone()
            };
            let started = start_first_of_tenant(store, &tenant, &share).await;
            (tenant, started)
        })
        .buffered(Variant::TENANTS_AT_ONCE)
        .collect()
        .await;
    let mut started = Vec::with_capacity(due.len());
    let mut failed = None;
    let tenants = outcomes.len();
    for (tenant, outcome) in outcomes {
        match outcome {
            Ok(jobs) => started.extend(jobs),
            Err(error) => {
                tracing::warn!(%tenant, error = %error, "starting a tenant's first attempts failed");
                failed.get_or_insert(error);
            }
        }
    }
    match failed {
        Some(error) if started.is_empty() && tenants > 0 => Err(error),
        _ => Ok(started),
    }
}

/// Starts up to `batch.limit` first attempts of `tenant`'s due new jobs in one transaction
/// on the tenant's shard, every statement routed to that shard alone ([`START_JOBS`],
/// [`START_ATTEMPTS`], [`START_EVENTS`]), under the single start's guard: each job's row lock
/// (skipped when another transaction holds it), the conditions checked again on the locked
/// row, the attempt's unique indexes. Returns each job as started, with its attempt.
/// (Public for the test that shows it runs on one shard.)
pub async fn start_first_of_tenant(
    store: &PgStore,
    tenant: &str,
    batch: &FirstAttempts,
) -> Result<Vec<(JobRecord, AttemptRecord)>, StoreError> {
    if batch.limit == 0 || batch.kinds.is_empty() {
        return Ok(Vec::new());
    }
    let kinds: Vec<&str> = batch.kinds.iter().map(|k| k.kind.as_str()).collect();
    let providers: Vec<&str> = batch.kinds.iter().map(|k| k.provider.as_str()).collect();
    let timeouts: Vec<f64> = batch
        .kinds
        .iter()
        .map(|k| k.timeout.as_secs_f64())
        .collect();
    let mut tx = Tx::<PgStore>::begin(&store.pool, &store.bound).await?;
    let started = tx
        .run(async |connection| {
            let jobs = sqlx::query(START_JOBS)
                .bind(tenant)
                .bind(&kinds)
                .bind(i64::from(batch.limit))
                .fetch_all(&mut *connection)
                .await?;
            if jobs.is_empty() {
                return Ok(Vec::new());
            }
            let jobs = rows::all::<PgStore, _>(&jobs, rows::job::<PgStore>)?;
            let job_ids: Vec<Uuid> = jobs.iter().map(|job| job.id).collect();
            let attempt_ids: Vec<Uuid> = jobs.iter().map(|_| Uuid::now_v7()).collect();
            let attempts = sqlx::query(START_ATTEMPTS)
                .bind(tenant)
                .bind(&attempt_ids)
                .bind(&job_ids)
                .bind(&kinds)
                .bind(&providers)
                .bind(&timeouts)
                .bind(&batch.worker)
                .bind(batch.lease.as_secs_f64())
                .fetch_all(&mut *connection)
                .await?;
            let mut attempts = rows::all::<PgStore, _>(&attempts, rows::attempt::<PgStore>)?;
            if attempts.len() != jobs.len() {
                return Err(StoreError::Corrupt(format!(
                    "{} first attempts inserted for {} jobs started",
                    attempts.len(),
                    jobs.len()
                )));
            }
            let events: (Vec<Uuid>, Vec<Uuid>, Vec<&str>) = attempts
                .iter()
                .map(|a| (a.job_id, a.id, a.provider.as_str()))
                .collect();
            sqlx::query(START_EVENTS)
                .bind(tenant)
                .bind(&events.0)
                .bind(&events.1)
                .bind(&events.2)
                .execute(&mut *connection)
                .await?;
            jobs.into_iter()
                .map(|job| {
                    let at = attempts
                        .iter()
                        .position(|a| a.job_id == job.id)
                        .ok_or_else(|| StoreError::Corrupt(format!("no attempt of {}", job.id)))?;
                    Ok((job, attempts.swap_remove(at)))
                })
                .collect::<Result<Vec<_>, StoreError>>()
        })
        .await?;
    tx.commit().await?;
    for (job, attempt) in &started {
        store.tenants.note(job.id, tenant);
        store.tenants.note(attempt.id, tenant);
    }
    Ok(started)
}

/// The insert of one submission: `$1`–`$10` the job's columns → job columns, or no row when
/// its key is taken.
const INSERT_JOB: &str = concat!(
    "INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params, request_body, \
     run_key, step) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
     ON CONFLICT DO NOTHING RETURNING ",
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

/// Writes a batch tenant by tenant, each tenant's share in one transaction on its shard by
/// intake's group commit written once ([`submit_together`]: a share that fails is written
/// again submission by submission, so that only the failing one fails),
/// [`Variant::TENANTS_AT_ONCE`] tenants at a time. Tenants share no row, so their
/// transactions never wait for each other.
async fn write_batch(
    pool: &PgPool,
    bound: &Bound,
    jobs: Vec<NewJob>,
) -> Vec<Result<Intake, StoreError>> {
    let mut tenants: Vec<&str> = jobs.iter().map(|j| j.owner.tenant.as_str()).collect();
    tenants.sort_unstable();
    tenants.dedup();
    // Each tenant's submissions, in the order of their keys, as one PostgreSQL's batch
    // statement inserts: two batches that share keys then wait for each other's inserts in
    // one order, never in a cycle.
    let shares: Vec<Vec<usize>> = tenants
        .into_iter()
        .map(|tenant| {
            let mut members: Vec<usize> = (0..jobs.len())
                .filter(|&at| jobs[at].owner.tenant == tenant)
                .collect();
            members.sort_by(|&a, &b| {
                let key = |at: usize| (&jobs[at].key_hash.0, &jobs[at].owner.user);
                key(a).cmp(&key(b))
            });
            members
        })
        .collect();
    let jobs = &jobs;
    let written: Vec<_> = futures::stream::iter(shares)
        .map(|members| async move {
            let share: Vec<&NewJob> = members.iter().map(|&at| &jobs[at]).collect();
            let written = submit_together::<PgStore>(pool, bound, INSERT_JOB, &share).await;
            (members, written)
        })
        .buffer_unordered(Variant::TENANTS_AT_ONCE)
        .collect()
        .await;
    let mut results: Vec<Option<Result<Intake, StoreError>>> = jobs.iter().map(|_| None).collect();
    for (members, written) in written {
        for (at, result) in members.into_iter().zip(written) {
            results[at] = Some(result);
        }
    }
    results.into_iter().flatten().collect()
}

/// The relaxed writer's events on Citus ([`super::relaxed`]): one statement each, each on
/// its job's shard (the dialect's `insert_event`, as a transaction's event is written: `$1`
/// job id, `$2` attempt id or NULL, `$3` kind, `$4` actor or NULL, `$5` detail, `$6` the
/// job's tenant), one result per event (an event without its tenant is refused: every
/// queued event is a replay's, which carries it). An event refused by the event log's
/// foreign key, its job gone (deleted by retention since the event was queued), counts as
/// written: the job's log went with it.
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
        let written = sqlx::query(PgStore::SQL.insert_event)
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
