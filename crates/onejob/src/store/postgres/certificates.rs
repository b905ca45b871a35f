//! Verification runs (certificates) on PostgreSQL.

use async_trait::async_trait;
use serde_json::Value;
use sqlx::types::Json;
use time::OffsetDateTime;
use uuid::Uuid;

use super::PgStore;
use crate::store::{CertificateRecord, Certificates, StoreError};

type Row = (
    Uuid,
    String,
    String,
    String,
    String,
    String,
    bool,
    Json<Value>,
    OffsetDateTime,
);

fn record(
    (id, provider, kind, template_hash, schema_hash, settings_hash, passed, report, created_at): Row,
) -> CertificateRecord {
    CertificateRecord {
        id,
        provider,
        kind,
        template_hash,
        schema_hash,
        settings_hash,
        passed,
        report: report.0,
        created_at,
    }
}

#[async_trait]
impl Certificates for PgStore {
    async fn insert_certificate(&self, c: &CertificateRecord) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO certificates (id, provider, kind, template_hash, schema_hash, \
             settings_hash, passed, report, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(c.id)
        .bind(&c.provider)
        .bind(&c.kind)
        .bind(&c.template_hash)
        .bind(&c.schema_hash)
        .bind(&c.settings_hash)
        .bind(c.passed)
        .bind(Json(&c.report))
        .bind(c.created_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn certificates(&self) -> Result<Vec<CertificateRecord>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT id, provider, kind, template_hash, schema_hash, settings_hash, passed, report, \
             created_at FROM certificates ORDER BY created_at DESC, id DESC",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(record).collect())
    }

    /// Up to `limit` runs older than `before`, newest first (ids are UUIDv7: id order is
    /// creation order).
    async fn certificates_page(
        &self,
        before: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<CertificateRecord>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT id, provider, kind, template_hash, schema_hash, settings_hash, passed, report, \
             created_at FROM certificates WHERE ($1::uuid IS NULL OR id < $1) \
             ORDER BY id DESC LIMIT $2",
        )
        .bind(before)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(record).collect())
    }
}
