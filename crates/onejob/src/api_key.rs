//! API keys: `oj_<id>_<secret>`, issued once, stored as a salted hash, checked in constant time.
//!
//! The public `id` finds the stored row; the 256-bit random `secret` is never stored, only
//! SHA-256(salt ‖ secret) with a per-key random salt. The secret's entropy is what makes the
//! key unguessable, so a fast hash is enough; the comparison uses `subtle` so that timing
//! reveals nothing about how much of a guess was right.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::store::{ApiKeyRecord, NewApiKey, Store, StoreError};
use onejob_domain::Principal;

const PREFIX: &str = "oj_";
const ID_BYTES: usize = 8;
const SECRET_BYTES: usize = 32;

/// A freshly issued key: the token to hand out once, and the row to store.
#[derive(Debug)]
pub struct IssuedKey {
    /// The full token (`oj_<id>_<secret>`). Shown once; not recoverable later.
    pub token: String,
    /// What the store keeps.
    pub record: NewApiKey,
}

/// Issues a new key for `principal`.
pub fn issue(principal: Principal, operator: bool) -> IssuedKey {
    let mut rng = rand::rng();
    let mut id = [0u8; ID_BYTES];
    let mut secret = [0u8; SECRET_BYTES];
    let mut salt = [0u8; 16];
    rng.fill_bytes(&mut id);
    rng.fill_bytes(&mut secret);
    rng.fill_bytes(&mut salt);
    let id = hex::encode(id);
    let secret = hex::encode(secret);
    IssuedKey {
        token: format!("{PREFIX}{id}_{secret}"),
        record: NewApiKey {
            secret_hash: hash_secret(&salt, &secret),
            id,
            principal,
            salt,
            operator,
        },
    }
}

/// A token split into its public id and its secret; `None` if it is not shaped like one.
pub fn parse(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.strip_prefix(PREFIX)?.split_once('_')?;
    let well_formed = |s: &str, len: usize| {
        s.len() == len * 2
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    (well_formed(id, ID_BYTES) && well_formed(secret, SECRET_BYTES)).then_some((id, secret))
}

/// Whether `secret` is the one `record` was issued with (constant time).
pub fn verify(record: &ApiKeyRecord, secret: &str) -> bool {
    let Ok(salt) = <[u8; 16]>::try_from(record.salt.as_slice()) else {
        return false;
    };
    hash_secret(&salt, secret)
        .ct_eq(record.secret_hash.as_slice())
        .into()
}

fn hash_secret(salt: &[u8; 16], secret: &str) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(salt);
    hasher.update(secret.as_bytes());
    hasher.finalize().into()
}

/// How long a key lookup (found or not) is trusted by default without asking the database
/// again (`[http] key_cache_ttl`).
pub const KEY_CACHE_TTL: Duration = crate::config::DEFAULT_KEY_CACHE_TTL;

/// Most found keys, and separately most unknown ids, kept; beyond, expired entries are
/// dropped, and if none had expired the cache starts over.
const KEY_CACHE_SIZE: usize = 10_000;

/// API key records by public id, cached so that a request does not cost a database read
/// just to authenticate. Only the stored (salted, hashed) record is cached; every request's
/// secret is still verified against it.
///
/// Lookups that found nothing (an unknown or revoked id) are cached too, for the same time,
/// in a separate bounded map: a client repeating a wrong key costs one database read per
/// TTL, and a flood of random ids cannot push the real keys out of the cache. So a revoked
/// key keeps working for at most the TTL on a node that had cached it, and a key created
/// after its id was looked up unknown (its ids are random: in practice never) works after
/// the TTL.
#[derive(Clone)]
pub struct KeyRing {
    store: Arc<dyn Store>,
    ttl: Duration,
    found: Arc<Mutex<Expiring<ApiKeyRecord>>>,
    missing: Arc<Mutex<Expiring<()>>>,
}

