//! TLS to PostgreSQL against the local server (`ssl = on`, Debian's self-signed snakeoil
//! certificate for `CN=localhost`): `sslmode` and `sslrootcert` as libpq spells them, the
//! session really encrypted, and refusals that say what to check.

use onejob::store::{StoreError, postgres::PgStore};

use crate::{
    cli::{onejob, output},
    helpers::{Backend, TestDatabase},
};

/// `db`'s URL with `host` and the query `pairs` set.
fn with_tls(db: &TestDatabase, host: &str, pairs: &[(&str, &str)]) -> String {
    let mut url = url::Url::parse(&db.url).expect("database url");
    url.set_host(Some(host)).expect("host");
    url.query_pairs_mut().clear().extend_pairs(pairs);
    url.to_string()
}

/// Whether the store's session is encrypted, as the server sees it.
async fn session_is_tls(store: &PgStore) -> bool {
    sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(store.pool())
        .await
        .expect("pg_stat_ssl")
}

/// The server's own certificate file (self-signed: it is its own CA).
async fn server_certificate(db: &TestDatabase) -> String {
    let store = PgStore::connect(&db.url, &Default::default())
        .await
        .unwrap();
    let ssl: String = sqlx::query_scalar("SHOW ssl")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(ssl, "on", "these tests need PostgreSQL with ssl = on");
    sqlx::query_scalar("SHOW ssl_cert_file")
        .fetch_one(store.pool())
        .await
        .unwrap()
}

/// A CA made now: it signed nothing the server has.
fn unrelated_ca(dir: &std::path::Path) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        "onejob test CA that signed nothing",
    );
    let cert = params.self_signed(&key).unwrap();
    let path = dir.join("wrong-ca.pem");
    std::fs::write(&path, cert.pem()).unwrap();
    path.to_str().unwrap().to_owned()
}

async fn connect(url: &str) -> Result<PgStore, StoreError> {
    PgStore::connect(url, &Default::default()).await
}

#[tokio::test]
async fn sslmode_require_encrypts_the_session_and_disable_does_not() {
    let db = TestDatabase::create(Backend::Postgres).await;
    server_certificate(&db).await;
    let tls = connect(&with_tls(&db, "127.0.0.1", &[("sslmode", "require")]))
        .await
        .expect("sslmode=require connects");
    assert!(session_is_tls(&tls).await, "sslmode=require is TLS");
    let plain = connect(&with_tls(&db, "127.0.0.1", &[("sslmode", "disable")]))
        .await
        .unwrap();
    assert!(!session_is_tls(&plain).await, "sslmode=disable is not TLS");
}

#[tokio::test]
async fn verify_full_with_a_wrong_root_is_refused_naming_sslrootcert() {
    let db = TestDatabase::create(Backend::Postgres).await;
    server_certificate(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let wrong = unrelated_ca(dir.path());
    let url = with_tls(
        &db,
        "localhost",
        &[("sslmode", "verify-full"), ("sslrootcert", &wrong)],
    );
    let error = connect(&url)
        .await
        .expect_err("an untrusted server is refused");
    assert!(matches!(error, StoreError::Tls(_)), "{error:?}");
    assert!(!error.is_retryable(), "retrying will not make it trusted");
    let message = error.to_string();
    assert!(
        message.starts_with("TLS to PostgreSQL failed: certificate not trusted"),
        "{message}"
    );
    assert!(
        message.contains(&format!("sslrootcert={wrong}")),
        "{message}"
    );

    // Without sslrootcert only the built-in roots are trusted, and the message says what to set.
    let url = with_tls(&db, "localhost", &[("sslmode", "verify-full")]);
    let message = connect(&url).await.unwrap_err().to_string();
    assert!(message.contains("set sslrootcert="), "{message}");

    // A root file that is not there is named before any connection is tried.
    let url = with_tls(
        &db,
        "localhost",
        &[
            ("sslmode", "verify-ca"),
            ("sslrootcert", "/nonexistent/ca.pem"),
        ],
    );
    let message = connect(&url).await.unwrap_err().to_string();
    assert!(
        message.contains("cannot read sslrootcert=/nonexistent/ca.pem"),
        "{message}"
    );
}

#[tokio::test]
async fn verify_ca_trusts_the_servers_root_and_verify_full_also_checks_the_host() {
    let db = TestDatabase::create(Backend::Postgres).await;
    let root = server_certificate(&db).await;
    // verify-ca checks the CA only: 127.0.0.1 is fine although the certificate names
    // localhost.
    let store = connect(&with_tls(
        &db,
        "127.0.0.1",
        &[("sslmode", "verify-ca"), ("sslrootcert", &root)],
    ))
    .await
    .expect("verify-ca with the server's own certificate as root connects");
    assert!(session_is_tls(&store).await);
    // verify-full by the name the certificate lists connects…
    let store = connect(&with_tls(
        &db,
        "localhost",
        &[("sslmode", "verify-full"), ("sslrootcert", &root)],
    ))
    .await
    .expect("verify-full by the certificate's own name connects");
    assert!(session_is_tls(&store).await);
    // …and by an address the certificate does not list is refused, saying so.
    let message = connect(&with_tls(
        &db,
        "127.0.0.1",
        &[("sslmode", "verify-full"), ("sslrootcert", &root)],
    ))
    .await
    .unwrap_err()
    .to_string();
    assert!(
        message.contains("not valid for the host \"127.0.0.1\""),
        "{message}"
    );
    assert!(message.contains("sslmode=verify-ca"), "{message}");
}

#[tokio::test]
async fn onejob_migrate_runs_over_tls_and_explains_a_refusal() {
    let db = TestDatabase::create(Backend::Postgres).await;
    server_certificate(&db).await;
    let url = with_tls(&db, "127.0.0.1", &[("sslmode", "require")]);
    let (code, _, stderr) = output(onejob().args(["migrate", "--database", &url])).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("is up to date"), "{stderr}");
    assert_eq!(
        db.scalar("SELECT count(*) FROM jobs").await,
        0,
        "the schema was created over TLS"
    );

    let dir = tempfile::tempdir().unwrap();
    let wrong = unrelated_ca(dir.path());
    let url = with_tls(
        &db,
        "localhost",
        &[("sslmode", "verify-full"), ("sslrootcert", &wrong)],
    );
    let (code, _, stderr) = output(onejob().args(["migrate", "--database", &url])).await;
    assert_ne!(code, 0);
    assert!(
        stderr.contains("TLS to PostgreSQL failed: certificate not trusted"),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("sslrootcert={wrong}")), "{stderr}");
}
