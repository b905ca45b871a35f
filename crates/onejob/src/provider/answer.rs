//! Reading an upstream's answer within bounds: the body is read chunk by chunk and refused
//! as soon as it passes the provider's `max_response_bytes` (or announces more in its
//! `Content-Length`), so a huge or endless answer never sits in memory whole; then the
//! status is classified and the body parsed as JSON.

use bytes::{Bytes, BytesMut};
use serde_json::Value;

use super::{ProviderError, UpstreamApi};

/// Reads the whole body of `response`, refusing it beyond `limit` bytes.
pub async fn read_body(
    mut response: reqwest::Response,
    limit: u64,
) -> Result<Bytes, ProviderError> {
    if response
        .content_length()
        .is_some_and(|length| length > limit)
    {
        return Err(ProviderError::TooLarge { limit });
    }
    let mut body = BytesMut::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() as u64 + chunk.len() as u64 > limit {
                    return Err(ProviderError::TooLarge { limit });
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body.freeze()),
            Err(error) => {
                return Err(ProviderError::Ambiguous(format!(
                    "reading the answer failed: {}",
                    super::error::chain(&error)
                )));
            }
        }
    }
}

/// Sends `call` to an upstream speaking `api` and reads its answer as JSON: a non-success
/// status is classified ([`ProviderError::from_response`]), a body over `limit` is [`ProviderError::TooLarge`].
pub async fn call_json(
    api: UpstreamApi,
    call: reqwest::RequestBuilder,
    limit: u64,
) -> Result<Value, ProviderError> {
    call_answered(api, call, limit)
        .await
        .map(|answered| answered.body)
}

/// An upstream's JSON answer, with the id it gave the request.
#[derive(Debug)]
pub struct Answered {
    /// The answer.
    pub body: Value,
    /// The upstream's `x-request-id`, where it sent one.
    pub request_id: Option<String>,
}

/// The upstream's `x-request-id` header, where it sent a readable one.
pub fn request_id(headers: &reqwest::header::HeaderMap) -> Option<String> {
    headers
        .get("x-request-id")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

/// As [`call_json`], keeping the upstream's request id.
pub async fn call_answered(
    api: UpstreamApi,
    call: reqwest::RequestBuilder,
    limit: u64,
) -> Result<Answered, ProviderError> {
    let response = call
        .send()
        .await
        .map_err(|e| ProviderError::from_transport(&e))?;
    let status = response.status();
    let headers = response.headers().clone();
    let body = read_body(response, limit).await?;
    let text = String::from_utf8_lossy(&body);
    if let Some(error) = ProviderError::from_response(api, status, &headers, &text) {
        return Err(error);
    }
    let body = serde_json::from_slice(&body)
        .map_err(|e| ProviderError::BadAnswer(format!("the answer is not JSON: {e}")))?;
    Ok(Answered {
        body,
        request_id: request_id(&headers),
    })
}
