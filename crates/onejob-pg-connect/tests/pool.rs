//! The crate used alone, as a service without onejob would: a pool on a URL that lists a
//! dead host before the live one, with `target_session_attrs=read-write`, over TLS
//! (`sslmode=require`, the test server has `ssl = on`), its connections tuned, and the
//! host watcher keeping it there. Needs PostgreSQL (`ONEJOB_TEST_POSTGRES`, else
//! 127.0.0.1:5432, trust authentication).

use std::{sync::Arc, time::Duration};

use onejob_pg_connect::{ConnectError, HostList, Hosts, Stalls, redact, tcp};
use sqlx::Connection;

/// The test server's `user@host:port/db` with its scheme.
fn server() -> (String, String) {
    let url = std::env::var("ONEJOB_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let (scheme, rest) = url.split_once("://").unwrap();
    (scheme.to_owned(), rest.to_owned())
}

#[tokio::test]
async fn a_pool_on_a_host_list_reaches_the_live_host_over_tls_and_stays_there() {
    let (scheme, rest) = server();
    let (user, rest) = rest.rsplit_once('@').unwrap();
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    // Port 1 on loopback refuses at once: a primary that died.
    let url = format!(
        "{scheme}://{user}@127.0.0.1:1,{host}{path}?sslmode=require&target_session_attrs=read-write"
    );
    let list = HostList::parse(&url).unwrap();
    assert_eq!(list.targets.len(), 2);
    assert!(!list.is_plain());

    let stalls = Arc::new(Stalls::default());
    let hosts = Hosts::new(list, Duration::from_secs(5), stalls.clone());
    let first = hosts.choose().await.expect("the live host takes writes");
    first.close().await.unwrap();
    let pool = tcp::pool_options()
        .max_connections(2)
        .connect_with(hosts.options(&[]))
        .await
        .unwrap();
    hosts.follow(&pool, &[]);
    Hosts::watch(&hosts);

    let (port, tls): (i32, bool) = sqlx::query_as(
        "SELECT inet_server_port(), ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        port.to_string(),
        host.rsplit(':').next().unwrap(),
        "the live host"
    );
    assert!(tls, "sslmode=require encrypts");

    // The watcher keeps checking the host; a noted stall wakes it at once, and the pool
    // stays where it is while the host still takes writes.
    stalls.note();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(one, 1);
    assert!(
        !hosts.switches().outdated(Duration::from_millis(1)),
        "no switch happened, so a connection a moment old is current"
    );
}

#[tokio::test]
async fn a_url_that_names_no_usable_host_says_why_without_its_password() {
    let error = HostList::parse("postgres://u:hunter2@h1:5432,h2:99999/db").unwrap_err();
    assert!(matches!(error, ConnectError::InvalidUrl { .. }), "{error}");
    let said = error.to_string();
    assert!(
        said.contains("99999") && !said.contains("hunter2"),
        "{said}"
    );
    assert_eq!(
        redact("postgres://u:hunter2@h1:5432,h2:5433/db"),
        "postgres://u:***@h1:5432,h2:5433/db"
    );
}
