//! Verification runs (certificates) on SQLite.

use async_trait::async_trait;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

use super::{SqliteStore, parse_json, parse_time, parse_uuid};
use crate::store::{CertificateRecord, Certificates, StoreError};

type Row = (
    String,
    String,
    String,
    String,
    String,
    String,
    bool,
    String,
    String,
);

fn record(
    (id, provider, kind, template_hash, schema_hash, settings_hash, passed, report, created_at): Row,
) -> Result<CertificateRecord, StoreError> {
    Ok(CertificateRecord {
        id: parse_uuid(&id)?,
        provider,
        kind,
        template_hash,
        schema_hash,
        settings_hash,
        passed,
        report: parse_json(&report)?,
        created_at: parse_time(&created_at)?,
    })
}

#[async_trait]
impl Certificates for SqliteStore {
    async fn insert_certificate(&self, c: &CertificateRecord) -> Result<(), StoreError> {
        let created_at = c
            .created_at
            .to_offset(time::UtcOffset::UTC)
            .format(&Rfc3339)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO certificates (id, provider, kind, template_hash, schema_hash, \
             settings_hash, passed, report, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )
        .bind(c.id.to_string())
        .bind(&c.provider)
        .bind(&c.kind)
        .bind(&c.template_hash)
        .bind(&c.schema_hash)
        .bind(&c.settings_hash)
        .bind(c.passed)
        .bind(c.report.to_string())
        .bind(created_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn certificates(&self) -> Result<Vec<CertificateRecord>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT id, provider, kind, template_hash, schema_hash, settings_hash, passed, report, \
             created_at FROM certificates ORDER BY created_at DESC, id DESC",
        )
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(record).collect()
    }

    /// Up to `limit` runs older than `before`, newest first (ids are UUIDv7, stored as
    /// lower-case text: text order is creation order).
    async fn certificates_page(
        &self,
        before: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<CertificateRecord>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT id, provider, kind, template_hash, schema_hash, settings_hash, passed, report, \
             created_at FROM certificates WHERE (?1 IS NULL OR id < ?1) ORDER BY id DESC LIMIT ?2",
        )
        .bind(before.map(|id| id.to_string()))
        .bind(i64::from(limit))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(record).collect()
    }
}
