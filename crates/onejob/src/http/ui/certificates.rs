//! `GET /ui/certificates`: every `onejob verify` run, valid or not, newest first, with
//! validity decided by [`Certified::from_records`] (passed, made against the kind's current
//! template and output schema, and not revoked by a newer failing run).

use std::sync::Arc;

use askama::Template;
use axum::{extract::State, response::Html};

use super::{
    chrome::{Chrome, Section, render},
    display,
    error::PageError,
    session::Session,
};
use crate::{certification::Certified, http::AppState};

/// One verification run.
pub struct CertificateRow {
    /// Its id.
    pub id: String,
    /// The provider verified.
    pub provider: String,
    /// The kind whose contract ran.
    pub kind: String,
    /// Whether every case passed.
    pub passed: bool,
    /// Whether it certifies the provider for the kind now.
    pub valid: bool,
    /// When.
    pub at: String,
    /// The template hash it was made against (short).
    pub template_hash: String,
    /// The output schema hash it was made against (short).
    pub schema_hash: String,
    /// The per-case report (JSON).
    pub report: String,
}

/// The certificates page.
#[derive(Template)]
#[template(path = "certificates.html")]
pub struct CertificatesPage {
    /// The frame.
    pub chrome: Option<Chrome>,
    /// Newest first.
    pub rows: Vec<CertificateRow>,
}

fn short(hash: &str) -> String {
    hash.chars().take(12).collect()
}

/// `GET /ui/certificates`.
#[utoipa::path(
    get,
    path = "/ui/certificates",
    operation_id = "ui_certificates",
    tag = "dashboard",
    summary = "Every verification run, with whether it is valid now",
    security(("dashboard_cookie" = [])),
    responses(
        (status = 200, description = "The page", content_type = "text/html", body = String),
        (status = 303, description = "No valid sign-in cookie: to /ui/login"),
    )
)]
pub async fn list(
    State(state): State<Arc<AppState>>,
    session: Session,
) -> Result<Html<String>, PageError> {
    let records = state.jobs.store().certificates().await?;
    let certified = Certified::from_records(&records, state.jobs.kinds(), state.providers.hashes());
    render(&CertificatesPage {
        chrome: session.chrome(Section::Certificates),
        rows: records
            .iter()
            .map(|c| CertificateRow {
                id: c.id.to_string(),
                provider: c.provider.clone(),
                kind: c.kind.clone(),
                passed: c.passed,
                valid: certified.is_valid(c),
                at: display::time(c.created_at),
                template_hash: short(&c.template_hash),
                schema_hash: short(&c.schema_hash),
                report: display::json(&c.report),
            })
            .collect(),
    })
}
