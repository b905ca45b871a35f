//! Reading a JSON request body under explicit limits: media type (415), size (413) and
//! syntax (400), each with its own problem type. Duplicate object keys are refused: a
//! document that different parsers read differently cannot name one intent.

use axum::{
    body::Body,
    http::{HeaderMap, header},
};
use serde_json::Value;

use super::problem::{Problem, ProblemType};

/// Checks the media type, then reads at most `limit` bytes and parses them as JSON.
pub async fn read_json(headers: &HeaderMap, body: Body, limit: usize) -> Result<Value, Problem> {
    read_json_as_sent(headers, body, limit)
        .await
        .map(|(value, _)| value)
}

/// As [`read_json`], also answering the body's text as sent.
pub async fn read_json_as_sent(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<(Value, String), Problem> {
    check_media_type(headers)?;
    let too_large = || {
        Problem::new(
            ProblemType::BodyTooLarge,
            format!("the request body is larger than the limit of {limit} bytes (max_body_bytes)"),
        )
        .with("limit_bytes", limit)
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(too_large());
    }
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|error| {
        let is_limit = std::error::Error::source(&error)
            .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
        if is_limit {
            too_large()
        } else {
            Problem::new(
                ProblemType::InvalidRequest,
                format!("the request body could not be read: {error}"),
            )
        }
    })?;
    let invalid = |error: &dyn std::fmt::Display| {
        Problem::new(
            ProblemType::InvalidJson,
            format!("the body is not valid JSON: {error}"),
        )
    };
    let value = onejob_domain::params::parse_json_strict(&bytes).map_err(|e| invalid(&e))?;
    // Valid JSON is UTF-8 (the parser checked it).
    let text = String::from_utf8(bytes.to_vec()).map_err(|e| invalid(&e))?;
    Ok((value, text))
}

fn check_media_type(headers: &HeaderMap) -> Result<(), Problem> {
    let unsupported = |got: &str| {
        Problem::new(
            ProblemType::UnsupportedMediaType,
            format!("send the body as application/json (got {got})"),
        )
    };
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Err(unsupported("no Content-Type"));
    };
    let text = value
        .to_str()
        .map_err(|_| unsupported("an unreadable Content-Type"))?;
    let essence = text
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let is_json = essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"));
    if is_json {
        Ok(())
    } else {
        Err(unsupported(&format!("Content-Type {essence:?}")))
    }
}
