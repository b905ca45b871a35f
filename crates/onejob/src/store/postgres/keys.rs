//! API key management on PostgreSQL: listing keys and revoking one (`onejob keys`).

use onejob_domain::Principal;
use sqlx::PgPool;
use time::OffsetDateTime;

use crate::store::{ApiKeySummary, Revocation, StoreError};

/// The columns of an [`ApiKeySummary`], in `Row` order.
macro_rules! columns {
    () => {
        "id, tenant, user_id, operator, created_at, revoked_at"
    };
}

type Row = (
    String,
    String,
    String,
    bool,
    OffsetDateTime,
    Option<OffsetDateTime>,
);

fn summary((id, tenant, user, operator, created_at, revoked_at): Row) -> ApiKeySummary {
    ApiKeySummary {
        id,
        principal: Principal::new(tenant, user),
        operator,
        created_at,
        revoked_at,
    }
}

pub(super) async fn list(pool: &PgPool) -> Result<Vec<ApiKeySummary>, StoreError> {
    let rows: Vec<Row> = sqlx::query_as(concat!(
        "SELECT ",
        columns!(),
        " FROM api_keys ORDER BY created_at, id"
    ))
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(summary).collect())
}

pub(super) async fn revoke(pool: &PgPool, id: &str) -> Result<Revocation, StoreError> {
    let revoked: Option<Row> = sqlx::query_as(concat!(
        "UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL \
         RETURNING ",
        columns!()
    ))
    .bind(id)
    .fetch_optional(pool)
    .await?;
    if let Some(row) = revoked {
        return Ok(Revocation::Revoked(summary(row)));
    }
    let before: Option<Row> = sqlx::query_as(concat!(
        "SELECT ",
        columns!(),
        " FROM api_keys WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(pool)
    .await?;
    Ok(before.map_or(Revocation::Unknown, |row| {
        Revocation::AlreadyRevoked(summary(row))
    }))
}
