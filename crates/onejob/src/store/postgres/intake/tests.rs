//! Unit tests of `store/postgres/intake.rs`.

use sqlx::{Connection, Executor, PgConnection, PgPool};

use super::{super::Variant, intake_pool, statistics};
use crate::store::{
    Intake, NewJob, Store,
    bound::{Bound, WRITE_TIMEOUT},
    postgres::{PgStore, connect::held::IDLE_CHECK, fresh},
};

/// Adds 20,000 jobs of one owner, and analyzes.
async fn fill_one_owner(db: &mut PgConnection) {
    add_jobs_of_one_owner(db).await;
    db.execute("ANALYZE jobs").await.unwrap();
}

/// Adds 20,000 jobs of one owner, without analyzing.
async fn add_jobs_of_one_owner(db: &mut PgConnection) {
    db.execute(
        "INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params) \
         SELECT gen_random_uuid(), 'acme', 'alice', sha256(i::text::bytea), 'chat', \
                sha256(i::text::bytea), '{}'::jsonb \
         FROM generate_series(1, 20000) AS i",
    )
    .await
    .unwrap();
}

/// Adds 20,000 jobs of one owner without analyzing, prepares intake's statement, and
/// checks that its generic plan now reads the owner's index: the hazard
/// [`statistics`] guards against, still there to guard against.
async fn add_jobs_of_one_owner_planned_through_their_index(db: &mut PgConnection) {
    add_jobs_of_one_owner(db).await;
    prepare_intake(db).await;
    db.execute("SET plan_cache_mode = force_generic_plan")
        .await
        .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(EXPLAIN_INTAKE)
        .fetch_all(&mut *db)
        .await
        .unwrap();
    let plan = plan.join("\n");
    assert!(
        plan.contains("jobs_owner_recent"),
        "without statistics of rows the plan was expected to use the owner's index:\n{plan}"
    );
}

/// How many rows the planner believes `jobs` holds (-1: never analyzed), as of the last
/// `ANALYZE` that committed. `ANALYZE` writes `pg_class.reltuples` in place, at once, and
/// its column statistics at its commit: between the two, a plan made in another session
/// has no statistics to go by yet. So this waits for any `ANALYZE` of `jobs` running now
/// to end first, by taking (and at once releasing) the lock it holds until it commits.
async fn believed_rows(db: &mut PgConnection) -> f32 {
    let reltuples =
        sqlx::query_scalar("SELECT reltuples FROM pg_class WHERE oid = 'jobs'::regclass")
            .fetch_one(&mut *db)
            .await
            .unwrap();
    db.execute("BEGIN; LOCK TABLE jobs IN SHARE UPDATE EXCLUSIVE MODE; COMMIT")
        .await
        .unwrap();
    reltuples
}

/// `explain` looks each key up in the unique index on an empty, never analyzed `jobs`
/// (the plans a new database gets, which a generic plan keeps until the table is
/// analyzed), and again on 20,000 analyzed jobs of one owner.
async fn assert_plans_look_keys_up_in_the_unique_index(
    db: &mut PgConnection,
    explain: &'static str,
) {
    assert_looks_keys_up_in_the_unique_index(db, explain).await;
    fill_one_owner(db).await;
    assert_looks_keys_up_in_the_unique_index(db, explain).await;
}

/// `explain` (an `EXPLAIN EXECUTE` of a prepared statement), under a custom plan and
/// under the generic plan intake's sessions use, looks each key up in the unique index on
/// the whole key (on an empty table, the owner's index `jobs_owner_recent` costs the same,
/// and a plan that chose it would read every job of the owner once the table grew).
async fn assert_looks_keys_up_in_the_unique_index(db: &mut PgConnection, explain: &'static str) {
    for mode in ["force_custom_plan", "force_generic_plan"] {
        sqlx::query("SELECT set_config('plan_cache_mode', $1, false)")
            .bind(mode)
            .execute(&mut *db)
            .await
            .unwrap();
        let plan: Vec<String> = sqlx::query_scalar(explain)
            .fetch_all(&mut *db)
            .await
            .unwrap();
        let plan = plan.join("\n");
        assert!(
            plan.contains("jobs_one_per_key_scope") && !plan.contains("Seq Scan on jobs"),
            "{mode}:\n{plan}"
        );
        let condition = plan
            .lines()
            .find(|line| line.contains("Index Cond"))
            .unwrap_or_default();
        assert!(
            condition.contains("key_hash") && condition.contains("environment"),
            "{mode}:\n{plan}"
        );
    }
}

/// The read-back stays one lookup of the whole unique key per submission. (Before the
/// lookups named the environment, the generic plan was a hash join over a sequential scan
/// of `jobs`, and the key hash was never part of an index condition.)
#[tokio::test]
async fn the_read_back_looks_each_key_up_in_the_unique_index() {
    let (mut db, _) = fresh!("onejob_unit_key_lookup").await;
    db.execute(concat!(
        "PREPARE taken(text[], text[], bytea[]) AS ",
        taken_sql!()
    ))
    .await
    .unwrap();
    assert_plans_look_keys_up_in_the_unique_index(
        &mut db,
        "EXPLAIN EXECUTE taken(ARRAY['acme', 'acme'], ARRAY['alice', 'alice'], \
         ARRAY[sha256('7'::bytea), sha256('no such key'::bytea)])",
    )
    .await;
    db.close().await.unwrap();
}

/// Prepares the intake statement as `intake` in `db`'s session.
async fn prepare_intake(db: &mut PgConnection) {
    db.execute(concat!(
        "PREPARE intake(uuid[], text[], text[], bytea[], text[], bytea[], jsonb[], \
         uuid[], text[], text[], jsonb[], text[], uuid[], text[], text[], float8[], \
         float8[]) AS ",
        intake_sql!()
    ))
    .await
    .unwrap();
}

