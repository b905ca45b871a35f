//! A PostgreSQL host that stops committing without going away: an old primary whose
//! synchronous standby is gone (here `synchronous_standby_names = 'nobody'` on a throwaway
//! cluster) accepts sessions and statements, and every commit then waits for ever. Every
//! call of the store must still come back, as a retryable error that acknowledges nothing;
//! the node must say that it cannot commit; no pool slot may stay stuck on such a commit; and
//! a store given several hosts must move its writes to one that commits.
//!
//! "Comes back" is checked with a generous bound ([`answered`]): a call still waiting after
//! a minute is a hang, whatever the machine's speed.

use std::time::Duration;

use onejob::store::{Intake, NewEvent, Store, StoreError, StoreOptions, postgres::PgStore};
use onejob_chaos::postgres::Cluster;
use onejob_domain::{EventKind, IdempotencyKey};
use serde_json::json;
use sqlx::{Connection, PgConnection};

use crate::support::{alice, new_job};

/// The stores' `write_timeout` here.
const WITHIN: Duration = Duration::from_secs(2);

/// Longer than any call that comes back may take.
const GENEROUS: Duration = Duration::from_secs(60);

/// A store's options: bounded calls, and a pool smaller than the number of calls that will
/// run out (a connection kept after its commit ran out would leave the pool with none).
fn options() -> StoreOptions {
    StoreOptions {
        max_connections: 2,
        write_timeout: WITHIN,
        ..StoreOptions::default()
    }
}

/// `call`'s answer, or a panic naming `what` if it never comes.
async fn answered<T>(what: &str, call: impl Future<Output = T>) -> T {
    tokio::time::timeout(GENEROUS, call)
        .await
        .unwrap_or_else(|_| panic!("{what} never came back: it hangs on a commit"))
}

/// A throwaway cluster with onejob's schema.
async fn migrated_cluster() -> Cluster {
    let cluster = Cluster::start_new();
    let store = PgStore::connect(&cluster.admin_url(), &options())
        .await
        .unwrap();
    store.migrate().await.unwrap();
    store.pool().close().await;
    cluster
}

/// Asserts that `result`, the answer to `what` while commits hang, is a retryable error
/// whose outcome is unknown: never an acknowledgement.
fn unclear(what: &str, result: Result<String, StoreError>) {
    match result {
        Ok(answer) => panic!("{what} whose commit never completed was acknowledged: {answer}"),
        Err(error) => assert!(
            error.is_retryable() && error.is_unclear(),
            "{what}: {error:?}"
        ),
    }
}

/// A `replayed` event of `job_id` (any event: its insert must commit).
fn event(job_id: uuid::Uuid) -> NewEvent {
    NewEvent {
        tenant: None,
        job_id,
        attempt_id: None,
        kind: EventKind::Replayed,
        actor: Some("test".into()),
        detail: json!({}),
    }
}

