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
#[utoipa::path(
    get,
    path = "/ui/login",
    operation_id = "ui_login_form",
    tag = "dashboard",
    summary = "The sign-in form",
    security(()),
    responses((status = 200, description = "The form", content_type = "text/html", body = String))
)]
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
#[utoipa::path(
    post,
    path = "/ui/login",
    operation_id = "ui_login",
    tag = "dashboard",
    summary = "Sign in with an API key (form field `key`)",
    security(()),
    responses(
        (status = 303, description = "Signed in: the sign-in cookie is set (HttpOnly, SameSite=Strict, Path=/ui; Secure unless plain http to a loopback host), to /ui/jobs"),
        (status = 400, description = "No key in the form (or not a form): the form again, with an error", content_type = "text/html", body = String),
        (status = 401, description = "Not a valid key: the form again, with an error", content_type = "text/html", body = String),
        (status = 403, description = "Submitted from another origin", content_type = "text/html", body = String),
    )
)]
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
#[utoipa::path(
    post,
    path = "/ui/logout",
    operation_id = "ui_logout",
    tag = "dashboard",
    summary = "Sign out: clears the sign-in cookie",
    security(()),
    responses(
        (status = 303, description = "Signed out, to /ui/login"),
        (status = 403, description = "Submitted from another origin", content_type = "text/html", body = String),
    )
)]
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
