//! Widening the key's unique scope without a window (docs/design.md §2.10): `onejob
//! migrate` is killed after each step of the online migration, and once in the middle of
//! the concurrent index build; at every point duplicate submissions are refused (by the
//! database itself and through the API), and rerunning the migrator finishes the job.

use std::{process::Stdio, time::Duration};

use futures::future::join_all;
use onejob::store::postgres::online::{self, KeyScope, STEPS};
use sqlx::{Connection, Executor, PgConnection};

use crate::helpers::{Backend, TestApp, TestDatabase, chat, json};

async fn scope(db: &TestDatabase) -> KeyScope {
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    online::key_scope(&mut conn).await.unwrap()
}

/// `onejob migrate` on `db`, with `ONEJOB_FAULT` set to `fault` (or unset).
fn migrator(db: &TestDatabase, fault: Option<&str>) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_onejob"));
    command
        .args(["migrate", "--database", &db.url])
        .env("ONEJOB_FAULT", fault.unwrap_or_default())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Puts the database back where a previous onejob left it: migration 6 applied (the
/// `environment` column), none of the online steps done (only the narrow constraint).
async fn before_the_online_steps(db: &TestDatabase) {
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    conn.execute(
        "DROP INDEX jobs_one_per_key_scope; \
         ALTER TABLE jobs ADD CONSTRAINT jobs_one_per_key UNIQUE (tenant, user_id, key_hash)",
    )
    .await
    .unwrap();
    let state = scope(db).await;
    assert!(state.narrow && !state.wide_exists, "{state:?}");
}

/// Duplicates are refused: a raw INSERT copying an existing job's key fails on a unique
/// boundary, and racing submissions of a fresh key through the API make one job.
async fn assert_duplicates_refused(db: &TestDatabase, app: &TestApp, round: &str) {
    let state = scope(db).await;
    assert!(
        state.has_boundary(),
        "{round}: no unique boundary in force: {state:?}"
    );
    let error = db
        .exec(
            "INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params) \
             SELECT gen_random_uuid(), tenant, user_id, key_hash, kind, fingerprint, params \
             FROM jobs LIMIT 1",
        )
        .await
        .expect_err("a second row for a key");
    assert!(error.contains("duplicate key"), "{round}: {error}");

    let key = format!("race-{round}");
    let answers = join_all(
        (0..8).map(|_| async { json(app.submit(&key, &chat(&key)).send().await.unwrap()).await }),
    )
    .await;
    let created = answers.iter().filter(|(status, _)| *status == 201).count();
    assert_eq!(created, 1, "{round}: {answers:?}");
    let ids: std::collections::BTreeSet<_> = answers
        .iter()
        .map(|(_, job)| job["id"].to_string())
        .collect();
    assert_eq!(ids.len(), 1, "{round}: one job id for the key");
}

/// On an empty database `onejob migrate` says it created the schema; the online steps that
/// build the key index there are how it comes to be, not an upgrade, and are not announced
/// as one (they log at debug). A second run says the schema is up to date.
#[tokio::test]
async fn migrate_on_an_empty_database_says_it_created_the_schema() {
    let db = TestDatabase::create(Backend::Postgres).await;
    let migrate = || {
        let mut command = migrator(&db, None);
        command.env("RUST_LOG", "info").stderr(Stdio::piped());
        command
    };
    let first = migrate().output().await.unwrap();
    let said = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success(), "{said}");
    assert!(said.contains("created the PostgreSQL schema at"), "{said}");
    assert!(!said.contains("widened"), "no upgrade is announced: {said}");
    assert!(!said.contains("old constraint"), "{said}");
    assert!(
        scope(&db).await.is_done(),
        "the key index is built all the same"
    );

    let again = migrate().output().await.unwrap();
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{said}");
    assert!(
        said.contains("PostgreSQL schema at") && said.contains("is up to date"),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_migrator_killed_after_each_step_leaves_a_boundary_and_a_rerun_finishes() {
    let db = TestDatabase::create(Backend::Postgres).await;
    let app = TestApp::spawn(&db).await;
    app.create("existing", &chat("existing")).await;
    before_the_online_steps(&db).await;
    assert_duplicates_refused(&db, &app, "before").await;

    for step in STEPS {
        let status = migrator(&db, Some(&format!("abort-after-migration-step:{step}")))
            .status()
            .await
            .unwrap();
        assert!(!status.success(), "the migrator died after {step}");
        let state = scope(&db).await;
        match step {
            "build-index" | "verify-index" => {
                assert!(state.narrow && state.wide_valid, "{step}: {state:?}")
            }
            _ => assert!(state.is_done(), "{step}: {state:?}"),
        }
        assert_duplicates_refused(&db, &app, step).await;
    }
    // Rerunning a finished migration changes nothing.
    assert!(migrator(&db, None).status().await.unwrap().success());
    assert!(scope(&db).await.is_done());
    assert_duplicates_refused(&db, &app, "after").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_migrator_killed_during_the_concurrent_build_leaves_the_old_boundary_and_a_rerun_rebuilds()
 {
    let db = TestDatabase::create(Backend::Postgres).await;
    let app = TestApp::spawn(&db).await;
    app.create("existing", &chat("existing")).await;
    before_the_online_steps(&db).await;

    // An open transaction that wrote to `jobs` makes the concurrent build wait after it
    // has created its (still invalid) index: the migrator is killed right there.
    let mut blocker = PgConnection::connect(&db.url).await.unwrap();
    blocker.execute("BEGIN").await.unwrap();
    blocker
        .execute("UPDATE jobs SET version = version WHERE false")
        .await
        .unwrap();
    blocker
        .execute("LOCK TABLE jobs IN ROW EXCLUSIVE MODE")
        .await
        .unwrap();
    let mut child = migrator(&db, None).spawn().unwrap();
    let mut state = scope(&db).await;
    for _ in 0..600 {
        if state.wide_exists {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        state = scope(&db).await;
    }
    assert!(state.wide_exists && !state.wide_valid, "{state:?}");
    child.kill().await.unwrap();
    // The migrator's server session dies with it (as when its machine goes down).
    let mut admin = PgConnection::connect(&db.url).await.unwrap();
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = 'onejob-migrate' AND datname = current_database()",
        )
        .await
        .unwrap();
    blocker.execute("ROLLBACK").await.unwrap();
    let state = scope(&db).await;
    assert!(
        state.narrow && state.wide_exists && !state.wide_valid,
        "an invalid index is left behind beside the old constraint: {state:?}"
    );
    assert_duplicates_refused(&db, &app, "killed-mid-build").await;

    assert!(migrator(&db, None).status().await.unwrap().success());
    assert!(
        scope(&db).await.is_done(),
        "the rerun rebuilt the index and finished"
    );
    assert_duplicates_refused(&db, &app, "rebuilt").await;
}

/// SQLite has no concurrent index builds: its widening is one transactional table swap
/// (migration `20261130000006_key_scope.sql`). Its result has the one widened boundary.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_swaps_to_the_widened_boundary_in_one_transaction() {
    let db = TestDatabase::create(Backend::Sqlite).await;
    let app = TestApp::spawn(&db).await;
    app.create("existing", &chat("existing")).await;
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) FROM pragma_index_list('jobs') WHERE \"unique\" = 1 AND origin = 'u'"
        )
        .await,
        1,
        "one unique key boundary"
    );
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) FROM pragma_index_info((SELECT name FROM pragma_index_list('jobs') \
             WHERE \"unique\" = 1 AND origin = 'u'))"
        )
        .await,
        4,
        "over tenant, user, environment and key"
    );
    let error = db
        .exec(
            "INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params) \
             SELECT lower(hex(randomblob(16))), tenant, user_id, key_hash, kind, fingerprint, \
             params FROM jobs LIMIT 1",
        )
        .await
        .expect_err("a second row for a key");
    assert!(error.contains("UNIQUE"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_table_too_busy_to_lock_keeps_the_old_constraint_until_the_next_run() {
    let db = TestDatabase::create(Backend::Postgres).await;
    let app = TestApp::spawn(&db).await;
    app.create("existing", &chat("existing")).await;
    before_the_online_steps(&db).await;
    let status = migrator(&db, Some("abort-after-migration-step:verify-index"))
        .status()
        .await
        .unwrap();
    assert!(!status.success());

    // A writer holds the table: the migrator cannot take its lock for the drop.
    let mut writer = PgConnection::connect(&db.url).await.unwrap();
    writer.execute("BEGIN").await.unwrap();
    writer
        .execute("LOCK TABLE jobs IN ROW EXCLUSIVE MODE")
        .await
        .unwrap();
    assert!(
        migrator(&db, None).status().await.unwrap().success(),
        "a busy table is not a failed migration"
    );
    let state = scope(&db).await;
    assert!(state.narrow && state.wide_valid, "{state:?}");
    writer.execute("ROLLBACK").await.unwrap();
    assert_duplicates_refused(&db, &app, "busy").await;

    assert!(migrator(&db, None).status().await.unwrap().success());
    assert!(scope(&db).await.is_done());
}

/// A relation already under the widened index's name makes `CREATE UNIQUE INDEX
/// CONCURRENTLY IF NOT EXISTS` skip the build. When it is not the index onejob builds
/// (`definition`), `verify-index` refuses it with a message naming `defect` and the fix,
/// before anything is dropped: the old constraint stays and refuses duplicates (also one
/// the wrong index would let through: same key, other kind). Following the message's advice
/// then finishes the migration.
async fn a_wrong_index_under_the_name_is_refused(definition: &'static str, defect: &str) {
    let db = TestDatabase::create(Backend::Postgres).await;
    let app = TestApp::spawn(&db).await;
    app.create("existing", &chat("existing")).await;
    before_the_online_steps(&db).await;
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    conn.execute(definition).await.unwrap();

    let output = migrator(&db, None)
        .stderr(Stdio::piped())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "the migrator refused: {stderr}");
    for part in [
        "index jobs_one_per_key_scope exists but is not the key index onejob builds",
        defect,
        "jobs_one_per_key stays in force",
        "drop it (DROP INDEX CONCURRENTLY jobs_one_per_key_scope) and run onejob migrate again",
    ] {
        assert!(stderr.contains(part), "{part:?} in {stderr}");
    }
    let state = scope(&db).await;
    assert!(
        state.narrow && state.wide_wrong && !state.wide_valid && !state.is_done(),
        "the old constraint is still there: {state:?}"
    );
    assert_duplicates_refused(&db, &app, "wrong-index").await;
    let error = db
        .exec(
            "INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params) \
             SELECT gen_random_uuid(), tenant, user_id, key_hash, 'image.generate', \
             sha256(fingerprint), params FROM jobs LIMIT 1",
        )
        .await
        .expect_err("a second row for a key, of another kind");
    assert!(error.contains("jobs_one_per_key\""), "{error}");
    // A server starting on this database refuses too (the same step runs at every start).
    assert!(onejob::app::open_store(&db.url).await.is_err());

    conn.execute("DROP INDEX CONCURRENTLY jobs_one_per_key_scope")
        .await
        .unwrap();
    assert!(migrator(&db, None).status().await.unwrap().success());
    assert!(scope(&db).await.is_done(), "fixed as the message says");
    assert_duplicates_refused(&db, &app, "fixed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_non_unique_index_under_the_name_is_refused_and_the_old_constraint_kept() {
    a_wrong_index_under_the_name_is_refused(
        "CREATE INDEX jobs_one_per_key_scope ON jobs (tenant, user_id, environment, key_hash)",
        "it is not unique",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partial_unique_index_under_the_name_is_refused_and_the_old_constraint_kept() {
    a_wrong_index_under_the_name_is_refused(
        "CREATE UNIQUE INDEX jobs_one_per_key_scope \
         ON jobs (tenant, user_id, environment, key_hash) WHERE environment <> 'default'",
        "it has a predicate (WHERE (environment <> 'default'::text))",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_unique_index_over_other_columns_under_the_name_is_refused_and_the_old_constraint_kept() {
    a_wrong_index_under_the_name_is_refused(
        "CREATE UNIQUE INDEX jobs_one_per_key_scope \
         ON jobs (tenant, user_id, environment, key_hash, kind)",
        "it has columns (tenant, user_id, environment, key_hash, kind) instead of \
         (tenant, user_id, environment, key_hash)",
    )
    .await;
}
