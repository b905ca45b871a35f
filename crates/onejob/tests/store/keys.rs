//! API keys: storing one (its salted hash only), finding it by public id while it is valid,
//! listing every key, and revoking (once, whoever races).

use std::{sync::Arc, time::Duration};

use futures::future::join_all;

use onejob::store::{Revocation, Store};
use onejob_domain::Principal;

use crate::support::{Backend, TestDatabase, every_backend_tests};

every_backend_tests!(
    a_stored_key_is_found_by_its_public_id,
    keys_are_listed_oldest_first_revoked_ones_included,
    a_key_is_revoked_once,
    racing_revocations_revoke_once,
);

fn key(tenant: &str, user: &str, operator: bool) -> onejob::store::NewApiKey {
    onejob::api_key::issue(Principal::new(tenant, user), operator).record
}

/// `api_key` answers the stored key (principal, salt, hash, operator flag) by its public
/// id, and `None` for an id never issued.
async fn a_stored_key_is_found_by_its_public_id(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let issued = key("acme", "alice", true);
    store.insert_api_key(issued.clone()).await.unwrap();
    let found = store.api_key(&issued.id).await.unwrap().expect("stored");
    assert_eq!(found.id, issued.id);
    assert_eq!(found.principal, issued.principal);
    assert_eq!(found.salt, issued.salt);
    assert_eq!(found.secret_hash, issued.secret_hash);
    assert!(found.operator);
    let plain = key("acme", "bob", false);
    store.insert_api_key(plain.clone()).await.unwrap();
    assert!(!store.api_key(&plain.id).await.unwrap().unwrap().operator);
    assert!(store.api_key("0123456789abcdef").await.unwrap().is_none());
    // A public id names one key.
    assert!(store.insert_api_key(issued).await.is_err());
}

/// `api_keys` lists every key oldest first, with nothing secret, revoked ones with their
/// `revoked_at`.
async fn keys_are_listed_oldest_first_revoked_ones_included(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    assert!(store.api_keys().await.unwrap().is_empty());
    let mut issued = Vec::new();
    for (tenant, user, operator) in [
        ("acme", "alice", false),
        ("acme", "ops", true),
        ("globex", "carol", false),
    ] {
        let record = key(tenant, user, operator);
        store.insert_api_key(record.clone()).await.unwrap();
        issued.push(record);
        // Distinct creation instants (SQLite keeps milliseconds).
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let Revocation::Revoked(revoked) = store.revoke_api_key(&issued[1].id).await.unwrap() else {
        panic!("revoked");
    };
    let listed = store.api_keys().await.unwrap();
    assert_eq!(
        listed.iter().map(|k| k.id.as_str()).collect::<Vec<_>>(),
        issued.iter().map(|k| k.id.as_str()).collect::<Vec<_>>()
    );
    for (summary, record) in listed.iter().zip(&issued) {
        assert_eq!(summary.principal, record.principal);
        assert_eq!(summary.operator, record.operator);
    }
    assert!(
        listed
            .windows(2)
            .all(|w| w[0].created_at <= w[1].created_at)
    );
    assert_eq!(listed[1], revoked);
    assert!(listed[1].revoked_at.is_some());
    assert!(listed[0].revoked_at.is_none() && listed[2].revoked_at.is_none());
}

/// Revoking sets `revoked_at` once: the key is no longer found, a second revocation
/// answers `AlreadyRevoked` with the same instant, an unknown id answers `Unknown`.
async fn a_key_is_revoked_once(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let record = key("acme", "alice", false);
    let other = key("acme", "bob", false);
    store.insert_api_key(record.clone()).await.unwrap();
    store.insert_api_key(other.clone()).await.unwrap();
    let Revocation::Revoked(first) = store.revoke_api_key(&record.id).await.unwrap() else {
        panic!("revoked");
    };
    assert_eq!(first.id, record.id);
    assert!(first.revoked_at.is_some());
    assert!(store.api_key(&record.id).await.unwrap().is_none());
    assert_eq!(
        store.revoke_api_key(&record.id).await.unwrap(),
        Revocation::AlreadyRevoked(first)
    );
    assert_eq!(
        store.revoke_api_key("0123456789abcdef").await.unwrap(),
        Revocation::Unknown
    );
    assert!(
        store.api_key(&other.id).await.unwrap().is_some(),
        "others stay valid"
    );
}

/// Revocations of one key racing on many connections: exactly one revokes it.
async fn racing_revocations_revoke_once(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let stores: [Arc<dyn Store>; 2] = [db.open_store().await, db.open_store().await];
    let record = key("acme", "alice", false);
    stores[0].insert_api_key(record.clone()).await.unwrap();
    let revocations = (0..16).map(|i| {
        let store = stores[i % 2].clone();
        let id = record.id.clone();
        tokio::spawn(async move { store.revoke_api_key(&id).await })
    });
    let outcomes: Vec<Revocation> = join_all(revocations)
        .await
        .into_iter()
        .map(|r| r.unwrap().expect("a revocation answers"))
        .collect();
    let revoked: Vec<_> = outcomes
        .iter()
        .filter_map(|o| match o {
            Revocation::Revoked(summary) => Some(summary),
            _ => None,
        })
        .collect();
    assert_eq!(revoked.len(), 1, "{outcomes:?}");
    assert!(outcomes.iter().all(|o| match o {
        Revocation::Revoked(_) => true,
        Revocation::AlreadyRevoked(summary) => summary == revoked[0],
        Revocation::Unknown => false,
    }));
}
