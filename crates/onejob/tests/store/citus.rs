//! What `onejob migrate` makes of a database with the `citus` extension: the job tables
//! distributed by `tenant` and colocated, the small global tables reference tables, and
//! every unique index and foreign key of the job tables naming the tenant (which Citus
//! requires for it to hold per shard); the hot path on one shard; the shards' statistics;
//! and the batches of first starts, which run tenant by tenant: side by side, with one
//! tenant's starts failing, and with a worker node stopped (on a cluster of the test's
//! own); heartbeats and claims with one tenant failing; and the reads spanning tenants with
//! a worker node stopped. The rest of the behaviour on Citus is the rest of the suite's
//! `citus` runs.

use std::{collections::HashSet, sync::Arc, time::Duration};

use futures::future::join_all;
use onejob::store::{
    Acknowledged, Completion, FirstAttempts, FirstStart, Intake, Resolution, Store, StoreOptions,
    UnknownBy,
    postgres::{PgStore, citus},
};
use onejob_chaos::citus::CitusCluster;
use onejob_domain::{AttemptState, EventKind, JobState, Principal};
use serde_json::json;
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

use crate::support::{
    Backend, TestDatabase, alice, citus, new_job, new_job_of, start_for, started,
};

/// A batch of up to `limit` first attempts of `chat.completion` jobs on provider `a`.
fn first_batch(limit: u32) -> FirstAttempts {
    FirstAttempts {
        limit,
        worker: "citus-worker".into(),
        lease: Duration::from_secs(30),
        kinds: vec![FirstStart {
            kind: "chat.completion".into(),
            provider: "a".into(),
            timeout: Duration::from_secs(60),
        }],
    }
}

