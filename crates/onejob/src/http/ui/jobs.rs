//! `GET /ui/jobs`: the signed-in user's jobs, newest first, filtered by state and kind and
//! paged (`before` = the last job of the previous page), through
//! [`crate::jobs::Jobs::jobs_page`].

use std::{collections::HashMap, sync::Arc};

use askama::Template;
use axum::{
    extract::{Query, State, rejection::QueryRejection},
    response::Html,
};
use onejob_domain::JobState;
use uuid::Uuid;

use super::{
    chrome::{Chrome, Section, render},
    display,
    error::PageError,
    session::Session,
};
use crate::{http::AppState, store::JobFilter};

/// Jobs per page.
pub const PAGE: u32 = 25;

/// One job in the list.
pub struct JobRow {
    /// Its id.
    pub id: Uuid,
    /// Its kind.
    pub kind: String,
    /// Its state.
    pub state: &'static str,
    /// How many attempts it had.
    pub attempts: i32,
    /// When it was accepted.
    pub created: String,
    /// When it last changed.
    pub updated: String,
}

/// An option of a filter's select.
pub struct Choice {
    /// The value (and label).
    pub value: String,
    /// Whether the current filter has it.
    pub selected: bool,
}

/// The jobs list.
#[derive(Template)]
#[template(path = "jobs.html")]
pub struct JobsPage {
    /// The frame.
    pub chrome: Option<Chrome>,
    /// This page's jobs.
    pub rows: Vec<JobRow>,
    /// The state filter's options.
    pub states: Vec<Choice>,
    /// The kind filter's options.
    pub kinds: Vec<Choice>,
    /// The query string of the next page, if there is one.
    pub next: Option<String>,
    /// Whether this is a later page (offer a way back to the first).
    pub paged: bool,
}

/// `GET /ui/jobs?state=&kind=&before=`: empty values mean "any".
pub async fn list(
    State(state): State<Arc<AppState>>,
    session: Session,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Html<String>, PageError> {
    let Query(query) =
        query.map_err(|e| PageError::bad_request(format!("bad query string: {e}")))?;
    let given = |name: &str| query.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
    let wanted_state = given("state")
        .map(str::parse::<JobState>)
        .transpose()
        .map_err(|e| {
            PageError::bad_request(format!(
                "{e}; states are pending, running, unknown, succeeded, failed, cancelled"
            ))
        })?;
    let wanted_kind = given("kind").map(str::to_owned);
    let before = given("before")
        .map(Uuid::parse_str)
        .transpose()
        .map_err(|_| PageError::bad_request("`before` is a job id"))?;
    let filter = JobFilter {
        state: wanted_state,
        kind: wanted_kind.clone(),
        before,
        limit: PAGE,
    };
    let page = state
        .jobs
        .jobs_page(&session.caller.principal, &filter)
        .await?;
    let jobs = page.jobs;
    let next = page.next_before.map(|last| {
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        if let Some(s) = wanted_state {
            query.append_pair("state", s.as_str());
        }
        if let Some(k) = &wanted_kind {
            query.append_pair("kind", k);
        }
        query.append_pair("before", &last.to_string());
        query.finish()
    });
    let mut kind_names: Vec<String> = state
        .jobs
        .kinds()
        .names()
        .into_iter()
        .map(str::to_owned)
        .collect();
    if let Some(k) = &wanted_kind
        && !kind_names.contains(k)
    {
        kind_names.push(k.clone());
    }
    render(&JobsPage {
        chrome: session.chrome(Section::Jobs),
        rows: jobs
            .into_iter()
            .map(|job| JobRow {
                id: job.id,
                kind: job.kind,
                state: job.state.as_str(),
                attempts: job.attempts,
                created: display::time(job.created_at),
                updated: display::time(job.updated_at),
            })
            .collect(),
        states: JobState::ALL
            .iter()
            .map(|s| Choice {
                value: s.as_str().to_owned(),
                selected: wanted_state == Some(*s),
            })
            .collect(),
        kinds: kind_names
            .into_iter()
            .map(|k| Choice {
                selected: wanted_kind.as_ref() == Some(&k),
                value: k,
            })
            .collect(),
        next,
        paged: before.is_some(),
    })
}
