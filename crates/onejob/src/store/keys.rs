//! The API keys a store keeps: only their salted hashes, found by public id, listed and
//! revoked by `onejob keys`.

use async_trait::async_trait;

use super::{
    ApiKeyRecord, ApiKeySummary, NewApiKey, Revocation, StoreError,
    backend::{Backend, read_all, read_optional, write, write_optional},
    rows,
};

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

#[async_trait]
impl<B: Backend> Keys for B {
    async fn insert_api_key(&self, key: NewApiKey) -> Result<(), StoreError> {
        let principal = &key.principal;
        let values = args![
            &key.id,
            &principal.tenant,
            &principal.user,
            &key.salt[..],
            &key.secret_hash[..],
            key.operator,
        ];
        write(self, B::SQL.insert_api_key, values).await?;
        Ok(())
    }

    async fn api_key(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let row = read_optional(self, B::SQL.api_key, args![id]).await?;
        row.as_ref().map(rows::key::<B>).transpose()
    }

    async fn api_keys(&self) -> Result<Vec<ApiKeySummary>, StoreError> {
        let keys = read_all(self, B::SQL.api_keys, args![]).await?;
        rows::all::<B, _>(&keys, rows::key_summary::<B>)
    }

    async fn revoke_api_key(&self, id: &str) -> Result<Revocation, StoreError> {
        if let Some(row) = write_optional(self, B::SQL.revoke_api_key, args![id]).await? {
            return Ok(Revocation::Revoked(rows::key_summary::<B>(&row)?));
        }
        match read_optional(self, B::SQL.api_key_summary, args![id]).await? {
            Some(row) => Ok(Revocation::AlreadyRevoked(rows::key_summary::<B>(&row)?)),
            None => Ok(Revocation::Unknown),
        }
    }
}