/// The job tables are hash-distributed by `tenant` in one colocation group, their shards on
/// both workers; the global tables are reference tables; a second `migrate` changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn migrate_distributes_the_job_tables_by_tenant_and_copies_the_global_ones() {
    let db = TestDatabase::create(Backend::Citus).await;
    let store = db.open_store().await;
    store.migrate().await.expect("a second migrate");
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    let tables: Vec<(String, String, Option<String>, i32)> = sqlx::query_as(
        "SELECT logicalrelid::regclass::text, partmethod::text, \
         column_to_column_name(logicalrelid, partkey), colocationid \
         FROM pg_dist_partition ORDER BY 1",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let find = |name: &str| {
        tables
            .iter()
            .find(|t| t.0 == name)
            .unwrap_or_else(|| panic!("{name} is not known to Citus: {tables:?}"))
            .clone()
    };
    let jobs = find("jobs");
    for name in ["jobs", "attempts", "job_events"] {
        let table = find(name);
        assert_eq!(table.1, "h", "{name} is hash-distributed");
        assert_eq!(table.2.as_deref(), Some("tenant"), "{name} by tenant");
        assert_eq!(table.3, jobs.3, "{name} is colocated with jobs");
    }
    for name in ["api_keys", "certificates", "onejob_retention_pass"] {
        assert_eq!(find(name).1, "n", "{name} is a reference table");
    }
    let workers: i64 = sqlx::query_scalar(
        "SELECT count(DISTINCT nodeport) FROM pg_dist_shard s \
         JOIN pg_dist_placement p USING (shardid) JOIN pg_dist_node n USING (groupid) \
         WHERE s.logicalrelid = 'jobs'::regclass",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(
        workers, 2,
        "the shards of jobs are spread over both workers"
    );
    assert_eq!(citus().await.workers.len(), 2);
}

/// Every unique index and every foreign key of the job tables includes `tenant` (all but
/// the primary keys lead with it), as the migration for distribution made them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_key_of_the_job_tables_names_the_tenant() {
    let db = TestDatabase::create(Backend::Citus).await;
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    let unique: Vec<(String, String)> = sqlx::query_as(
        "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index i \
         WHERE i.indisunique AND i.indrelid IN ('jobs'::regclass, 'attempts'::regclass, \
         'job_events'::regclass)",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert!(unique.len() >= 6, "{unique:?}");
    for (name, definition) in &unique {
        assert!(definition.contains("tenant"), "{name}: {definition}");
        if !name.ends_with("_pkey") {
            assert!(
                definition.contains("(tenant,"),
                "{name} leads with the tenant: {definition}"
            );
        }
    }
    let keys: Vec<(String, String)> = sqlx::query_as(
        "SELECT conname::text, pg_get_constraintdef(oid) FROM pg_constraint \
         WHERE contype = 'f' AND conrelid IN ('jobs'::regclass, 'attempts'::regclass, \
         'job_events'::regclass)",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(keys.len(), 3, "{keys:?}");
    for (name, definition) in &keys {
        assert!(
            definition.starts_with("FOREIGN KEY (tenant,"),
            "{name}: {definition}"
        );
    }
}

/// The hot path of one job runs on one shard, statement by statement: intake, a replay,
/// its attempt's start, acknowledgement and result, a replay of the settled job, and the
/// owner's reads; and another node's reads of a due job it found, and of its attempts. The
/// database is set to refuse every statement Citus would run on more than one shard
/// (`citus.multi_task_query_log_level = error`); a count of the jobs is refused, which shows
/// that the setting bites.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_hot_path_of_one_job_runs_on_one_shard() {
    let db = TestDatabase::create(Backend::Citus).await;
    {
        let mut conn = PgConnection::connect(&db.url).await.unwrap();
        let database: String = sqlx::query_scalar("SELECT current_database()")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER DATABASE {database} SET citus.multi_task_query_log_level = 'error'"
        )))
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let store = db.open_store().await;
    let owner = alice();
    let job = match store.create_or_replay(new_job("hot", "hot")).await.unwrap() {
        Intake::Created(job) => job,
        other => panic!("{other:?}"),
    };
    assert!(matches!(
        store.create_or_replay(new_job("hot", "hot")).await.unwrap(),
        Intake::Replayed(_)
    ));
    let attempt = started(&*store, &start_for(job.id, 0, "a", false)).await;
    assert_eq!(
        store
            .acknowledge_attempt(attempt, Some("task-1"), None)
            .await
            .unwrap(),
        Acknowledged::Running
    );
    assert_eq!(
        store
            .complete_attempt(attempt, &json!({"answer": 42}), &Resolution::worker())
            .await
            .unwrap(),
        Completion::Won
    );
    // A replay of the settled job: read through intake once, then from memory, its event
    // written on the job's shard.
    for _ in 0..2 {
        assert!(matches!(
            store.create_or_replay(new_job("hot", "hot")).await.unwrap(),
            Intake::Replayed(_)
        ));
    }
    let read = store.job(&owner, job.id).await.unwrap().unwrap();
    assert_eq!(read.state, JobState::Succeeded);
    assert_eq!(read.completed_by, Some(attempt));
    let by_key = store.job_by_key(&owner, &job.key_hash).await.unwrap();
    assert_eq!(by_key.map(|j| j.id), Some(job.id));
    let attempts = store.attempts(&owner, job.id).await.unwrap().unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].state, AttemptState::Succeeded);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let events = store
            .events(&owner, job.id, None, 100)
            .await
            .unwrap()
            .unwrap();
        let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
        let replays = kinds.iter().filter(|k| **k == EventKind::Replayed).count();
        if replays == 3 {
            assert_eq!(kinds[0], EventKind::Created);
            assert!(kinds.contains(&EventKind::Won), "{kinds:?}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "replayed events written: {kinds:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A batch of first attempts, as a worker starts them on Citus: the tenant's share in one
    // transaction on its shard (the read of which tenants have due jobs, across the shards,
    // is the batch's one statement that is not routed, and takes no lock).
    let queued = match store
        .create_or_replay(new_job("hot-batch", "hot"))
        .await
        .unwrap()
    {
        Intake::Created(job) => job,
        other => panic!("{other:?}"),
    };
    let pg = PgStore::connect(&db.url, &Default::default())
        .await
        .unwrap();
    let first = citus::start_first_of_tenant(&pg, &owner.tenant, &first_batch(10))
        .await
        .unwrap();
    assert_eq!(first.len(), 1, "{first:?}");
    let (job, attempt) = &first[0];
    assert_eq!(
        (job.id, job.state, job.attempts),
        (queued.id, JobState::Running, 1)
    );
    assert_eq!((attempt.job_id, attempt.number), (queued.id, 1));
    let events = store
        .events(&owner, queued.id, None, 10)
        .await
        .unwrap()
        .unwrap();
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::Created, EventKind::AttemptStarted]);
    // The setting refuses a statement across shards.
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    let across = sqlx::query_scalar::<_, i64>("SELECT count(*) FROM jobs")
        .fetch_one(&mut conn)
        .await;
    assert!(
        across
            .as_ref()
            .is_err_and(|e| format!("{e:?}").contains("multi-task query")),
        "a scan of every shard ran: {across:?}"
    );
    // Another node's worker finds a due job (the read across the shards is refused here, so
    // it reads shard by shard) and notes its tenant: its reads of the job and its attempts
    // then run on the job's shard.
    let other = db.open_store().await;
    let retried = match store
        .create_or_replay(new_job("hot-due", "hot"))
        .await
        .unwrap()
    {
        Intake::Created(job) => job.id,
        other => panic!("{other:?}"),
    };
    let due = other.due_jobs(10).await.expect("due jobs, shard by shard");
    assert_eq!(due, vec![retried]);
    let job = other.job_for_dispatch(retried).await.unwrap().unwrap();
    assert_eq!(job.id, retried);
    assert_eq!(other.job_attempts(retried).await.unwrap(), vec![]);
}

/// The plan of `explain` (an `EXPLAIN`), one line of it a line.
async fn lookup_plan(conn: &mut PgConnection, explain: &'static str) -> String {
    let lines: Vec<String> = sqlx::query_scalar(explain).fetch_all(conn).await.unwrap();
    lines.join("\n")
}

