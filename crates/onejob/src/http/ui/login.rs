//! Signing in to and out of the dashboard: a form that takes an API key, checks it exactly
//! like a Bearer header ([`Caller::from_token`]) and keeps it in the sign-in cookie
//! ([`super::cookie`]). A wrong key shows the form again with an error.

use std::{collections::HashMap, sync::Arc};

use askama::Template;
use axum::{
    extract::{Form, State, rejection::FormRejection},
    http::{HeaderMap, StatusCode, header},
    response::{Html, IntoResponse, Response},
};

use super::{
    chrome::{Chrome, render},
    cookie, csrf,
    error::PageError,
};
use crate::http::{AppState, Caller, ProblemType};

/// The sign-in page.
#[derive(Template)]
#[template(path = "login.html")]
pub struct LoginPage {
    /// Nobody is signed in: the frame has only the links.
    pub chrome: Option<Chrome>,
    /// Why the last try failed.
    pub error: Option<String>,
}

/// `GET /ui/login`.
pub async fn form() -> Result<Html<String>, PageError> {
    render(&LoginPage {
        chrome: None,
        error: None,
    })
}

fn again(status: StatusCode, error: String) -> Response {
    match render(&LoginPage {
        chrome: None,
        error: Some(error),
    }) {
        Ok(page) => (status, page).into_response(),
        Err(error) => error.into_response(),
    }
}

/// `POST /ui/login` (form field `key`): sets the cookie and goes to the jobs list.
pub async fn submit(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<HashMap<String, String>>, FormRejection>,
) -> Response {
    if let Err(error) = csrf::check_origin(&headers) {
        return again(StatusCode::FORBIDDEN, error.to_string());
    }
    let Ok(Form(fields)) = form else {
        return again(
            StatusCode::BAD_REQUEST,
            "send the form with an API key".into(),
        );
    };
    let key = fields.get("key").map_or("", |k| k.trim());
    if key.is_empty() {
        return again(
            StatusCode::BAD_REQUEST,
            "enter an API key (oj_…, from `onejob keys create`)".into(),
        );
    }
    match Caller::from_token(&state.keys, key).await {
        Ok(_) => (
            StatusCode::SEE_OTHER,
            [
                (header::LOCATION, "/ui/jobs".parse().expect("a path")),
                (header::SET_COOKIE, cookie::sign_in(key, &headers)),
            ],
        )
            .into_response(),
        Err(problem) if problem.kind == ProblemType::Unauthorized => again(
            StatusCode::UNAUTHORIZED,
            "that API key is not valid; check it, or create one with `onejob keys create`".into(),
        ),
        Err(problem) => PageError::Problem(problem).into_response(),
    }
}

/// `POST /ui/logout`: clears the cookie and goes to the sign-in form. It needs no token
/// (signing out grants nothing), but a POST from another origin is still refused.
pub async fn logout(headers: HeaderMap) -> Response {
    if let Err(error) = csrf::check_origin(&headers) {
        return PageError::Problem(crate::http::Problem::new(
            ProblemType::Forbidden,
            error.to_string(),
        ))
        .into_response();
    }
    (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, "/ui/login".parse().expect("a path")),
            (header::SET_COOKIE, cookie::sign_out(&headers)),
        ],
    )
        .into_response()
}
