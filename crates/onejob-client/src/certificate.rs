//! [`Certificate`]: one `onejob verify` run, and whether it certifies its provider now.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

/// One verification run (`GET /v1/certificates`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Certificate {
    /// Its id.
    pub id: Uuid,
    /// The provider verified.
    pub provider: String,
    /// The kind whose contract it ran.
    pub kind: String,
    /// Whether every contract case passed.
    pub passed: bool,
    /// Whether it certifies the provider now: passed, made against the kind's current
    /// template and output schema, and not followed by a failing run.
    pub valid: bool,
    /// The template hash it was made against.
    pub template_hash: String,
    /// The output schema hash it was made against.
    pub schema_hash: String,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// The per-case report.
    #[serde(default)]
    pub report: Value,
}

/// One page of verification runs (`GET /v1/certificates?before=&limit=`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CertificatePage {
    /// Newest first.
    pub certificates: Vec<Certificate>,
    /// Where the next page starts (pass it as `before` to
    /// [`crate::Client::certificates_page`]); `None` on the last page.
    #[serde(default)]
    pub next_before: Option<Uuid>,
}