/// The shards' statistics, which are what plans the statements on Citus (each worker node
/// plans its shard's statement when it runs): on a shard that holds 20,000 jobs of one
/// owner and was never analyzed, a key lookup goes through the owner's index and reads
/// every job of the owner (checked first, so that this test shows the hazard is there); the
/// store's statistics watch, poked by intake, reads the shards' statistics (the
/// coordinator's table is an empty shell) and has `jobs` analyzed on the coordinator, which
/// passes it on to every shard; the lookup then goes through the key's unique index.
/// Autovacuum is off for the job tables, so that only onejob analyzes them meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_statistics_watch_has_the_shards_analyzed() {
    const LOOKUP: &str = "EXPLAIN SELECT id FROM jobs WHERE tenant = 'acme' \
         AND user_id = 'alice' AND environment = 'default' AND key_hash = sha256('7'::bytea)";
    let db = TestDatabase::create(Backend::Citus).await;
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    for table in ["jobs", "attempts", "job_events"] {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER TABLE {table} SET (autovacuum_enabled = false)"
        )))
        .execute(&mut conn)
        .await
        .unwrap();
    }
    sqlx::query(
        "INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params) \
         SELECT gen_random_uuid(), 'acme', 'alice', sha256(i::text::bytea), 'chat', \
                sha256(i::text::bytea), '{}'::jsonb \
         FROM generate_series(1, 20000) AS i",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let before = lookup_plan(&mut conn, LOOKUP).await;
    assert!(
        before.contains("jobs_owner_recent"),
        "on a shard never analyzed the lookup was expected to use the owner's index:\n{before}"
    );

    let store = db.open_store().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    for n in 0.. {
        let believed: f64 = sqlx::query_scalar(
            "SELECT coalesce(sum(greatest(result::float8, 0)), 0)::float8 \
             FROM run_command_on_shards('jobs', \
             $$SELECT reltuples FROM pg_class WHERE oid = '%s'::regclass$$)",
        )
        .fetch_one(&mut conn)
        .await
        .unwrap();
        if believed >= 20_000.0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the shards of jobs were not analyzed within 90 s of submissions (their \
             statistics count {believed} rows)"
        );
        store
            .create_or_replay(new_job(&format!("next-{n}"), "p"))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = lookup_plan(&mut conn, LOOKUP).await;
    assert!(
        after.contains("jobs_one_per_key") && !after.contains("jobs_owner_recent"),
        "once the shards are analyzed the lookup was expected to use the key's index:\n{after}"
    );
}

/// Two onejob nodes, three starters each, start first attempts side by side on Citus until
/// no job is left new: 240 jobs of 24 tenants (spread over both workers), every one started
/// exactly once (one attempt, numbered 1, one `attempt_started`), by exactly one starter,
/// and every starter's call answered without an error: the tenants' transactions of two
/// starters skip each other's locked jobs instead of colliding on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_first_starts_start_every_job_once() {
    const TENANTS: usize = 24;
    const PER_TENANT: usize = 10;
    let db = TestDatabase::create(Backend::Citus).await;
    let nodes: [Arc<dyn Store>; 2] = [db.open_store().await, db.open_store().await];
    let submissions = (0..TENANTS * PER_TENANT).map(|i| {
        let store = nodes[i % 2].clone();
        async move {
            let owner = Principal::new(format!("tenant-{}", i % TENANTS), "user");
            let job = new_job_of(owner, "chat.completion", &format!("job-{i}"), "p");
            match store.create_or_replay(job).await.unwrap() {
                Intake::Created(job) => job.id,
                other => panic!("{other:?}"),
            }
        }
    });
    let mut jobs: Vec<Uuid> = join_all(submissions).await;
    jobs.sort();
    let starters = (0..6).map(|n| {
        let store = nodes[n % 2].clone();
        let db_url = db.url.clone();
        tokio::spawn(async move {
            let mut conn = PgConnection::connect(&db_url).await.unwrap();
            let mut mine = Vec::new();
            for _ in 0..1000 {
                let started = store
                    .start_first_attempts(&first_batch(16))
                    .await
                    .expect("a batch of first starts");
                mine.extend(
                    started
                        .into_iter()
                        .map(|(job, attempt)| (job.id, attempt.id)),
                );
                let left: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE attempts = 0")
                    .fetch_one(&mut conn)
                    .await
                    .unwrap();
                if left == 0 {
                    break;
                }
            }
            mine
        })
    });
    let mut started: Vec<(Uuid, Uuid)> = join_all(starters)
        .await
        .into_iter()
        .flat_map(|r| r.unwrap())
        .collect();
    started.sort();
    let ids: Vec<Uuid> = started.iter().map(|(job, _)| *job).collect();
    assert_eq!(ids, jobs, "every job started once, by one starter");
    let attempts: HashSet<Uuid> = started.iter().map(|(_, attempt)| *attempt).collect();
    assert_eq!(attempts.len(), jobs.len());
    let total = (TENANTS * PER_TENANT) as i64;
    assert_eq!(db.scalar("SELECT count(*) FROM attempts").await, total);
    assert_eq!(
        db.scalar("SELECT count(*) FROM attempts WHERE number = 1 AND state = 'starting'")
            .await,
        total
    );
    assert_eq!(
        db.scalar("SELECT count(*) FROM jobs WHERE state = 'running' AND attempts = 1")
            .await,
        total
    );
    assert_eq!(
        db.scalar("SELECT count(*) FROM job_events WHERE kind = 'attempt_started'")
            .await,
        total
    );
    let tenants = db
        .scalar("SELECT count(DISTINCT tenant) FROM attempts")
        .await;
    assert_eq!(tenants, TENANTS as i64);
}

