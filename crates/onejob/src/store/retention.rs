//! Retention: deleting finished jobs past their time, with their attempts and events.

use std::time::Duration;

use async_trait::async_trait;

use super::{Pruned, StoreError};

/// Deleting finished jobs.
#[async_trait]
pub trait Retention: Send + Sync {
    /// Deletes up to `limit` jobs that finished (succeeded, failed, cancelled) more than
    /// `older_than` ago, with their attempts and events, in one transaction; their keys then
    /// name nothing. Only one store prunes at a time (a second caller meanwhile deletes
    /// nothing and says so); the event log refuses every other delete.
    async fn prune_finished(&self, older_than: Duration, limit: u32) -> Result<Pruned, StoreError>;
}
