//! `GET /v1/certificates`: every `onejob verify` run, with whether it certifies its provider
//! now (see [`crate::certification`]).

use std::sync::Arc;

use axum::{Json, extract::State};
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use super::{AppState, auth::Caller, openapi, problem::Problem};
use crate::certification::Certified;

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

/// Every verification run, newest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CertificateList {
    /// The runs.
    pub certificates: Vec<CertificateView>,
}

/// `GET /v1/certificates`.
#[utoipa::path(
    get,
    path = "/v1/certificates",
    tag = "operators",
    responses(
        (status = 200, description = "Every verification run, newest first, with whether it certifies its provider now", body = CertificateList),
        (status = 401, description = "Missing or invalid API key", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "The database is unavailable; retry after Retry-After", body = openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list(
    State(state): State<Arc<AppState>>,
    _caller: Caller,
) -> Result<Json<CertificateList>, Problem> {
    let records = state.jobs.store().certificates().await?;
    let certified = Certified::from_records(&records, state.jobs.kinds(), state.providers.hashes());
    let views: Vec<CertificateView> = records
        .into_iter()
        .map(|c| CertificateView {
            valid: certified.is_valid(&c),
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
    Ok(Json(CertificateList {
        certificates: views,
    }))
}
