//! The rows of API keys: one to store, one stored, its summary, and what revoking it did.

use onejob_domain::Principal;
use time::OffsetDateTime;

/// An API key to store.
#[derive(Debug, Clone)]
pub struct NewApiKey {
    /// Its public id (the middle part of `oj_<id>_<secret>`).
    pub id: String,
    /// The principal it authenticates.
    pub principal: Principal,
    /// Random per-key salt.
    pub salt: [u8; 16],
    /// SHA-256(salt || secret).
    pub secret_hash: [u8; 32],
    /// Whether it may use operator endpoints.
    pub operator: bool,
}

/// A stored API key.
#[derive(Debug, Clone)]
pub struct ApiKeyRecord {
    /// Its public id.
    pub id: String,
    /// The principal it authenticates.
    pub principal: Principal,
    /// Its salt.
    pub salt: Vec<u8>,
    /// SHA-256(salt || secret).
    pub secret_hash: Vec<u8>,
    /// Whether it may use operator endpoints.
    pub operator: bool,
}

/// What `onejob keys list` shows of a stored API key (nothing secret).
#[derive(Debug, Clone, PartialEq)]
pub struct ApiKeySummary {
    /// Its public id.
    pub id: String,
    /// The principal it authenticates.
    pub principal: Principal,
    /// Whether it may use operator endpoints.
    pub operator: bool,
    /// When it was created.
    pub created_at: OffsetDateTime,
    /// When it was revoked; `None` while it is valid.
    pub revoked_at: Option<OffsetDateTime>,
}

/// What revoking an API key did.
#[derive(Debug, Clone, PartialEq)]
pub enum Revocation {
    /// The key is revoked now.
    Revoked(ApiKeySummary),
    /// The key had been revoked before; nothing changed.
    AlreadyRevoked(ApiKeySummary),
    /// No key has this id.
    Unknown,
}