/// Tenants tried until enough are found on each worker node.
const CANDIDATES: usize = 32;

/// A Citus cluster of a test's own (the process's shared one serves the tests running beside
/// it: a test that stops a worker node needs its own), with a migrated database and a store
/// on it.
struct OwnCluster {
    cluster: CitusCluster,
    url: String,
    store: Arc<dyn Store>,
    /// For each of the two worker nodes, tenants whose shards it holds.
    tenants: Vec<Vec<String>>,
}

impl OwnCluster {
    /// A coordinator and two workers, and `per_node` tenants on each worker.
    async fn start(per_node: usize) -> OwnCluster {
        let cluster = tokio::task::spawn_blocking(|| CitusCluster::start(2))
            .await
            .unwrap();
        let name = format!("onejob_test_{}", Uuid::new_v4().simple());
        cluster.create_database(&name).await;
        let url = cluster.url(&name);
        let store = onejob::store::open(&url, &StoreOptions::default())
            .await
            .expect("open the store on the cluster");
        store.migrate().await.expect("migrate (distribute)");
        let candidates: Vec<String> = (0..CANDIDATES).map(|i| format!("tenant-{i}")).collect();
        let mut tenants = Vec::new();
        for node in 0..2 {
            let on_node = cluster
                .tenants_on_worker(&name, "jobs", node, &candidates)
                .await;
            assert!(
                on_node.len() >= per_node,
                "{} of {CANDIDATES} tenants on worker {node}",
                on_node.len()
            );
            tenants.push(on_node[..per_node].to_vec());
        }
        OwnCluster {
            cluster,
            url,
            store,
            tenants,
        }
    }
}

