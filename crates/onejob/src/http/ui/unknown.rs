//! The unknown queue: attempts whose outcome is `unknown` (an operator sees its tenant's,
//! anyone else their own), and the operators' resolve form. The form goes through
//! [`resolve_unknown`], the same code path as `POST /v1/attempts/{id}/resolve`; its outcome
//! (or the refusal, with the result's validation errors) is shown above the queue.

use std::{collections::HashMap, sync::Arc};

use askama::Template;
use axum::{
    extract::{Form, Path, State, rejection::FormRejection},
    http::{HeaderMap, StatusCode},
    response::{Html, IntoResponse, Response},
};
use onejob_domain::AttemptState;
use serde_json::Value;
use uuid::Uuid;

use super::{
    chrome::{Chrome, Section, render},
    csrf, display,
    error::PageError,
    session::Session,
};
use crate::http::{
    AppState, Audience, Problem, ProblemType,
    attempts::{Outcome, ResolveBody, resolve_unknown},
    jobs::parse_id,
};

/// Most unknown attempts the queue shows.
pub const LIMIT: u32 = 100;

/// What the resolve form of one attempt holds.
#[derive(Debug, Clone, Default)]
pub struct ResolveForm {
    /// `failed`, `cancelled` or `succeeded`.
    pub outcome: String,
    /// The result, as JSON text (for `succeeded`).
    pub result: String,
    /// Why, for the event log.
    pub reason: String,
}

/// One unknown attempt.
pub struct UnknownRow {
    /// The attempt id.
    pub id: Uuid,
    /// Its job.
    pub job_id: Uuid,
    /// 1, 2, … within the job.
    pub number: i32,
    /// Its provider.
    pub provider: String,
    /// Whether it was a hedge.
    pub hedge: bool,
    /// When it started.
    pub started: String,
    /// When its outcome became unknown.
    pub unknown_since: String,
    /// The provider's task id.
    pub task_id: String,
    /// Why it is unknown (JSON).
    pub error: Option<String>,
    /// The form, as last submitted for this attempt (kept after a refusal).
    pub form: ResolveForm,
}

/// What the last resolution did.
pub struct Notice {
    /// Whether it was done (else refused).
    pub done: bool,
    /// What happened.
    pub message: String,
    /// Validation errors of a refused result (`path: message`).
    pub errors: Vec<String>,
    /// The attempt's job, to link to.
    pub job_id: Option<Uuid>,
}

/// The unknown queue.
#[derive(Template)]
#[template(path = "unknown.html")]
pub struct UnknownPage {
    /// The frame.
    pub chrome: Option<Chrome>,
    /// The unknown attempts, newest first.
    pub rows: Vec<UnknownRow>,
    /// Whether the viewer may resolve them.
    pub operator: bool,
    /// The forms' CSRF token.
    pub csrf: String,
    /// The outcome of the form just submitted.
    pub notice: Option<Notice>,
}

/// `GET /ui/unknown`.
pub async fn queue(
    State(state): State<Arc<AppState>>,
    session: Session,
) -> Result<Html<String>, PageError> {
    page(&state, &session, None, None).await
}

async fn page(
    state: &AppState,
    session: &Session,
    notice: Option<Notice>,
    kept: Option<(Uuid, ResolveForm)>,
) -> Result<Html<String>, PageError> {
    let attempts = state
        .jobs
        .attempts_in(&session.scope(), Some(AttemptState::Unknown), LIMIT)
        .await?;
    let audience = Audience::of(session.caller.operator);
    let rows = attempts
        .into_iter()
        .map(|a| UnknownRow {
            form: match &kept {
                Some((id, form)) if *id == a.id => form.clone(),
                _ => ResolveForm::default(),
            },
            id: a.id,
            job_id: a.job_id,
            number: a.number,
            provider: a.provider,
            hedge: a.hedge,
            started: display::time(a.started_at),
            unknown_since: display::maybe_time(a.unknown_since),
            task_id: a.task_id.unwrap_or_else(|| "—".into()),
            error: a.error.map(|e| audience.shown(e).to_string()),
        })
        .collect();
    render(&UnknownPage {
        chrome: session.chrome(Section::Unknown),
        rows,
        operator: session.caller.operator,
        csrf: session.csrf(),
        notice,
    })
}

