//! The frame around every dashboard page (navigation, who is signed in, the sign-out form),
//! and rendering a page into a response.

use askama::Template;
use axum::response::Html;

use super::error::PageError;
use crate::http::Caller;

/// Which section of the dashboard a page belongs to (highlighted in the navigation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// The jobs list and job pages.
    Jobs,
    /// The unknown queue.
    Unknown,
    /// Recent races.
    Races,
    /// Provider certificates.
    Certificates,
}

impl Section {
    /// The section's name, as the navigation's links know it.
    pub fn name(self) -> &'static str {
        match self {
            Section::Jobs => "jobs",
            Section::Unknown => "unknown",
            Section::Races => "races",
            Section::Certificates => "certificates",
        }
    }
}

/// What the frame shows for a signed-in user.
#[derive(Debug, Clone)]
pub struct Chrome {
    /// `tenant / user`.
    pub who: String,
    /// Whether the key is an operator key.
    pub operator: bool,
    /// The CSRF token of the session's forms.
    pub csrf: String,
    /// The current section.
    pub section: Section,
}

impl Chrome {
    /// The frame of a signed-in `caller`'s page in `section` (an `Option`, as pages without
    /// a session have none).
    pub fn signed_in(caller: &Caller, csrf: String, section: Section) -> Option<Chrome> {
        Some(Chrome {
            who: format!("{} / {}", caller.principal.tenant, caller.principal.user),
            operator: caller.operator,
            csrf,
            section,
        })
    }

    /// Whether the section named `name` is the current one (`aria-current` in the
    /// navigation).
    pub fn is(&self, name: &str) -> bool {
        self.section.name() == name
    }
}

/// Renders a page.
pub fn render(page: &impl Template) -> Result<Html<String>, PageError> {
    Ok(Html(page.render()?))
}