/// Submissions, transactions and the readiness check all come back as retryable errors
/// whose outcome is unknown, none acknowledged; the pool stays usable; and once the host
/// commits again, the submission that was answered with an error is found by its key (its
/// commit landed after all) and the node is ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_that_never_completes_is_not_acknowledged_and_the_node_says_so() {
    let cluster = migrated_cluster().await;
    let store = PgStore::connect(&cluster.admin_url(), &options())
        .await
        .unwrap();
    let first = match store.create_or_replay(new_job("wedge:1", "before")).await {
        Ok(Intake::Created(job)) => job,
        other => panic!("{other:?}"),
    };
    store.ping().await.expect("ready while commits complete");

    cluster
        .set_and_wait("synchronous_standby_names", "nobody")
        .await;
    let submitted = answered(
        "a submission",
        store.create_or_replay(new_job("wedge:2", "during")),
    )
    .await;
    unclear(
        "a submission",
        submitted.map(|intake| format!("{intake:?}")),
    );
    // Transactions, more of them than the pool has connections: each one's connection is
    // discarded, so the pool still has connections to give.
    for n in 0..3 {
        let appended = answered("a transaction", store.append_event(event(first.id))).await;
        unclear(
            &format!("transaction {n}"),
            appended.map(|()| "committed".into()),
        );
    }
    let key = IdempotencyKey::parse("wedge:1").unwrap().hash();
    let read = answered("a read", store.job_by_key(&alice(), &key)).await;
    assert_eq!(
        read.expect("the pool has a connection for a read")
            .map(|j| j.id),
        Some(first.id)
    );
    // The node says it cannot commit: after its own calls ran out, and, for a node that has
    // not tried to commit yet, by a probe write.
    let not_ready = answered("the readiness check", store.ping()).await;
    unclear("the readiness check", not_ready.map(|()| "ready".into()));
    let idle = PgStore::connect(&cluster.admin_url(), &options())
        .await
        .unwrap();
    let probed = answered("an idle node's readiness check", idle.ping()).await;
    unclear(
        "an idle node's readiness check",
        probed.map(|()| "ready".into()),
    );

    // The standby is back: the waiting commits land, the node is ready again, and the
    // submission answered with an error is found by its key.
    cluster.set_and_wait("synchronous_standby_names", "").await;
    let deadline = tokio::time::Instant::now() + GENEROUS;
    while store.ping().await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not ready once commits complete again"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let retried = store
        .create_or_replay(new_job("wedge:2", "during"))
        .await
        .unwrap();
    assert!(matches!(retried, Intake::Replayed(_)), "{retried:?}");
}

/// With a second host listed, a store whose host stops committing moves its writes to the
/// host that commits: submissions are answered with retryable errors meanwhile, and then
/// created there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_move_to_the_next_host_when_the_one_in_use_stops_committing() {
    let wedged = migrated_cluster().await;
    let healthy = migrated_cluster().await;
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        wedged.port, healthy.port
    );
    let store = PgStore::connect(&url, &options()).await.unwrap();
    let count = async |cluster: &Cluster| -> i64 {
        let mut db = PgConnection::connect(&cluster.admin_url()).await.unwrap();
        let jobs = sqlx::query_scalar("SELECT count(*) FROM jobs")
            .fetch_one(&mut db)
            .await
            .unwrap();
        let _ = db.close().await;
        jobs
    };
    let first = store
        .create_or_replay(new_job("move:0", "first"))
        .await
        .unwrap();
    assert!(matches!(first, Intake::Created(_)), "{first:?}");
    assert_eq!(count(&wedged).await, 1, "the first host is the one in use");

    wedged
        .set_and_wait("synchronous_standby_names", "nobody")
        .await;
    let deadline = tokio::time::Instant::now() + GENEROUS;
    let mut failed = 0;
    for n in 1.. {
        let key = format!("move:{n}");
        match answered("a submission", store.create_or_replay(new_job(&key, &key))).await {
            Ok(Intake::Created(_)) => break,
            Ok(other) => panic!("{key}: {other:?}"),
            Err(error) => {
                assert!(error.is_retryable(), "{key}: {error:?}");
                failed += 1;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "writes did not move to the host that commits ({failed} submissions failed)"
        );
    }
    assert_eq!(
        count(&healthy).await,
        1,
        "the job was created on the host that commits"
    );
    let deadline = tokio::time::Instant::now() + GENEROUS;
    while store.ping().await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not ready on the host that commits"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A database that takes no writes at all (here a session forced read-only, as a standby's
/// are) is not ready either, though it answers reads and the probe's logical message would
/// pass in a read-only transaction.
#[tokio::test]
async fn a_read_only_database_is_not_ready() {
    let url = std::env::var("ONEJOB_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let read_only = format!("{url}?options=-c%20default_transaction_read_only%3Don");
    let store = PgStore::connect(&read_only, &options()).await.unwrap();
    let error = store
        .ping()
        .await
        .expect_err("ready on a read-only session");
    assert!(matches!(error, StoreError::NotWritable(_)), "{error:?}");
    let writable = PgStore::connect(&url, &options()).await.unwrap();
    writable.ping().await.expect("ready on a writable session");
}
