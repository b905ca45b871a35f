//! What the probes and the metrics read about the store: whether the database answers
//! (`/readyz`), and how many attempts wait for a resolution (the unknown-attempts gauge).

use super::Jobs;
use crate::store::StoreError;

impl Jobs {
    /// Checks that the database answers; answers which database it is (`"postgres"` or
    /// `"sqlite"`).
    pub async fn ping(&self) -> Result<&'static str, StoreError> {
        self.store.ping().await?;
        Ok(self.store.backend())
    }

    /// How many attempts are `unknown` right now, across all tenants.
    pub async fn count_unknown(&self) -> Result<u64, StoreError> {
        self.store.count_unknown().await
    }
}
