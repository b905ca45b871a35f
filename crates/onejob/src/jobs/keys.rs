//! API keys as operators manage them: issue one (shown once), list them, revoke one, and
//! tell whether a token still authenticates (`onejob keys`, `onejob serve`'s first key, the
//! demo's operator key). How a key is made and checked is [`crate::api_key`]'s; checking
//! the key of each HTTP request, cached, is its `KeyRing`'s.

use std::sync::Arc;

use onejob_domain::Principal;

use super::Jobs;
use crate::{
    api_key,
    store::{ApiKeyRecord, ApiKeySummary, Revocation, Store, StoreError},
};

/// The API key use cases, bound to one store.
#[derive(Clone)]
pub struct ApiKeys {
    store: Arc<dyn Store>,
}

impl ApiKeys {
    /// The API keys kept in `store` (a command that opens the database without the rest of
    /// the configuration, `onejob keys`, binds them here).
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// Issues and stores a key for `principal` (an operator's with `operator`); returns
    /// the token, which is not recoverable later.
    pub async fn issue(&self, principal: Principal, operator: bool) -> Result<String, StoreError> {
        let issued = api_key::issue(principal, operator);
        self.store.insert_api_key(issued.record).await?;
        Ok(issued.token)
    }

    /// Every key (never its secret), revoked ones included.
    pub async fn list(&self) -> Result<Vec<ApiKeySummary>, StoreError> {
        self.store.api_keys().await
    }

    /// Whether a key that is not revoked exists.
    pub async fn any_usable(&self) -> Result<bool, StoreError> {
        let keys = self.list().await?;
        Ok(keys.iter().any(|key| key.revoked_at.is_none()))
    }

    /// Revokes the key with this id.
    pub async fn revoke(&self, id: &str) -> Result<Revocation, StoreError> {
        self.store.revoke_api_key(id).await
    }

    /// The key `token` presents, if it is one of these keys and its secret matches
    /// (whether it is revoked is for the caller to read).
    pub async fn authenticated(&self, token: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let Some((id, secret)) = api_key::parse(token) else {
            return Ok(None);
        };
        let record = self.store.api_key(id).await?;
        Ok(record.filter(|record| api_key::verify(record, secret)))
    }
}

impl Jobs {
    /// The API key use cases on this store.
    pub fn api_keys(&self) -> ApiKeys {
        ApiKeys::new(self.store.clone())
    }
}
