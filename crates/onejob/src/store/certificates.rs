//! Verification runs (`onejob verify`): each recorded once, listed newest first.

use async_trait::async_trait;
use uuid::Uuid;

use super::{
    CertificateRecord, StoreError,
    backend::{Backend, read_all, write},
    rows,
};

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

#[async_trait]
impl<B: Backend> Certificates for B {
    async fn insert_certificate(&self, c: &CertificateRecord) -> Result<(), StoreError> {
        let values = args![
            c.id,
            &c.provider,
            &c.kind,
            &c.template_hash,
            &c.schema_hash,
            &c.settings_hash,
            c.passed,
            &c.report,
            c.created_at,
        ];
        write(self, B::SQL.insert_certificate, values).await?;
        Ok(())
    }

    async fn certificates(&self) -> Result<Vec<CertificateRecord>, StoreError> {
        let runs = read_all(self, B::SQL.certificates, args![]).await?;
        rows::all::<B, _>(&runs, rows::certificate::<B>)
    }

    async fn certificates_page(
        &self,
        before: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<CertificateRecord>, StoreError> {
        let runs = read_all(self, B::SQL.certificates_page, args![before, limit]).await?;
        rows::all::<B, _>(&runs, rows::certificate::<B>)
    }
}
