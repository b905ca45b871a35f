//! Verification runs (`onejob verify`): each recorded once, listed newest first.

use async_trait::async_trait;
use uuid::Uuid;

use super::{CertificateRecord, StoreError};

/// Verification runs.
#[async_trait]
pub trait Certificates: Send + Sync {
    /// Records a verification run.
    async fn insert_certificate(&self, certificate: &CertificateRecord) -> Result<(), StoreError>;

    /// Every verification run, newest first.
    async fn certificates(&self) -> Result<Vec<CertificateRecord>, StoreError>;

    /// One page of verification runs, newest first (by id, a UUIDv7): the runs older than
    /// `before` (from the newest when `None`), at most `limit` of them.
    async fn certificates_page(
        &self,
        before: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<CertificateRecord>, StoreError>;
}