/// Plans [`prepare_intake`]'s statement for two submissions, one key taken and one free.
const EXPLAIN_INTAKE: &str = "EXPLAIN EXECUTE intake(ARRAY[gen_random_uuid(), gen_random_uuid()], \
     ARRAY['acme', 'acme'], ARRAY['alice', 'alice'], \
     ARRAY[sha256('7'::bytea), sha256('no such key'::bytea)], \
     ARRAY['chat', 'chat'], ARRAY[sha256('7'::bytea), sha256('8'::bytea)], \
     ARRAY['{}'::jsonb, '{}'::jsonb], ARRAY[NULL::uuid, NULL::uuid], \
     ARRAY['created', 'created'], ARRAY[NULL::text, NULL::text], \
     ARRAY['{}'::jsonb, '{}'::jsonb], ARRAY[NULL::text, NULL::text], \
     ARRAY[NULL::uuid, NULL::uuid], ARRAY[NULL::text, NULL::text], \
     ARRAY[NULL::text, NULL::text], ARRAY[NULL::float8, NULL::float8], \
     ARRAY[NULL::float8, NULL::float8], ARRAY[NULL::bytea, NULL::bytea], \
     ARRAY[NULL::int4, NULL::int4])";

/// The intake statement's lookup of the jobs already under its keys, likewise (EXPLAIN
/// only plans it: nothing is inserted).
#[tokio::test]
async fn the_intake_statement_looks_each_key_up_in_the_unique_index() {
    let (mut db, _) = fresh!("onejob_unit_intake_plan").await;
    prepare_intake(&mut db).await;
    assert_plans_look_keys_up_in_the_unique_index(&mut db, EXPLAIN_INTAKE).await;
    db.close().await.unwrap();
}

/// On a `jobs` table with rows but no statistics, intake's generic plan reads the owner's
/// index (checked first, so that this test proves the hazard is still there to guard
/// against); once an intake connection opens, `jobs` gets analyzed, and the same
/// session's cached statement is replanned through the unique index.
#[tokio::test]
async fn an_intake_connection_has_jobs_analyzed_when_it_never_was() {
    let (mut db, options) = fresh!("onejob_unit_never_analyzed").await;
    // Only onejob may analyze it during the test.
    db.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")
        .await
        .unwrap();
    add_jobs_of_one_owner_planned_through_their_index(&mut db).await;

    let pool = PgPool::connect_with(options).await.unwrap();
    let watch = statistics::Watch::new(pool.clone(), Bound::within(WRITE_TIMEOUT), Variant::Single);
    let intake = intake_pool(&pool, None, watch);
    drop(intake.acquire().await.unwrap());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while believed_rows(&mut db).await < 0.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "jobs was not analyzed within a minute of an intake connection opening"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_looks_keys_up_in_the_unique_index(&mut db, EXPLAIN_INTAKE).await;
    intake.close().await;
    pool.close().await;
    db.close().await.unwrap();
}

/// On a `jobs` table analyzed while it was empty, with autovacuum off, nothing would ever
/// analyze it again: once rows arrive, intake's generic plan reads the owner's index
/// (checked first, as above). Intake's writer watches the statistics, has `jobs`
/// analyzed while submissions go on, and the cached statement is replanned through the
/// unique index.
#[tokio::test]
async fn intake_has_jobs_analyzed_again_when_it_was_analyzed_while_empty() {
    let (mut db, options) = fresh!("onejob_unit_analyzed_empty").await;
    db.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")
        .await
        .unwrap();
    db.execute("ANALYZE jobs").await.unwrap();
    let store = PgStore::from_pool(PgPool::connect_with(options).await.unwrap());
    // Intake's connection opens on the empty table: nothing to analyze yet.
    store
        .create_or_replay(NewJob::for_test("chat.completion", "first"))
        .await
        .unwrap();
    add_jobs_of_one_owner_planned_through_their_index(&mut db).await;

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    for n in 0.. {
        let believed = believed_rows(&mut db).await;
        if believed >= 20_000.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "jobs was not analyzed again within a minute of submissions (it is believed \
             to hold {believed} rows)"
        );
        store
            .create_or_replay(NewJob::for_test("chat.completion", &format!("next-{n}")))
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_looks_keys_up_in_the_unique_index(&mut db, EXPLAIN_INTAKE).await;
    db.close().await.unwrap();
}

/// Intake holds its connection between batches. One that broke while idle (here its
/// backend is terminated, as a database restart would) is noticed by the check before
/// the next batch, which then runs on a new connection instead of failing.
#[tokio::test]
async fn intake_replaces_a_held_connection_that_broke_while_idle() {
    let (mut db, options) = fresh!("onejob_unit_held_connection").await;
    let store = PgStore::from_pool(PgPool::connect_with(options).await.unwrap());
    let first = store
        .create_or_replay(NewJob::for_test("chat.completion", "first"))
        .await
        .unwrap();
    assert!(matches!(first, Intake::Created(_)), "{first:?}");
    let intake: Vec<i32> = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity \
         WHERE datname = current_database() AND query LIKE 'WITH inserted%'",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    assert_eq!(
        intake.len(),
        1,
        "intake's connection was expected to be open"
    );
    sqlx::query("SELECT pg_terminate_backend($1)")
        .bind(intake[0])
        .execute(&mut db)
        .await
        .unwrap();
    tokio::time::sleep(IDLE_CHECK + std::time::Duration::from_millis(200)).await;
    let second = store
        .create_or_replay(NewJob::for_test("chat.completion", "second"))
        .await;
    assert!(matches!(second, Ok(Intake::Created(_))), "{second:?}");
    db.close().await.unwrap();
}
