//! How a dashboard page fails: a redirect to the sign-in form, or an HTML page with the
//! status and detail of the [`Problem`] the JSON API would have answered (a bad query
//! parameter is a 400 page, a foreign job a 404 page, never a 500).

use askama::Template;
use axum::{
    http::{StatusCode, Uri},
    response::{Html, IntoResponse, Redirect, Response},
};

use super::chrome::Chrome;
use crate::{
    http::{Problem, ProblemType},
    jobs::listing::ListingError,
    store::StoreError,
};

/// Why a page was not shown.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// No valid sign-in cookie: go to the sign-in form.
    #[error("sign in first")]
    SignIn,
    /// What the JSON API would answer, shown as a page.
    #[error("{}", .0.detail)]
    Problem(Problem),
}

impl PageError {
    /// A 400 page for a malformed query parameter or form field.
    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::Problem(Problem::new(ProblemType::InvalidRequest, detail))
    }
}

impl From<Problem> for PageError {
    fn from(problem: Problem) -> Self {
        Self::Problem(problem)
    }
}

impl From<StoreError> for PageError {
    fn from(error: StoreError) -> Self {
        Self::Problem(error.into())
    }
}

impl From<ListingError> for PageError {
    fn from(error: ListingError) -> Self {
        Self::Problem(error.into())
    }
}

impl From<askama::Error> for PageError {
    fn from(error: askama::Error) -> Self {
        tracing::error!(error = %error, "a dashboard template failed to render");
        Self::Problem(Problem::new(
            ProblemType::Internal,
            "onejob hit an internal error; it has been logged",
        ))
    }
}

/// The error page.
#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    /// No session to show: the frame has only the links.
    pub chrome: Option<Chrome>,
    /// The status, e.g. `404`.
    pub status: u16,
    /// The problem's title.
    pub title: &'static str,
    /// What was wrong.
    pub detail: String,
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        match self {
            PageError::SignIn => Redirect::to("/ui/login").into_response(),
            PageError::Problem(problem) => {
                let status = problem.kind.status();
                let page = ErrorPage {
                    chrome: None,
                    status: status.as_u16(),
                    title: problem.kind.title(),
                    detail: problem.detail,
                };
                match page.render() {
                    Ok(html) => (status, Html(html)).into_response(),
                    Err(error) => {
                        tracing::error!(error = %error, "the error page failed to render");
                        (StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
                    }
                }
            }
        }
    }
}

/// The fallback under `/ui`: a 404 page.
pub async fn no_such_page(uri: Uri) -> PageError {
    PageError::Problem(Problem::new(
        ProblemType::NotFound,
        format!("the dashboard has no page {}", uri.path()),
    ))
}
