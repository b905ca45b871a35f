//! `GET /ui/jobs/{id}`: one of the signed-in user's jobs ([`crate::jobs::Jobs::job_detail`]):
//! its view, its attempts drawn as a timeline ([`Timeline`]) and listed, and its event log
//! (the first [`EVENTS`] entries, with a note when there are more). Another principal's job is a 404 page, exactly as
//! `GET /v1/jobs/{id}` answers.

use std::{collections::HashMap, sync::Arc};

use askama::Template;
use axum::{
    extract::{Path, State},
    response::Html,
};
use onejob_domain::{AttemptState, JobState};
use time::OffsetDateTime;
use uuid::Uuid;

use super::{
    chrome::{Chrome, Section, render},
    display,
    error::PageError,
    session::Session,
    timeline::Timeline,
};
use crate::{
    http::{AppState, Audience, jobs::parse_id, view::without_internal},
    jobs::{
        listing::{EventsPage, JobDetail},
        runs::RunPlace,
    },
};

/// Most events the job page shows (the first ones; the API pages through the rest).
pub const EVENTS: u32 = crate::http::jobs::MAX_PAGE;

/// One attempt in the attempts table.
pub struct AttemptRow {
    /// Its id.
    pub id: Uuid,
    /// 1, 2, … within the job.
    pub number: i32,
    /// Its provider.
    pub provider: String,
    /// Its state.
    pub state: &'static str,
    /// Whether it was a hedge.
    pub hedge: bool,
    /// Whether its result is the job's.
    pub winner: bool,
    /// Whether it waits for a resolution.
    pub unknown: bool,
    /// When it started.
    pub started: String,
    /// When the provider acknowledged it.
    pub acknowledged: String,
    /// When it ended.
    pub finished: String,
    /// The provider's task id.
    pub task_id: String,
    /// Why it failed or is unknown (JSON).
    pub error: Option<String>,
}

/// One entry of the event log.
pub struct EventRow {
    /// Position in the log.
    pub id: i64,
    /// What happened.
    pub kind: &'static str,
    /// When.
    pub at: String,
    /// The attempt it is about, as `#n`.
    pub attempt: String,
    /// Who did it.
    pub actor: String,
    /// Details (JSON).
    pub detail: String,
}

/// The job page.
#[derive(Template)]
#[template(path = "job.html")]
pub struct JobPage {
    /// The frame.
    pub chrome: Option<Chrome>,
    /// The job id.
    pub id: Uuid,
    /// Its kind.
    pub kind: String,
    /// Its state.
    pub state: &'static str,
    /// Whether it is pending or running, so about to move (the page refreshes itself; an
    /// unknown job waits for a resolution instead).
    pub live: bool,
    /// How many attempts it had.
    pub attempts: i32,
    /// When it was accepted.
    pub created: String,
    /// When it last changed.
    pub updated: String,
    /// Its params (JSON).
    pub params: String,
    /// The winning result (JSON), when succeeded.
    pub result: Option<String>,
    /// Why it failed (JSON), when failed.
    pub error: Option<String>,
    /// The winning attempt.
    pub completed_by: Option<Uuid>,
    /// The attempts on a time axis.
    pub timeline: Option<Timeline>,
    /// The attempts.
    pub rows: Vec<AttemptRow>,
    /// The event log, oldest first: its first [`EVENTS`] entries.
    pub events: Vec<EventRow>,
    /// When the log has more than [`EVENTS`] entries: the id of the last one shown (the
    /// `after` of `GET /v1/jobs/{id}/events` for the rest).
    pub events_after: Option<i64>,
    /// Whether the viewer may resolve unknown attempts.
    pub operator: bool,
    /// Where the job stands in its agent run, if it is in one (its step, and links to the
    /// steps before and after it).
    pub run: Option<RunPlace>,
}

/// `GET /ui/jobs/{id}`.
pub async fn show(
    State(state): State<Arc<AppState>>,
    session: Session,
    Path(id): Path<String>,
) -> Result<Html<String>, PageError> {
    let id = parse_id(&id)?;
    let owner = &session.caller.principal;
    let JobDetail {
        job,
        attempts,
        events: EventsPage {
            events,
            next_after: events_after,
        },
        run,
    } = state.jobs.job_detail(owner, id, EVENTS).await?;
    let succeeded = job.state == JobState::Succeeded;
    let winner = job.completed_by.filter(|_| succeeded);
    let timeline = Timeline::new(&attempts, winner, OffsetDateTime::now_utc());
    let numbers: HashMap<Uuid, i32> = attempts.iter().map(|a| (a.id, a.number)).collect();
    let audience = Audience::of(session.caller.operator);
    render(&JobPage {
        chrome: session.chrome(Section::Jobs),
        id: job.id,
        kind: job.kind,
        state: job.state.as_str(),
        live: matches!(job.state, JobState::Pending | JobState::Running),
        attempts: job.attempts,
        created: display::time(job.created_at),
        updated: display::time(job.updated_at),
        params: display::json(&job.params),
        result: job.result.filter(|_| succeeded).map(|r| display::json(&r)),
        error: job
            .error
            .filter(|_| job.state == JobState::Failed)
            .map(|e| display::json(&without_internal(e))),
        completed_by: winner,
        timeline,
        rows: attempts
            .into_iter()
            .map(|a| AttemptRow {
                winner: winner == Some(a.id),
                unknown: a.state == AttemptState::Unknown,
                id: a.id,
                number: a.number,
                provider: a.provider,
                state: a.state.as_str(),
                hedge: a.hedge,
                started: display::time(a.started_at),
                acknowledged: display::maybe_time(a.acknowledged_at),
                finished: display::maybe_time(a.finished_at),
                task_id: a.task_id.unwrap_or_else(|| "—".into()),
                error: a.error.map(|e| audience.shown(e).to_string()),
            })
            .collect(),
        events: events
            .into_iter()
            .map(|e| EventRow {
                id: e.id,
                kind: e.kind.as_str(),
                at: display::time(e.at),
                attempt: e
                    .attempt_id
                    .map(|a| {
                        numbers
                            .get(&a)
                            .map_or_else(|| a.to_string(), |n| format!("#{n}"))
                    })
                    .unwrap_or_default(),
                actor: e.actor.unwrap_or_default(),
                detail: audience.shown(e.detail).to_string(),
            })
            .collect(),
        events_after,
        operator: session.caller.operator,
        run,
    })
}