/// A Citus worker node stopped while first attempts start costs only its tenants' jobs. On
/// a cluster of this test's own (the process's shared one serves the tests running beside
/// it), two tenants whose shards are on worker 0 and two on worker 1 have three new jobs
/// each; worker 0 is stopped as a crash would (`immediate`). A batch of first starts then
/// starts every job of worker 1's tenants (the batch does not fail as a whole), and none of
/// worker 0's; once worker 0 is back, its tenants' jobs are found as they were (`pending`,
/// no attempt, no `attempt_started`: nothing half-written) and the next batches start them,
/// each job exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_node_down_costs_only_its_tenants_first_starts() {
    const PER_TENANT: usize = 3;
    const TENANTS_PER_NODE: usize = 2;
    let OwnCluster {
        cluster,
        url,
        store,
        tenants,
    } = OwnCluster::start(TENANTS_PER_NODE).await;
    let (down, up) = (tenants[0].clone(), tenants[1].clone());
    let jobs_of = |tenants: &[String]| {
        let store = store.clone();
        let tenants = tenants.to_vec();
        async move {
            let mut ids = Vec::new();
            for tenant in &tenants {
                for i in 0..PER_TENANT {
                    let owner = Principal::new(tenant.as_str(), "user");
                    let job = new_job_of(owner, "chat.completion", &format!("{tenant}-{i}"), "p");
                    match store.create_or_replay(job).await.unwrap() {
                        Intake::Created(job) => ids.push(job.id),
                        other => panic!("{other:?}"),
                    }
                }
            }
            ids.sort();
            ids
        }
    };
    let down_jobs = jobs_of(&down).await;
    let up_jobs = jobs_of(&up).await;

    tokio::task::block_in_place(|| cluster.stop_worker(0));
    let started = store
        .start_first_attempts(&first_batch(100))
        .await
        .expect("the jobs of the tenants on the live worker start while the other worker is down");
    let mut ids: Vec<Uuid> = started.iter().map(|(job, _)| job.id).collect();
    ids.sort();
    assert_eq!(
        ids, up_jobs,
        "every job of the live worker's tenants started, none of the stopped worker's"
    );
    for (job, attempt) in &started {
        assert_eq!((job.state, job.attempts), (JobState::Running, 1));
        assert_eq!((attempt.job_id, attempt.number), (job.id, 1));
    }
    // Another batch while the worker is still down starts nothing (an error, or no job).
    if let Ok(more) = store.start_first_attempts(&first_batch(100)).await {
        assert!(more.is_empty(), "started again: {more:?}");
    }

    tokio::task::block_in_place(|| cluster.start_worker(0));
    let mut conn = PgConnection::connect(&url).await.unwrap();
    let count = async |conn: &mut PgConnection, sql: &'static str, tenants: &[String]| -> i64 {
        sqlx::query_scalar(sql)
            .bind(tenants)
            .fetch_one(conn)
            .await
            .unwrap()
    };
    assert_eq!(
        count(
            &mut conn,
            "SELECT count(*) FROM jobs WHERE tenant = ANY($1) AND state = 'pending' \
             AND attempts = 0 AND dispatch_at IS NOT NULL",
            &down
        )
        .await,
        down_jobs.len() as i64,
        "the stopped worker's jobs are still new and due"
    );
    assert_eq!(
        count(
            &mut conn,
            "SELECT count(*) FROM attempts WHERE tenant = ANY($1)",
            &down
        )
        .await,
        0,
        "no attempt of the stopped worker's jobs was written"
    );
    assert_eq!(
        count(
            &mut conn,
            "SELECT count(*) FROM job_events WHERE tenant = ANY($1) AND kind <> 'created'",
            &down
        )
        .await,
        0,
        "no event but `created` of the stopped worker's jobs was written"
    );

    // Back: the next batches start them (the coordinator's connections to the restarted
    // worker may fail once before they are made again).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut later: Vec<Uuid> = Vec::new();
    while later.len() < down_jobs.len() {
        match store.start_first_attempts(&first_batch(100)).await {
            Ok(more) => later.extend(more.iter().map(|(job, _)| job.id)),
            Err(error) => eprintln!("a batch after the worker's return: {error}"),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stopped worker's jobs did not start within 60 s of its return: {later:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    later.sort();
    assert_eq!(later, down_jobs, "each of its jobs started once");
    let all = [&down[..], &up[..]].concat();
    let total = (down_jobs.len() + up_jobs.len()) as i64;
    for (sql, what) in [
        (
            "SELECT count(*) FROM jobs WHERE tenant = ANY($1) AND state = 'running' \
             AND attempts = 1",
            "jobs running on their first attempt",
        ),
        (
            "SELECT count(*) FROM attempts WHERE tenant = ANY($1) AND number = 1 \
             AND state = 'starting'",
            "first attempts",
        ),
        (
            "SELECT count(DISTINCT job_id) FROM attempts WHERE tenant = ANY($1)",
            "jobs with an attempt",
        ),
        (
            "SELECT count(*) FROM job_events WHERE tenant = ANY($1) \
             AND kind = 'attempt_started'",
            "`attempt_started` events",
        ),
    ] {
        assert_eq!(count(&mut conn, sql, &all).await, total, "{what}");
    }
    let _ = conn.close().await;
}

/// A Citus worker node stopped costs only its tenants the reads that span every tenant:
/// which jobs are due, when the next is, whose leases lapsed, which attempts are `unknown`
/// and due for a check, which attempts a heartbeat renews. On a cluster of this test's own,
/// a tenant whose shards are on worker 0 and one on worker 1 each have a due new job, a live
/// attempt, a live attempt of a cancelled job, an attempt whose lease lapsed and an `unknown`
/// attempt due for its check. With worker 0 stopped as a crash would (`immediate`), a second
/// store (another onejob node: it noted no tenant yet) finds worker 1's tenant's share of
/// each and none of worker 0's (each read across the shards fails as a whole today), renews
/// its leases (an outage longer than a lease would otherwise turn the live node's attempts
/// `unknown`) and answers its cancelled attempt, and then follows each up on that tenant's
/// shard: the due job and its attempts read, the lapsed attempt made `unknown`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_node_down_costs_only_its_tenants_reads_spanning_tenants() {
    let OwnCluster {
        cluster,
        url,
        store,
        tenants,
    } = OwnCluster::start(1).await;
    let (down, up) = (tenants[0][0].as_str(), tenants[1][0].as_str());
    let mut conn = PgConnection::connect(&url).await.unwrap();
    let mut shares = Vec::new();
    for tenant in [down, up] {
        let share = Share {
            due: created_in(&*store, tenant, "due").await,
            live: started_in(&*store, tenant, "live").await,
            cancelled: started_in(&*store, tenant, "cancelled").await,
            lapsed: started_in(&*store, tenant, "lapsed").await,
            unknown: started_in(&*store, tenant, "unknown").await,
        };
        assert!(
            store
                .mark_unknown(
                    share.unknown.1,
                    &json!({"reason": "deadline"}),
                    UnknownBy::Worker
                )
                .await
                .unwrap()
        );
        for (sql, id) in [
            (
                "UPDATE jobs SET state = 'cancelled' WHERE tenant = $1 AND id = $2",
                share.cancelled.0,
            ),
            (
                "UPDATE attempts SET lease_expires_at = now() + interval '10 minutes' \
                 WHERE tenant = $1 AND state IN ('starting', 'running') AND id <> $2",
                share.lapsed.1,
            ),
            (
                "UPDATE attempts SET lease_expires_at = now() - interval '1 second' \
                 WHERE tenant = $1 AND id = $2",
                share.lapsed.1,
            ),
            (
                "UPDATE attempts SET reconcile_at = now() - interval '1 second' \
                 WHERE tenant = $1 AND id = $2",
                share.unknown.1,
            ),
        ] {
            sqlx::query(sql)
                .bind(tenant)
                .bind(id)
                .execute(&mut conn)
                .await
                .unwrap();
        }
        shares.push(share);
    }
    let up_share = &shares[1];
    // Another node: whatever it follows up, it learned the tenant from the read.
    let other = onejob::store::open(&url, &StoreOptions::default())
        .await
        .expect("a second store on the cluster");

    tokio::task::block_in_place(|| cluster.stop_worker(0));
    let hour = Duration::from_secs(3_600);
    assert_eq!(
        other
            .due_jobs(100)
            .await
            .expect("due jobs with worker 0 down"),
        vec![up_share.due],
        "the live node's tenant's due job, none of the stopped node's"
    );
    assert_eq!(
        other
            .due_others(100, &[])
            .await
            .expect("due others with worker 0 down"),
        vec![up_share.due]
    );
    let job = other
        .job_for_dispatch(up_share.due)
        .await
        .expect("the due job read on its shard")
        .expect("the due job");
    assert_eq!((job.state, job.attempts), (JobState::Pending, 0));
    assert_eq!(other.job_attempts(up_share.due).await.unwrap(), vec![]);
    assert_eq!(
        other
            .next_due_in()
            .await
            .expect("the next due job with worker 0 down"),
        Some(Duration::ZERO)
    );

    let expired = other
        .expired_attempts(hour)
        .await
        .expect("lapsed leases with worker 0 down");
    assert_eq!(
        expired,
        vec![(up_share.lapsed.1, "a".to_owned())],
        "the live node's tenant's lapsed attempt, none of the stopped node's"
    );
    let why = json!({"reason": "lease expired"});
    assert!(
        other
            .mark_unknown(up_share.lapsed.1, &why, UnknownBy::Rescuer { grace: hour })
            .await
            .expect("the lapsed attempt made unknown on its shard"),
    );

    let claimed = other
        .claim_unknown(10, Duration::from_secs(30))
        .await
        .expect("claims of unknown attempts with worker 0 down");
    let claimed: Vec<Uuid> = claimed.iter().map(|a| a.id).collect();
    assert!(
        claimed.contains(&up_share.unknown.1)
            && !claimed.contains(&shares[0].unknown.1)
            && claimed
                .iter()
                .all(|id| [up_share.unknown.1, up_share.lapsed.1].contains(id)),
        "the live node's tenant's unknown attempts, none of the stopped node's: {claimed:?}"
    );
    let job = other
        .job_for_dispatch(up_share.unknown.0)
        .await
        .expect("the claimed attempt's job read on its shard");
    assert!(job.is_some());

    let cancelled = other
        .heartbeat("test-worker", hour)
        .await
        .expect("a heartbeat with worker 0 down");
    assert_eq!(
        cancelled,
        vec![up_share.cancelled.1],
        "the live node's tenant's cancelled attempt"
    );
    let renewed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM attempts WHERE tenant = $1 AND id = ANY($2) \
         AND lease_expires_at > now() + interval '50 minutes'",
    )
    .bind(up)
    .bind(vec![up_share.live.1, up_share.cancelled.1])
    .fetch_one(&mut conn)
    .await
    .expect("a read of the live node's shard");
    assert_eq!(renewed, 2, "the live node's tenant's leases were renewed");
    let _ = conn.close().await;
}

