//! `GET /ui/races`: recent `race_lost` events (a result that arrived after another attempt
//! had won, discarded; the log keeps only its size and hash), linked to their jobs. An
//! operator sees its tenant's, anyone else their own.

use std::sync::Arc;

use askama::Template;
use axum::{extract::State, response::Html};
use onejob_domain::EventKind;
use uuid::Uuid;

use super::{
    chrome::{Chrome, Section, render},
    display,
    error::PageError,
    session::Session,
};
use crate::http::AppState;

/// Most races the page shows.
pub const LIMIT: u32 = 100;

/// One lost race.
pub struct RaceRow {
    /// When the late result arrived.
    pub at: String,
    /// The job.
    pub job_id: Uuid,
    /// The attempt whose result was discarded.
    pub attempt_id: String,
    /// The discarded payload's size in bytes.
    pub size: String,
    /// The discarded payload's SHA-256.
    pub sha256: String,
    /// Everything the event recorded (JSON).
    pub detail: String,
}

/// The recent races page.
#[derive(Template)]
#[template(path = "races.html")]
pub struct RacesPage {
    /// The frame.
    pub chrome: Option<Chrome>,
    /// Newest first.
    pub rows: Vec<RaceRow>,
}

/// `GET /ui/races`.
pub async fn list(
    State(state): State<Arc<AppState>>,
    session: Session,
) -> Result<Html<String>, PageError> {
    let events = state
        .jobs
        .recent_events(&session.scope(), Some(EventKind::RaceLost), LIMIT)
        .await?;
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "—".to_owned(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    render(&RacesPage {
        chrome: session.chrome(Section::Races),
        rows: events
            .into_iter()
            .map(|e| RaceRow {
                at: display::time(e.at),
                job_id: e.job_id,
                attempt_id: e.attempt_id.map(|a| a.to_string()).unwrap_or_default(),
                size: text(&e.detail["size"]),
                sha256: text(&e.detail["sha256"]),
                detail: e.detail.to_string(),
            })
            .collect(),
    })
}
