//! The upstream idempotency headers: reading a submit's `Idempotency-Key`, and marking the
//! answers served from the idempotency cache with `Idempotent-Replayed: true`.
//!
//! The caches themselves (one per endpoint) live in the shared state.

use axum::{
    http::{HeaderMap, HeaderValue},
    response::Response,
};

use crate::error::FakeError;

/// The header carrying an upstream idempotency key.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The header set on answers served from the upstream idempotency cache.
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

/// The request's `Idempotency-Key` header, if any; a header that is not visible ASCII is a 400.
pub fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, FakeError> {
    headers
        .get(IDEMPOTENCY_KEY)
        .map(|value| {
            value.to_str().map(str::to_owned).map_err(|_| {
                FakeError::BadRequest("the Idempotency-Key header must be visible ASCII".into())
            })
        })
        .transpose()
}

/// Adds `Idempotent-Replayed: true` to an answer served from the cache.
pub fn mark_replayed(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_key_is_none_and_a_present_one_is_read() {
        let mut headers = HeaderMap::new();
        assert_eq!(idempotency_key(&headers).unwrap(), None);
        headers.insert(IDEMPOTENCY_KEY, HeaderValue::from_static("order-42"));
        assert_eq!(
            idempotency_key(&headers).unwrap().as_deref(),
            Some("order-42")
        );
    }

    #[test]
    fn a_non_ascii_key_is_a_bad_request() {
        let mut headers = HeaderMap::new();
        headers.insert(
            IDEMPOTENCY_KEY,
            HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
        );
        assert!(matches!(
            idempotency_key(&headers),
            Err(FakeError::BadRequest(_))
        ));
    }
}
