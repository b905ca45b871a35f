//! `onejob keys list` and `onejob keys revoke` through the binary, a revoked key refused
//! within the key cache time, unknown key ids remembered so they cost no database read, and
//! `keys` refusing a database that is not onejob's instead of making one.

use std::time::Duration;

use onejob_domain::Principal;

use crate::{
    cli::{onejob, output},
    helpers::{Backend, TestApp, TestDatabase, chat, create_key, postgres_and_sqlite_tests},
};

postgres_and_sqlite_tests!(
    keys_list_and_revoke_and_a_revoked_key_is_refused_after_the_cache_time,
    an_unknown_key_id_is_remembered_for_the_cache_time,
);

/// The key cache time the servers of these tests run with.
const TTL: Duration = Duration::from_millis(700);

async fn keys_list_and_revoke_and_a_revoked_key_is_refused_after_the_cache_time(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn_with(&db, |c| c.http.key_cache_ttl = TTL).await;
    let operator = create_key(&*app.store, "acme", "ops", true).await;
    let (id, _) = onejob::api_key::parse(&app.token).unwrap();
    let id = id.to_owned();
    let status = |token: String, key: &'static str| {
        let request = app.submit_as(&token, key, &chat(key));
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(status(app.token.clone(), "before").await, 201);

    let keys = |args: &[&str]| {
        let mut command = onejob();
        command
            .arg("keys")
            .args(args)
            .args(["--database", &db.url])
            .env_remove("ONEJOB_CONFIG");
        async move { output(&mut command).await }
    };
    let (code, stdout, stderr) = keys(&["list"]).await;
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["ID", "TENANT", "USER", "OPERATOR", "CREATED", "REVOKED"],
        "{stdout}"
    );
    let row = |stdout: &str| -> Vec<String> {
        stdout
            .lines()
            .find(|line| line.starts_with(&id))
            .unwrap_or_else(|| panic!("{id} listed in:\n{stdout}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    let alice = row(&stdout);
    assert_eq!(alice[1..4], ["acme", "alice", "no"], "{stdout}");
    assert!(alice[4].starts_with("20"), "created: {stdout}");
    assert_eq!(alice[5], "-", "not revoked: {stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.contains(" ops ") && l.contains(" yes ")),
        "the operator key: {stdout}"
    );
    assert!(
        !stdout.contains(app.token.rsplit('_').next().unwrap()),
        "no secret: {stdout}"
    );

    let (code, stdout, stderr) = keys(&["revoke", &id]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains(&format!("revoked key {id}")), "{stdout}");
    let (_, listed, _) = keys(&["list"]).await;
    assert!(row(&listed)[5].starts_with("20"), "revoked at: {listed}");
    let (code, stdout, _) = keys(&["revoke", &app.token]).await;
    assert_eq!(code, 0, "the whole key names it too");
    assert!(stdout.contains("already revoked"), "{stdout}");
    let (code, _, stderr) = keys(&["revoke", "ffffffffffffffff"]).await;
    assert_eq!(code, 1, "an unknown id fails");
    assert!(
        stderr.contains("no API key has the id \"ffffffffffffffff\""),
        "{stderr}"
    );

    // Within the cache time the node may still trust its cached record; after it, never.
    tokio::time::sleep(TTL + Duration::from_millis(300)).await;
    assert_eq!(status(app.token.clone(), "after").await, 401);
    assert_eq!(
        status(operator, "other").await,
        201,
        "other keys still work"
    );
}

async fn an_unknown_key_id_is_remembered_for_the_cache_time(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn_with(&db, |c| c.http.key_cache_ttl = Duration::from_secs(3)).await;
    let issued = onejob::api_key::issue(Principal::new("acme", "bob"), false);
    let token = issued.token.clone();
    let status = |key: &'static str| {
        let request = app.submit_as(&token, key, &chat(key));
        async move { request.send().await.unwrap().status().as_u16() }
    };
    let started = tokio::time::Instant::now();
    assert_eq!(status("first").await, 401, "no such key yet");
    // The key now exists, but the node remembers its id as unknown and does not ask the
    // database again until the cache time has passed.
    app.store.insert_api_key(issued.record).await.unwrap();
    assert_eq!(status("second").await, 401, "answered from the cache");
    assert!(started.elapsed() < Duration::from_secs(3), "within the TTL");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(status("third").await, 201, "asked the database again");
}

/// `onejob keys create` on a SQLite file that does not exist (a typo) refuses and creates
/// nothing, instead of writing the key into a new database no server reads (whose key then
/// got 401 everywhere); on a PostgreSQL database without onejob's schema it says so, and on
/// a PostgreSQL database that does not exist it says how to create it.
#[tokio::test]
async fn keys_refuse_a_database_that_is_not_onejobs() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("typo.db");
    let create = |database: String| {
        let mut command = onejob();
        command
            .args(["keys", "create", "--database", &database])
            .args(["--tenant", "acme", "--user", "alice"])
            .env_remove("ONEJOB_CONFIG");
        async move { output(&mut command).await }
    };
    let (code, stdout, stderr) = create(format!("sqlite://{}", typo.display())).await;
    assert_ne!(code, 0, "{stdout}");
    assert!(stdout.is_empty(), "no key printed: {stdout}");
    assert!(stderr.contains("no database file"), "{stderr}");
    assert!(
        !typo.exists(),
        "a database was created at {}",
        typo.display()
    );

    let empty = TestDatabase::create(Backend::Postgres).await;
    let (code, _, stderr) = create(empty.url.clone()).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("no onejob schema"), "{stderr}");
    assert!(stderr.contains("onejob migrate"), "{stderr}");

    let missing = empty.url.replace(&empty.name, "onejob_no_such_database");
    let (code, _, stderr) = create(missing).await;
    assert_ne!(code, 0);
    assert!(
        stderr.contains("createdb onejob_no_such_database"),
        "{stderr}"
    );
}
