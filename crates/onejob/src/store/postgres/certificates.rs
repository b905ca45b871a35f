//! Verification runs (certificates) on PostgreSQL.

use serde_json::Value;
use sqlx::{PgPool, types::Json};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::store::{CertificateRecord, StoreError};

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

pub(super) async fn insert(pool: &PgPool, c: &CertificateRecord) -> Result<(), StoreError> {
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
    .execute(pool)
    .await?;
    Ok(())
}

pub(super) async fn all(pool: &PgPool) -> Result<Vec<CertificateRecord>, StoreError> {
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT id, provider, kind, template_hash, schema_hash, settings_hash, passed, report, \
         created_at FROM certificates ORDER BY created_at DESC, id DESC",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(record).collect())
}

/// Up to `limit` runs older than `before`, newest first (ids are UUIDv7: id order is
/// creation order).
pub(super) async fn page(
    pool: &PgPool,
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
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(record).collect())
}

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
