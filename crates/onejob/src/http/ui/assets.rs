//! The dashboard's stylesheet and script, compiled into the binary and served from `/ui/assets`
//! (no build step, nothing fetched from elsewhere; the Content-Security-Policy allows only
//! these).

use axum::{
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};

const CSS: &str = include_str!("assets/ui.css");
const JS: &str = include_str!("assets/ui.js");

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `GET /ui/assets/ui.css`.
pub async fn css() -> Response {
    asset(CSS, "text/css; charset=utf-8")
}

/// `GET /ui/assets/ui.js`.
pub async fn js() -> Response {
    asset(JS, "text/javascript; charset=utf-8")
}
