//! API key management on SQLite: listing keys and revoking one (`onejob keys`). Timestamps
//! are RFC 3339 text here, parsed on the way out.

use onejob_domain::Principal;

use super::{SqliteStore, parse_time};
use crate::store::{ApiKeySummary, Revocation, StoreError};

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

pub(super) async fn list(store: &SqliteStore) -> Result<Vec<ApiKeySummary>, StoreError> {
    let rows: Vec<Row> = sqlx::query_as(concat!(
        "SELECT ",
        columns!(),
        " FROM api_keys ORDER BY created_at, id"
    ))
    .fetch_all(&store.pool)
    .await?;
    rows.into_iter().map(summary).collect()
}

pub(super) async fn revoke(store: &SqliteStore, id: &str) -> Result<Revocation, StoreError> {
    let revoked: Option<Row> = sqlx::query_as(concat!(
        "UPDATE api_keys SET revoked_at = ",
        now!(),
        " WHERE id = ?1 AND revoked_at IS NULL RETURNING ",
        columns!()
    ))
    .bind(id)
    .fetch_optional(&store.writer)
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
    .fetch_optional(&store.writer)
    .await?;
    match before {
        Some(row) => Ok(Revocation::AlreadyRevoked(summary(row)?)),
        None => Ok(Revocation::Unknown),
    }
}
