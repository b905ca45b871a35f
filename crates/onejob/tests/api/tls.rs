//! TLS to PostgreSQL against the local server (`ssl = on`, Debian's self-signed snakeoil
//! certificate for `CN=localhost`): `sslmode` and `sslrootcert` as libpq spells them, the
//! session really encrypted, and refusals that say what to check. Then against throwaway
//! clusters of the tests' own: one serving an X.509 v1 certificate (as Citus makes when it
//! turns TLS on), which rustls cannot read, and one without TLS.

use onejob::store::{StoreError, postgres::PgStore};
use onejob_chaos::postgres::Cluster;

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
    assert!(stderr.contains("created the PostgreSQL schema"), "{stderr}");
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

/// The X.509 v1 certificate of the throwaway server (self-signed, `CN=localhost`, made by
/// `openssl req -x509 -config /dev/null`, valid until 2126), and its key.
const V1_CERTIFICATE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/api/fixtures/tls-v1-server.crt"
);

/// A throwaway cluster serving TLS with [`V1_CERTIFICATE`].
fn v1_server() -> Cluster {
    let cluster = Cluster::start_new();
    cluster.use_certificate(
        include_str!("fixtures/tls-v1-server.crt"),
        include_str!("fixtures/tls-v1-server.key"),
    );
    cluster
}

/// `sslmode=prefer` (the default) and `require` check nothing of the certificate, as libpq:
/// a v1 certificate, which rustls cannot read, still gets an encrypted session, on its own
/// and as the second host of a list, and `onejob migrate` runs (it failed with
/// `UnsupportedCertVersion`).
#[tokio::test]
async fn prefer_and_require_encrypt_with_a_certificate_rustls_cannot_read() {
    let server = v1_server();
    let url = server.admin_url();
    for query in ["", "?sslmode=prefer", "?sslmode=require"] {
        let store = connect(&format!("{url}{query}"))
            .await
            .unwrap_or_else(|e| panic!("{query:?}: {e}"));
        assert!(session_is_tls(&store).await, "{query:?} is TLS");
    }
    // Port 1 refuses at once: the list's second host is the one used.
    let listed = format!(
        "postgres://postgres@127.0.0.1:1,127.0.0.1:{}/postgres?sslmode=require&target_session_attrs=read-write",
        server.port
    );
    let store = connect(&listed).await.expect("through a host list");
    assert!(session_is_tls(&store).await, "a listed host is TLS");

    // TLS 1.2 signs the handshake under schemes that do not name one algorithm: checked too.
    server
        .set_and_wait("ssl_max_protocol_version", "TLSv1.2")
        .await;
    let store = connect(&format!("{url}?sslmode=require")).await.unwrap();
    let version: String =
        sqlx::query_scalar("SELECT version FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(version, "TLSv1.2");

    let (code, _, stderr) = output(onejob().args(["migrate", "--database", &url])).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("created the PostgreSQL schema"), "{stderr}");
}

/// `verify-ca` and `verify-full` must check the certificate; one rustls cannot read is
/// refused, and the message says what to change.
#[tokio::test]
async fn verify_refuses_a_certificate_rustls_cannot_read_saying_what_to_change() {
    let server = v1_server();
    for mode in ["verify-ca", "verify-full"] {
        let url = format!(
            "postgres://postgres@localhost:{}/postgres?sslmode={mode}&sslrootcert={V1_CERTIFICATE}",
            server.port
        );
        let error = connect(&url)
            .await
            .expect_err("an unreadable certificate was trusted");
        assert!(matches!(error, StoreError::Tls(_)), "{mode}: {error:?}");
        assert!(!error.is_retryable());
        let message = error.to_string();
        for says in [
            "cannot read",
            "UnsupportedCertVersion",
            "X.509 v3 certificate",
            "sslmode=require",
        ] {
            assert!(
                message.contains(says),
                "{mode}: {says:?} missing in {message}"
            );
        }
        assert!(message.contains(&format!("sslmode={mode}")), "{message}");
    }
}

/// `prefer` speaks plain text to a server without TLS, as libpq; `require` refuses it.
#[tokio::test]
async fn prefer_falls_back_to_plain_text_when_the_server_has_no_tls() {
    let server = Cluster::start_new();
    let plain = connect(&format!("{}?sslmode=prefer", server.admin_url()))
        .await
        .expect("prefer connects without TLS");
    assert!(!session_is_tls(&plain).await);
    let message = connect(&format!("{}?sslmode=require", server.admin_url()))
        .await
        .expect_err("require without TLS")
        .to_string();
    assert!(message.contains("does not accept TLS"), "{message}");
}