/// One tenant's jobs in [`a_worker_node_down_costs_only_its_tenants_reads_spanning_tenants`],
/// each a job id, with its attempt's id where it has one.
struct Share {
    due: Uuid,
    live: (Uuid, Uuid),
    cancelled: (Uuid, Uuid),
    lapsed: (Uuid, Uuid),
    unknown: (Uuid, Uuid),
}

/// A new job of `tenant` with key `key`.
async fn created_in(store: &dyn Store, tenant: &str, key: &str) -> Uuid {
    let owner = Principal::new(tenant, "user");
    match store
        .create_or_replay(new_job_of(owner, "chat.completion", key, "p"))
        .await
        .unwrap()
    {
        Intake::Created(job) => job.id,
        other => panic!("{other:?}"),
    }
}

/// A job of `tenant` with key `key` and one attempt started on `a` by `test-worker`: the job's
/// id and the attempt's.
async fn started_in(store: &dyn Store, tenant: &str, key: &str) -> (Uuid, Uuid) {
    let job = created_in(store, tenant, key).await;
    (job, started(store, &start_for(job, 0, "a", false)).await)
}

/// A tenant whose first starts fail costs only its own jobs in a batch of first starts: a
/// trigger made for the test refuses every attempt of tenant `refused` (its transaction has
/// made the jobs `running` by then, and rolls that back). The batch starts the jobs of the
/// two other tenants and answers without an error; the refused tenant's jobs are found as
/// they were (`pending`, no attempt, no `attempt_started`). A batch in which no tenant's
/// starts went through answers the error. Once the trigger is gone, the next batch starts
/// the refused tenant's jobs, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_whose_first_starts_fail_costs_only_its_jobs() {
    const PER_TENANT: usize = 3;
    let db = TestDatabase::create(Backend::Citus).await;
    let store = db.open_store().await;
    let mut jobs: Vec<(String, Uuid)> = Vec::new();
    for tenant in ["refused", "fine-1", "fine-2"] {
        for i in 0..PER_TENANT {
            let owner = Principal::new(tenant, "user");
            let job = new_job_of(owner, "chat.completion", &format!("{tenant}-{i}"), "p");
            match store.create_or_replay(job).await.unwrap() {
                Intake::Created(job) => jobs.push((tenant.to_owned(), job.id)),
                other => panic!("{other:?}"),
            }
        }
    }
    let ids_of = |refused: bool| {
        let mut ids: Vec<Uuid> = jobs
            .iter()
            .filter(|(tenant, _)| (tenant == "refused") == refused)
            .map(|(_, id)| *id)
            .collect();
        ids.sort();
        ids
    };
    refuse_attempts_of(&db, "refused", "INSERT").await;

    let started = store
        .start_first_attempts(&first_batch(100))
        .await
        .expect("the other tenants' jobs start");
    let mut ids: Vec<Uuid> = started.iter().map(|(job, _)| job.id).collect();
    ids.sort();
    assert_eq!(ids, ids_of(false), "every job but the refused tenant's");
    let again = store.start_first_attempts(&first_batch(100)).await;
    assert!(
        again
            .as_ref()
            .is_err_and(|e| format!("{e:?}").contains("refused for the test")),
        "a batch of only the refused tenant's jobs answers its error: {again:?}"
    );
    assert_eq!(
        db.scalar(
            "SELECT count(*) FROM jobs WHERE tenant = 'refused' AND state = 'pending' \
             AND attempts = 0 AND dispatch_at IS NOT NULL"
        )
        .await,
        PER_TENANT as i64,
        "the refused tenant's jobs are still new and due"
    );
    assert_eq!(
        db.scalar("SELECT count(*) FROM attempts WHERE tenant = 'refused'")
            .await,
        0
    );
    assert_eq!(
        db.scalar("SELECT count(*) FROM job_events WHERE tenant = 'refused' AND kind <> 'created'")
            .await,
        0
    );

    db.exec("DROP TRIGGER refuse_attempts ON attempts")
        .await
        .unwrap();
    let later = store
        .start_first_attempts(&first_batch(100))
        .await
        .expect("the refused tenant's jobs start once the trigger is gone");
    let mut ids: Vec<Uuid> = later.iter().map(|(job, _)| job.id).collect();
    ids.sort();
    assert_eq!(ids, ids_of(true));
    let total = jobs.len() as i64;
    assert_eq!(
        db.scalar("SELECT count(*) FROM attempts WHERE number = 1")
            .await,
        total
    );
    assert_eq!(
        db.scalar("SELECT count(DISTINCT job_id) FROM attempts")
            .await,
        total
    );
    assert_eq!(
        db.scalar("SELECT count(*) FROM job_events WHERE kind = 'attempt_started'")
            .await,
        total
    );
}

