//! The dashboard at `/ui`: server-rendered HTML pages (askama templates, escaped by default)
//! over the same store, scopes and use cases as the JSON API, with a little vanilla JS and
//! CSS served from the binary.
//!
//! Sign-in takes an API key and keeps it in an `HttpOnly`, `SameSite=Strict` cookie scoped
//! to `/ui` ([`cookie`]); the cookie resolves to the same [`super::Caller`] as a Bearer header
//! ([`session`]). The JSON API never reads the cookie. Cookie-authenticated POSTs carry a
//! token derived from the key and are refused from another origin ([`csrf`]). Every page is
//! sent with a strict Content-Security-Policy: no inline script or style, nothing from
//! elsewhere. The pages are for browsers: they are not in the API's OpenAPI document.

mod assets;
mod certificates;
mod chrome;
mod cookie;
mod csrf;
mod display;
mod error;
mod job;
mod jobs;
mod login;
mod races;
mod session;
mod timeline;
mod unknown;

use std::sync::Arc;

use axum::{
    Router,
    http::{HeaderValue, header},
    middleware,
    response::{Redirect, Response},
    routing::{get, post},
};

use super::AppState;

/// The dashboard's own pages and assets, to be nested at `/ui`.
pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(home))
        .route("/login", get(login::form).post(login::submit))
        .route("/logout", post(login::logout))
        .route("/jobs", get(jobs::list))
        .route("/jobs/{id}", get(job::show))
        .route("/unknown", get(unknown::queue))
        .route("/attempts/{id}/resolve", post(unknown::resolve))
        .route("/races", get(races::list))
        .route("/certificates", get(certificates::list))
        .route("/assets/ui.css", get(assets::css))
        .route("/assets/ui.js", get(assets::js))
        .fallback(error::no_such_page)
        .layer(middleware::map_response(protect))
}

/// `GET /ui`: the jobs list.
async fn home() -> Redirect {
    Redirect::to("/ui/jobs")
}

/// The Content-Security-Policy of every dashboard response: scripts, styles and forms from
/// this origin only, no inline code, no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; \
     base-uri 'none'";

/// Adds the dashboard's security headers; pages (which show job data) are not cached.
async fn protect(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}
