//! `GET /v1/certificates`: the `onejob verify` runs, newest first and paged, with whether
//! each certifies its provider now, an adapter over [`crate::jobs::certificates`].
//! Certificates describe the deployment's providers, not a tenant's jobs: operator keys
//! only.

use std::{collections::HashMap, sync::Arc};

use axum::{
    Json,
    extract::{Query, State, rejection::QueryRejection},
};
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use super::{
    AppState,
    auth::Caller,
    jobs::{page_limit, page_query},
    problem::{Problem, ProblemType},
    responses,
};
use crate::{jobs::certificates::Certificate, store::StoreError};

/// Runs one page of `GET /v1/certificates` returns unless told otherwise.
pub const CERTIFICATES_PAGE: u32 = 100;

/// One verification run as the API shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CertificateView {
    /// Its id.
    pub id: Uuid,
    /// The provider verified.
    pub provider: String,
    /// The kind whose contract it ran.
    pub kind: String,
    /// Whether every contract case passed.
    pub passed: bool,
    /// Whether it certifies the provider now: it passed, was made against the kind's
    /// current template and output schema, and no newer such run failed.
    pub valid: bool,
    /// The template hash it was made against.
    pub template_hash: String,
    /// The output schema hash it was made against.
    pub schema_hash: String,
    /// The provider settings hash it was made against.
    pub settings_hash: String,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    /// The per-case report.
    pub report: Value,
}

/// One page of verification runs, newest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CertificateList {
    /// The runs, newest first.
    pub certificates: Vec<CertificateView>,
    /// Pass as `before` for the next page; `null` on the last.
    pub next_before: Option<Uuid>,
}

/// `GET /v1/certificates`: one page of verification runs, newest first (operator keys).
///
/// Paged with `before` (the previous page's `next_before`); each run's `valid` is decided
/// over every stored run, whichever page shows it.
#[utoipa::path(
    get,
    path = "/v1/certificates",
    tag = "operators",
    operation_id = "listCertificates",
    params(
        ("before" = Option<uuid::Uuid>, Query, description = "Only runs older than this one (next_before of the previous page)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "Page size, 1-500 (default 100)"),
    ),
    responses(
        (status = 200, description = "One page of verification runs, newest first, each with whether it certifies its provider now (decided over all runs, not only this page); next_before is null on the last page", body = CertificateList),
        (status = 400, response = responses::BadRequest),
        (status = 401, response = responses::Unauthorized),
        (status = 403, response = responses::Forbidden),
        (status = 503, response = responses::Unavailable),
    )
)]
pub async fn list(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Json<CertificateList>, Problem> {
    caller.require_operator()?;
    let query = page_query(query, &["before", "limit"])?;
    let before = query
        .get("before")
        .map(|b| Uuid::parse_str(b))
        .transpose()
        .map_err(|_| {
            Problem::new(
                ProblemType::InvalidRequest,
                "`before` is a certificate id (next_before of the previous page)",
            )
        })?;
    let limit = page_limit(&query, CERTIFICATES_PAGE)?;
    let (views, next_before) = page(&state, before, limit).await?;
    Ok(Json(CertificateList {
        certificates: views,
        next_before,
    }))
}

/// Up to `limit` runs older than `before`, newest first, and the `next_before` after them
/// ([`crate::jobs::Jobs::certificates_page`]), as the API shows them.
pub async fn page(
    state: &AppState,
    before: Option<Uuid>,
    limit: u32,
) -> Result<(Vec<CertificateView>, Option<Uuid>), StoreError> {
    let page = state.jobs.certificates_page(before, limit).await?;
    let views = page
        .certificates
        .into_iter()
        .map(|Certificate { record: c, valid }| CertificateView {
            valid,
            id: c.id,
            provider: c.provider,
            kind: c.kind,
            passed: c.passed,
            template_hash: c.template_hash,
            schema_hash: c.schema_hash,
            settings_hash: c.settings_hash,
            created_at: c.created_at,
            report: c.report,
        })
        .collect();
    Ok((views, page.next_before))
}