/// A job of `tenant` (its user `user`) with one attempt started by `test-worker`.
async fn started_of(store: &dyn Store, tenant: &str) -> Uuid {
    started_in(store, tenant, tenant).await.1
}

/// Makes the database refuse every `on` (`INSERT` or `UPDATE`) of an attempt of `tenant`, with
/// the error "refused for the test": a trigger `refuse_attempts` made for the test.
async fn refuse_attempts_of(db: &TestDatabase, tenant: &str, on: &str) {
    db.exec_sql(format!(
        "CREATE FUNCTION refuse_attempts() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
         IF NEW.tenant = '{tenant}' THEN RAISE EXCEPTION 'refused for the test'; END IF; \
         RETURN NEW; END $$"
    ))
    .await
    .unwrap();
    db.exec_sql(format!(
        "CREATE TRIGGER refuse_attempts BEFORE {on} ON attempts \
         FOR EACH ROW EXECUTE FUNCTION refuse_attempts()"
    ))
    .await
    .unwrap();
}

/// Makes the database refuse every change of an attempt of tenant `a-refused`
/// ([`refuse_attempts_of`]). `a-refused` sorts first, so that a pass over the tenants meets
/// it before the others.
async fn refuse_attempt_changes_of_a_refused(db: &TestDatabase) {
    refuse_attempts_of(db, "a-refused", "UPDATE").await;
}

