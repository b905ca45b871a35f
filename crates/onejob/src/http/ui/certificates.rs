//! `GET /ui/certificates`: the `onejob verify` runs, valid or not, newest first and paged
//! (`before` = the last run of the previous page), with validity decided over every run by
//! [`crate::certification::Certified`] (passed, made against the kind's current template and
//! output schema, and not revoked by a newer failing run). Operator keys only, as
//! `GET /v1/certificates`: any other key gets the same 403, as a page.

use std::{collections::HashMap, sync::Arc};

use askama::Template;
use axum::{
    extract::{Query, State, rejection::QueryRejection},
    response::Html,
};
use uuid::Uuid;

use super::{
    chrome::{Chrome, Section, render},
    display,
    error::PageError,
    session::Session,
};
use crate::http::{AppState, certificates::page};

/// Runs per page.
pub const PAGE: u32 = 50;

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
    /// This page's runs, newest first.
    pub rows: Vec<CertificateRow>,
    /// The `before` of the next page, if there is one.
    pub next: Option<Uuid>,
    /// Whether this is a later page (offer a way back to the first).
    pub paged: bool,
}

fn short(hash: &str) -> String {
    hash.chars().take(12).collect()
}

/// `GET /ui/certificates?before=`.
pub async fn list(
    State(state): State<Arc<AppState>>,
    session: Session,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Html<String>, PageError> {
    session.caller.require_operator()?;
    let Query(query) =
        query.map_err(|e| PageError::bad_request(format!("bad query string: {e}")))?;
    let before = query
        .get("before")
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
        .map(Uuid::parse_str)
        .transpose()
        .map_err(|_| PageError::bad_request("`before` is a certificate id"))?;
    let (runs, next) = page(&state, before, PAGE).await?;
    render(&CertificatesPage {
        chrome: session.chrome(Section::Certificates),
        rows: runs
            .into_iter()
            .map(|c| CertificateRow {
                id: c.id.to_string(),
                template_hash: short(&c.template_hash),
                schema_hash: short(&c.schema_hash),
                report: display::json(&c.report),
                at: display::time(c.created_at),
                provider: c.provider,
                kind: c.kind,
                passed: c.passed,
                valid: c.valid,
            })
            .collect(),
        next,
        paged: before.is_some(),
    })
}
