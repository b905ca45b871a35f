//! Unit tests of `hosts.rs`: URLs parsed, and hosts chosen on the test server
//! (`ONEJOB_TEST_POSTGRES`, else PostgreSQL on 127.0.0.1:5432).

use super::*;

fn hosts(list: &HostList) -> Vec<(String, u16)> {
    list.targets
        .iter()
        .map(|t| (t.options.get_host().to_owned(), t.options.get_port()))
        .collect()
}

#[test]
fn a_host_list_gives_one_target_per_host_in_order_with_default_ports() {
    let list = HostList::parse(
        "postgres://onejob:secret@db1:5433,db2,[::1]:6000/jobs?sslmode=disable&target_session_attrs=read-write",
    )
    .unwrap();
    assert_eq!(
        hosts(&list),
        [
            ("db1".to_owned(), 5433),
            ("db2".to_owned(), 5432),
            ("[::1]".to_owned(), 6000)
        ]
    );
    assert_eq!(list.attrs, SessionAttrs::ReadWrite);
    for target in &list.targets {
        assert_eq!(target.options.get_database(), Some("jobs"));
        assert_eq!(target.options.get_username(), "onejob");
        assert!(matches!(
            target.options.get_ssl_mode(),
            sqlx::postgres::PgSslMode::Disable
        ));
    }
    assert!(!list.is_plain());
}

#[test]
fn target_session_attrs_takes_libpqs_values_for_writing() {
    let attrs = |q: &str| HostList::parse(&format!("postgres://u@h/db{q}")).map(|l| l.attrs);
    assert_eq!(attrs("").unwrap(), SessionAttrs::Any);
    assert_eq!(
        attrs("?target_session_attrs=any").unwrap(),
        SessionAttrs::Any
    );
    assert_eq!(
        attrs("?target_session_attrs=primary").unwrap(),
        SessionAttrs::Primary
    );
    assert!(HostList::parse("postgres://u@h/db").unwrap().is_plain());
    for bad in ["standby", "read-only", "writable"] {
        let error = attrs(&format!("?target_session_attrs={bad}")).unwrap_err();
        assert!(matches!(error, ConnectError::InvalidUrl { .. }), "{bad}");
        assert!(error.to_string().contains(bad), "{error}");
    }
}

#[test]
fn a_bad_host_list_is_a_clear_error_that_shows_no_password() {
    for (url, says) in [
        ("postgres://u:hunter2@h1:5432,h2:54x2/db", "\"54x2\""),
        ("postgres://u:hunter2@h1,,h2/db", "empty host"),
        ("postgres://u:hunter2@[::1:5432/db", "unclosed"),
        ("postgres://u:hunter2@h1/db?host=a,b", "authority"),
    ] {
        let error = HostList::parse(url).unwrap_err();
        let text = error.to_string();
        assert!(text.contains(says), "{url}: {text}");
        assert!(!text.contains("hunter2"), "{text}");
    }
}

#[test]
fn a_multi_host_url_is_redacted() {
    let redacted =
        crate::redact("postgres://u:hunter2@h1:5432,h2:5433/db?target_session_attrs=primary");
    assert!(!redacted.contains("hunter2"), "{redacted}");
    assert!(redacted.contains("h1:5432,h2:5433"), "{redacted}");
}

/// The test server's URL with `hosts` in place of its host (nothing is written).
fn url_with(hosts: &str, query: &str) -> String {
    let url = std::env::var("ONEJOB_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let (scheme, rest) = url.split_once("://").unwrap();
    let (user, rest) = rest.rsplit_once('@').unwrap();
    let path = &rest[rest.find('/').unwrap()..];
    format!("{scheme}://{user}@{hosts}{path}{query}")
}

/// The test server's `host:port`.
fn server() -> String {
    let url = std::env::var("ONEJOB_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    HostList::parse(&url).unwrap().targets[0].label.clone()
}

#[tokio::test]
async fn a_host_that_refuses_connections_is_passed_over_for_the_next() {
    // Port 1 on loopback refuses at once: a primary that died.
    let list = HostList::parse(&url_with(
        &format!("127.0.0.1:1,{}", server()),
        "?target_session_attrs=read-write",
    ))
    .unwrap();
    let hosts = Hosts::new(list, Duration::from_secs(5), Arc::default());
    let connection = hosts
        .choose()
        .await
        .expect("the second host accepts writes");
    assert_eq!(hosts.current.load(Ordering::Acquire), 1);
    assert!(hosts.switches.outdated(Duration::from_secs(3600)));
    connection.close().await.unwrap();
}

#[tokio::test]
async fn a_read_only_session_is_refused_when_writes_are_asked_for() {
    let query = "?options=-c%20default_transaction_read_only%3Don";
    let read_write = HostList::parse(&url_with(
        &server(),
        &format!("{query}&target_session_attrs=read-write"),
    ))
    .unwrap();
    let error = Hosts::new(read_write, Duration::from_secs(5), Arc::default())
        .choose()
        .await
        .expect_err("a read-only session was kept");
    assert!(matches!(error, ConnectError::NotWritable(_)), "{error}");
    // `primary` asks only that the server is not a standby, which this one is not.
    let primary = HostList::parse(&url_with(
        &server(),
        &format!("{query}&target_session_attrs=primary"),
    ))
    .unwrap();
    let mut connection = Hosts::new(primary, Duration::from_secs(5), Arc::default())
        .choose()
        .await
        .unwrap();
    // A write there is refused with 25006 (read_only_sql_transaction).
    let write = sqlx::query("CREATE TABLE onejob_never_created (x int)")
        .execute(&mut connection)
        .await
        .unwrap_err();
    let code = write.as_database_error().and_then(|e| e.code());
    assert_eq!(code.as_deref(), Some("25006"), "{write:?}");
    connection.close().await.unwrap();
}