/// A heartbeat on Citus renews its leases tenant by tenant: a tenant whose renewal fails
/// (here refused by a trigger made for the test, and met first) keeps no other tenant's
/// leases from being renewed, nor its cancelled attempts from being answered; the heartbeat
/// answers the error only when no tenant's renewal went through.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_whose_lease_renewal_fails_keeps_no_other_from_renewal() {
    let db = TestDatabase::create(Backend::Citus).await;
    let store = db.open_store().await;
    started_of(&*store, "a-refused").await;
    refuse_attempt_changes_of_a_refused(&db).await;
    let beat = store
        .heartbeat("test-worker", Duration::from_secs(600))
        .await;
    assert!(
        beat.as_ref()
            .is_err_and(|e| format!("{e:?}").contains("refused for the test")),
        "with no tenant renewed, the refusal is answered: {beat:?}"
    );

    let mut cancelled = None;
    for tenant in ["b-fine", "c-fine"] {
        let attempt = started_of(&*store, tenant).await;
        if tenant == "c-fine" {
            cancelled = Some(attempt);
        }
    }
    db.exec("UPDATE jobs SET state = 'cancelled' WHERE tenant = 'c-fine'")
        .await
        .unwrap();
    db.exec(
        "UPDATE attempts SET lease_expires_at = now() + interval '5 seconds' \
             WHERE tenant <> 'a-refused'",
    )
    .await
    .unwrap();
    let beat = store
        .heartbeat("test-worker", Duration::from_secs(600))
        .await
        .expect("the other tenants' renewals go through");
    assert_eq!(
        beat,
        vec![cancelled.unwrap()],
        "the renewed tenants' cancelled attempts are answered"
    );
    assert_eq!(
        db.scalar(
            "SELECT count(*) FROM attempts WHERE tenant IN ('b-fine', 'c-fine') \
             AND lease_expires_at > now() + interval '500 seconds'"
        )
        .await,
        2,
        "the other tenants' leases were renewed"
    );
    assert_eq!(
        db.scalar(
            "SELECT count(*) FROM attempts WHERE tenant = 'a-refused' \
             AND lease_expires_at < now() + interval '60 seconds'"
        )
        .await,
        1
    );
}

/// Completions of attempts of many tenants at once on Citus, which a group commit writes a
/// few tenants' transactions at a time: each caller is answered about its own attempt and
/// each job gets its own attempt's output; a tenant whose completion fails (refused by a
/// trigger made for the test) costs only its own job, and the others win.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn completions_of_many_tenants_at_once_each_keep_their_own_answer() {
    let db = TestDatabase::create(Backend::Citus).await;
    let store = db.open_store().await;
    // The refused tenant in the middle: the first caller's change is likely written alone,
    // the others together.
    let mut tenants: Vec<String> = (0..11).map(|i| format!("tenant-{i}")).collect();
    tenants.insert(6, "a-refused".to_owned());
    let mut started = Vec::new();
    for tenant in &tenants {
        started.push(started_in(&*store, tenant, "many").await);
    }
    refuse_attempt_changes_of_a_refused(&db).await;
    let outcomes = join_all(started.iter().zip(&tenants).map(|((_, attempt), tenant)| {
        let store = store.clone();
        async move {
            store
                .complete_attempt(*attempt, &json!({"answer": tenant}), &Resolution::worker())
                .await
        }
    }))
    .await;
    for (((job, _), tenant), outcome) in started.iter().zip(&tenants).zip(outcomes) {
        let owner = Principal::new(tenant.as_str(), "user");
        let read = store.job(&owner, *job).await.unwrap().unwrap();
        if tenant == "a-refused" {
            assert!(
                outcome
                    .as_ref()
                    .is_err_and(|e| format!("{e:?}").contains("refused for the test")),
                "the refused tenant's completion answers its error: {outcome:?}"
            );
            assert_eq!(read.state, JobState::Running);
            assert_eq!(read.result, None);
        } else {
            assert_eq!(outcome.unwrap(), Completion::Won, "{tenant}");
            assert_eq!(read.state, JobState::Succeeded, "{tenant}");
            assert_eq!(read.result, Some(json!({"answer": tenant})), "{tenant}");
        }
    }
}

/// Claims of `unknown` attempts on Citus run tenant by tenant: a tenant whose claim fails
/// (refused by a trigger made for the test, and met first: its attempt due longest) costs
/// only its own attempts; the others' are claimed and answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_whose_unknown_claim_fails_costs_only_its_attempts() {
    let db = TestDatabase::create(Backend::Citus).await;
    let store = db.open_store().await;
    let mut fine = Vec::new();
    for tenant in ["a-refused", "b-fine", "c-fine"] {
        let attempt = started_of(&*store, tenant).await;
        assert!(
            store
                .mark_unknown(attempt, &json!({"reason": "deadline"}), UnknownBy::Worker)
                .await
                .unwrap()
        );
        if tenant != "a-refused" {
            fine.push(attempt);
        }
    }
    fine.sort();
    db.exec("UPDATE attempts SET reconcile_at = now() - interval '1 second'")
        .await
        .unwrap();
    db.exec(
        "UPDATE attempts SET reconcile_at = now() - interval '1 minute' \
         WHERE tenant = 'a-refused'",
    )
    .await
    .unwrap();
    refuse_attempt_changes_of_a_refused(&db).await;
    let claimed = store
        .claim_unknown(10, Duration::from_secs(30))
        .await
        .expect("the other tenants' attempts are claimed");
    let mut ids: Vec<Uuid> = claimed.iter().map(|a| a.id).collect();
    ids.sort();
    assert_eq!(ids, fine);
    assert_eq!(
        db.scalar(
            "SELECT count(*) FROM attempts WHERE tenant = 'a-refused' AND reconcile_checks = 0"
        )
        .await,
        1,
        "the refused tenant's attempt was not claimed"
    );
}