/// `POST /ui/attempts/{id}/resolve` (form fields `csrf`, `outcome`, `result`, `reason`):
/// operators only, with the session's CSRF token.
pub async fn resolve(
    State(state): State<Arc<AppState>>,
    session: Session,
    Path(id): Path<String>,
    headers: HeaderMap,
    form: Result<Form<HashMap<String, String>>, FormRejection>,
) -> Result<Response, PageError> {
    let Form(fields) = form.map_err(|e| PageError::bad_request(format!("bad form: {e}")))?;
    let field = |name: &str| fields.get(name).map(|v| v.trim()).unwrap_or("");
    session
        .check_post(&headers, fields.get(csrf::FIELD).map(String::as_str))
        .map_err(|e| Problem::new(ProblemType::Forbidden, e.to_string()))?;
    let attempt_id = parse_id(&id)?;
    let submitted = ResolveForm {
        outcome: field("outcome").to_owned(),
        result: field("result").to_owned(),
        reason: field("reason").to_owned(),
    };
    let outcome = match request(&submitted) {
        Ok(body) => resolve_unknown(&state, &session.caller, attempt_id, body).await,
        Err(problem) => Err(problem),
    };
    let (status, notice, kept) = match outcome {
        Ok(resolved) => {
            let job_state = resolved
                .job
                .as_ref()
                .map_or("gone", |job| job.state.as_str());
            let notice = Notice {
                done: true,
                message: format!(
                    "attempt {attempt_id} resolved as {}: {}; the job is now {job_state}",
                    submitted.outcome, resolved.outcome
                ),
                errors: Vec::new(),
                job_id: resolved.job.as_ref().map(|job| job.id),
            };
            (StatusCode::OK, notice, None)
        }
        Err(problem) => {
            let notice = Notice {
                done: false,
                message: format!("attempt {attempt_id} was not resolved: {}", problem.detail),
                errors: field_errors(&problem),
                job_id: None,
            };
            (problem.kind.status(), notice, Some((attempt_id, submitted)))
        }
    };
    let html = page(&state, &session, Some(notice), kept).await?;
    Ok((status, html).into_response())
}

/// The API's request body from the form, refusing what the JSON API would refuse to parse.
fn request(form: &ResolveForm) -> Result<ResolveBody, Problem> {
    let outcome = match form.outcome.as_str() {
        "succeeded" => Outcome::Succeeded,
        "failed" => Outcome::Failed,
        "cancelled" => Outcome::Cancelled,
        other => {
            return Err(Problem::new(
                ProblemType::InvalidRequest,
                format!("the outcome is failed, cancelled or succeeded, not {other:?}"),
            ));
        }
    };
    let result = if form.result.is_empty() {
        None
    } else {
        Some(serde_json::from_str::<Value>(&form.result).map_err(|e| {
            Problem::new(
                ProblemType::InvalidJson,
                format!("the result is not valid JSON: {e}"),
            )
        })?)
    };
    Ok(ResolveBody {
        outcome,
        result,
        reason: (!form.reason.is_empty()).then(|| form.reason.clone()),
    })
}

/// A problem's `errors` extension as `path: message` lines.
fn field_errors(problem: &Problem) -> Vec<String> {
    problem
        .extensions
        .get("errors")
        .and_then(Value::as_array)
        .map(|errors| {
            errors
                .iter()
                .map(|e| {
                    let path = e["path"].as_str().unwrap_or("");
                    let message = e["message"].as_str().unwrap_or("");
                    format!("{}: {message}", if path.is_empty() { "/" } else { path })
                })
                .collect()
        })
        .unwrap_or_default()
}
