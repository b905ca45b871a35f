//! API keys on SQLite: stored, looked up, listed and revoked (`onejob keys`). Timestamps
//! are RFC 3339 text here, parsed on the way out.

use async_trait::async_trait;
use onejob_domain::Principal;

use super::{SqliteStore, parse_time};
use crate::store::{ApiKeyRecord, ApiKeySummary, Keys, NewApiKey, Revocation, StoreError};

/// The columns of an [`ApiKeySummary`], in `Row` order.
macro_rules! columns {
    () => {
        "id, tenant, user_id, operator, created_at, revoked_at"
    };
}

type Row = (String, String, String, bool, String, Option<String>);

fn summary(
    (id, tenant, user, operator, created_at, revoked_at): Row,
) -> Result<ApiKeySummary, StoreError> {
    Ok(ApiKeySummary {
        id,
        principal: Principal::new(tenant, user),
        operator,
        created_at: parse_time(&created_at)?,
        revoked_at: revoked_at.as_deref().map(parse_time).transpose()?,
    })
}

#[async_trait]
impl Keys for SqliteStore {
    async fn api_keys(&self) -> Result<Vec<ApiKeySummary>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(concat!(
            "SELECT ",
            columns!(),
            " FROM api_keys ORDER BY created_at, id"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(summary).collect()
    }

    async fn revoke_api_key(&self, id: &str) -> Result<Revocation, StoreError> {
        let revoked: Option<Row> = sqlx::query_as(concat!(
            "UPDATE api_keys SET revoked_at = ",
            now!(),
            " WHERE id = ?1 AND revoked_at IS NULL RETURNING ",
            columns!()
        ))
        .bind(id)
        .fetch_optional(&self.writer)
        .await?;
        if let Some(row) = revoked {
            return Ok(Revocation::Revoked(summary(row)?));
        }
        let before: Option<Row> = sqlx::query_as(concat!(
            "SELECT ",
            columns!(),
            " FROM api_keys WHERE id = ?1"
        ))
        .bind(id)
        .fetch_optional(&self.writer)
        .await?;
        match before {
            Some(row) => Ok(Revocation::AlreadyRevoked(summary(row)?)),
            None => Ok(Revocation::Unknown),
        }
    }

    async fn insert_api_key(&self, key: NewApiKey) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO api_keys (id, tenant, user_id, salt, secret_hash, operator) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .bind(&key.id)
        .bind(&key.principal.tenant)
        .bind(&key.principal.user)
        .bind(&key.salt[..])
        .bind(&key.secret_hash[..])
        .bind(key.operator)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    async fn api_key(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let row: Option<(String, String, String, Vec<u8>, Vec<u8>, bool)> = sqlx::query_as(
            "SELECT id, tenant, user_id, salt, secret_hash, operator FROM api_keys \
             WHERE id = ?1 AND revoked_at IS NULL",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(
            |(id, tenant, user, salt, secret_hash, operator)| ApiKeyRecord {
                id,
                principal: Principal::new(tenant, user),
                salt,
                secret_hash,
                operator,
            },
        ))
    }
}
