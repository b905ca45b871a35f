//! What `onejob migrate` makes of a database with the `citus` extension: the job tables
//! distributed by `tenant` and colocated, the small global tables reference tables, and
//! every unique index and foreign key of the job tables naming the tenant (which Citus
//! requires for it to hold per shard). The behaviour on Citus is the rest of the suite's
//! `citus` runs.

use std::time::Duration;

use onejob::store::{Acknowledged, Completion, Intake, Resolution};
use onejob_domain::{AttemptState, EventKind, JobState};
use serde_json::json;
use sqlx::{Connection, PgConnection};

use crate::support::{Backend, TestDatabase, alice, citus, new_job, start_for, started};

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
/// owner's reads. The database is set to refuse every statement Citus would run on more
/// than one shard (`citus.multi_task_query_log_level = error`); the same store's scan of
/// due work across tenants is refused, which shows that the setting bites.
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
    // The setting refuses a statement across shards.
    let across = store.due_jobs(10).await;
    assert!(
        across
            .as_ref()
            .is_err_and(|e| format!("{e:?}").contains("multi-task query")),
        "a scan of every shard ran: {across:?}"
    );
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
