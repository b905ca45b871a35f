//! The store's connections on the test server (`ONEJOB_TEST_POSTGRES`, else PostgreSQL on
//! 127.0.0.1:5432): a connection that met a read-only server is not reused, and one store's
//! notes never touch another's.

use std::{sync::Arc, time::Duration};

use onejob_pg_connect::{HostList, Hosts};

use crate::store::{
    StoreError,
    bound::{Bound, Bounded},
};

/// The test server's URL with the parameters `query` (nothing is written).
fn url_with(query: &str) -> String {
    let url = std::env::var("ONEJOB_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    format!("{url}{query}")
}

/// What of a store's connections the read-only tests need: its hosts, its bound (whose
/// stalls are the store's own) and its shared pool, as `connect::connect` makes them.
struct Follower {
    _hosts: Arc<Hosts>,
    bound: Bound,
    pool: sqlx::PgPool,
}

/// A store's connections to the test server with the URL parameters `query`, its pool
/// of one connection.
async fn follower(query: &str) -> Follower {
    let bound = Bound::within(Duration::from_secs(30));
    let list = HostList::parse(&url_with(query)).unwrap();
    let hosts = Hosts::new(list, Duration::from_secs(5), bound.stalls().clone());
    let pool = super::held::checked_after_idle(
        sqlx::postgres::PgPoolOptions::new().max_connections(1),
        Some(hosts.switches()),
    )
    .connect_with(hosts.options(&[]))
    .await
    .unwrap();
    Follower {
        bound: bound.following(hosts.moved()),
        _hosts: hosts,
        pool,
    }
}

/// The backend pid of the connection `pool` hands out next (given back at once).
async fn pid(pool: &sqlx::PgPool) -> i32 {
    let mut connection = pool.acquire().await.unwrap();
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *connection)
        .await
        .unwrap()
}

/// A write through `store`'s bound, which its read-only session refuses with 25006.
async fn refused_write(store: &Follower) {
    let error = Bounded::acquire(&store.pool, &store.bound)
        .await
        .unwrap()
        .run("a statement", async |connection| {
            sqlx::query("CREATE TABLE onejob_never_created (x int)")
                .execute(connection)
                .await?;
            Ok(())
        })
        .await
        .unwrap_err();
    assert!(error.met_read_only(), "{error:?}");
}

const READ_ONLY: &str =
    "?options=-c%20default_transaction_read_only%3Don&target_session_attrs=primary";

#[tokio::test]
async fn a_pooled_connection_that_met_a_read_only_server_is_not_reused() {
    let store = follower(READ_ONLY).await;
    // Without the note, this connection (idle for less than `IDLE_CHECK`, on a host the
    // pool has not moved from) would be handed out again unchecked.
    let first = pid(&store.pool).await;
    refused_write(&store).await;
    assert!(
        store
            .bound
            .stalls()
            .read_only_within(Duration::from_secs(3600))
    );
    assert_ne!(
        pid(&store.pool).await,
        first,
        "the connection that met a read-only server came back"
    );
}

/// Two stores in one process, one on a read-only session (a standby's, say) and one on
/// a writable one: the first meeting a read-only server closes its own connections and
/// wakes its own watcher, never the other's.
#[tokio::test]
async fn a_read_only_server_one_store_met_leaves_another_stores_connections_alone() {
    let standby = follower(READ_ONLY).await;
    let primary = follower("?target_session_attrs=primary").await;
    let kept = pid(&primary.pool).await;
    let watcher = primary.bound.stalls().clone();
    let woken = tokio::spawn(async move { watcher.noticed().await });
    tokio::task::yield_now().await;
    refused_write(&standby).await;
    assert!(
        standby
            .bound
            .stalls()
            .read_only_within(Duration::from_secs(3600))
    );
    assert!(
        !primary
            .bound
            .stalls()
            .read_only_within(Duration::from_secs(3600)),
        "the other store noted a read-only server it never met"
    );
    assert_eq!(
        pid(&primary.pool).await,
        kept,
        "the other store's connection was closed for a read-only server it never met"
    );
    assert!(!woken.is_finished(), "the other store's watcher was woken");
    woken.abort();
}

/// A write on a session that refuses writes (SQLSTATE 25006) is the store's `unavailable`
/// (HTTP 503 with `Retry-After`), and it met a read-only server.
#[tokio::test]
async fn a_write_refused_as_read_only_is_unavailable() {
    let store = follower(READ_ONLY).await;
    let mut connection = store.pool.acquire().await.unwrap();
    let write = sqlx::query("CREATE TABLE onejob_never_created (x int)")
        .execute(&mut *connection)
        .await
        .unwrap_err();
    let error = StoreError::from(write);
    assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
    assert!(error.met_read_only() && error.is_retryable(), "{error:?}");
}
