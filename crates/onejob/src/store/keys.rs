//! The API keys a store keeps: only their salted hashes, found by public id, listed and
//! revoked by `onejob keys`.

use async_trait::async_trait;

use super::{ApiKeyRecord, ApiKeySummary, NewApiKey, Revocation, StoreError};

/// API keys, by public id.
#[async_trait]
pub trait Keys: Send + Sync {
    /// Stores a new API key (its salted hash only).
    async fn insert_api_key(&self, key: NewApiKey) -> Result<(), StoreError>;

    /// The API key with this public id, unless revoked.
    async fn api_key(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError>;

    /// Every API key, revoked ones included, oldest first (`onejob keys list`).
    async fn api_keys(&self) -> Result<Vec<ApiKeySummary>, StoreError>;

    /// Revokes the API key with this public id (sets its `revoked_at`, once): from then on
    /// [`Keys::api_key`] does not find it.
    async fn revoke_api_key(&self, id: &str) -> Result<Revocation, StoreError>;
}