impl KeyRing {
    /// A key ring over `store`, trusting lookups for [`KEY_CACHE_TTL`].
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self::with_ttl(store, KEY_CACHE_TTL)
    }

    /// A key ring over `store`, trusting lookups for `ttl`.
    pub fn with_ttl(store: Arc<dyn Store>, ttl: Duration) -> Self {
        Self {
            store,
            ttl,
            found: Arc::new(Mutex::new(Expiring::default())),
            missing: Arc::new(Mutex::new(Expiring::default())),
        }
    }

    /// The record of the key with this public id (cached), unless unknown or revoked.
    pub async fn lookup(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        if let Some(record) = self.found.lock().expect("key cache").get(id, self.ttl) {
            return Ok(Some(record.clone()));
        }
        if self
            .missing
            .lock()
            .expect("key cache")
            .get(id, self.ttl)
            .is_some()
        {
            return Ok(None);
        }
        let record = self.store.api_key(id).await?;
        match &record {
            Some(record) => {
                self.found
                    .lock()
                    .expect("key cache")
                    .insert(id, record.clone(), self.ttl);
            }
            None => self
                .missing
                .lock()
                .expect("key cache")
                .insert(id, (), self.ttl),
        }
        Ok(record)
    }
}

/// A bounded map whose entries expire.
struct Expiring<V> {
    entries: HashMap<String, (V, Instant)>,
}

impl<V> Default for Expiring<V> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
        }
    }
}

impl<V> Expiring<V> {
    /// The entry under `id`, if stored less than `ttl` ago.
    fn get(&self, id: &str, ttl: Duration) -> Option<&V> {
        self.entries
            .get(id)
            .filter(|(_, at)| at.elapsed() < ttl)
            .map(|(value, _)| value)
    }

    /// Stores `value` under `id`, making room first when the map is full.
    fn insert(&mut self, id: &str, value: V, ttl: Duration) {
        if self.entries.len() >= KEY_CACHE_SIZE {
            self.entries.retain(|_, (_, at)| at.elapsed() < ttl);
            if self.entries.len() >= KEY_CACHE_SIZE {
                self.entries.clear();
            }
        }
        self.entries.insert(id.to_owned(), (value, Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(issued: &IssuedKey) -> ApiKeyRecord {
        ApiKeyRecord {
            id: issued.record.id.clone(),
            principal: issued.record.principal.clone(),
            salt: issued.record.salt.to_vec(),
            secret_hash: issued.record.secret_hash.to_vec(),
            operator: issued.record.operator,
        }
    }

    #[test]
    fn an_issued_token_verifies_and_a_changed_one_does_not() {
        let issued = issue(Principal::new("acme", "alice"), false);
        let (id, secret) = parse(&issued.token).unwrap();
        assert_eq!(id, issued.record.id);
        assert!(verify(&stored(&issued), secret));
        let mut wrong = secret.to_owned();
        wrong.replace_range(0..1, if wrong.starts_with('0') { "1" } else { "0" });
        assert!(!verify(&stored(&issued), &wrong));
    }

    #[test]
    fn the_secret_is_not_stored_and_salts_differ() {
        let a = issue(Principal::new("acme", "alice"), false);
        let b = issue(Principal::new("acme", "alice"), false);
        let (_, secret) = parse(&a.token).unwrap();
        assert!(!hex::encode(a.record.secret_hash).contains(secret));
        assert_ne!(a.record.salt, b.record.salt);
        assert_ne!(a.record.id, b.record.id);
    }

    #[test]
    fn the_cache_stays_bounded_and_keeps_fresh_entries_when_it_can() {
        let ttl = Duration::from_secs(60);
        let mut cache = Expiring::default();
        for n in 0..KEY_CACHE_SIZE * 3 {
            cache.insert(&n.to_string(), (), ttl);
            assert!(cache.entries.len() <= KEY_CACHE_SIZE);
        }
        let last = (KEY_CACHE_SIZE * 3 - 1).to_string();
        assert!(cache.get(&last, ttl).is_some());
        assert!(cache.get(&last, Duration::ZERO).is_none(), "expired");
    }

    #[test]
    fn malformed_tokens_do_not_parse() {
        for token in [
            "",
            "oj_",
            "oj_abc_def",
            "xx_0011223344556677_00",
            "oj_00112233445566ZZ_",
        ] {
            assert!(parse(token).is_none(), "{token}");
        }
    }
}
