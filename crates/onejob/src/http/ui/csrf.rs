//! Cross-site request forgery protection for the dashboard's POSTs.
//!
//! Three layers: the sign-in cookie is `SameSite=Strict`, so a browser does not send it with
//! a request another site started; every cookie-authenticated form carries a token (a
//! hidden `csrf` field) that only a page of this origin can know; and a POST whose `Origin`
//! names another origin is refused, which also covers the sign-in form (no token yet).
//!
//! The token is `SHA-256("onejob-ui-csrf" ‖ 0 ‖ api key)`, hex: bound to the signed-in key,
//! nothing to store, and without the key (which the `HttpOnly` cookie keeps from scripts)
//! nobody can compute it. It is compared in constant time.

use axum::http::{HeaderMap, header};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The form field that carries the token.
pub const FIELD: &str = "csrf";

/// Why a POST was refused as a possible forgery.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsrfError {
    /// The form carried no token.
    #[error("the form carried no CSRF token; reload the page and submit it again")]
    MissingToken,
    /// The form's token is not the signed-in key's.
    #[error(
        "the form's CSRF token does not match your sign-in; reload the page and submit it again"
    )]
    WrongToken,
    /// The browser says the form was submitted from another origin.
    #[error("the form was submitted from another origin ({origin}); use the dashboard itself")]
    CrossOrigin {
        /// The `Origin` the browser sent.
        origin: String,
    },
}

/// The token of the forms of a session signed in with `api_key`.
pub fn token(api_key: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"onejob-ui-csrf\0");
    hasher.update(api_key.as_bytes());
    hex::encode(hasher.finalize())
}

/// Checks a submitted token against the session's key.
pub fn check_token(api_key: &str, submitted: Option<&str>) -> Result<(), CsrfError> {
    let submitted = submitted
        .filter(|t| !t.is_empty())
        .ok_or(CsrfError::MissingToken)?;
    if bool::from(token(api_key).as_bytes().ct_eq(submitted.as_bytes())) {
        Ok(())
    } else {
        Err(CsrfError::WrongToken)
    }
}

/// Refuses a request whose `Origin` is present and names another host than the request's
/// own (`Host`, or `X-Forwarded-Host` behind a proxy). Browsers send `Origin` with every
/// form POST; a client that sends none is not a browser being forged.
pub fn check_origin(request: &HeaderMap) -> Result<(), CsrfError> {
    let Some(origin) = request.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("");
    let refused = || CsrfError::CrossOrigin {
        origin: origin.to_owned(),
    };
    let authority = origin
        .split_once("://")
        .map(|(_, rest)| rest)
        .ok_or_else(refused)?;
    let host = |name| request.get(name).and_then(|h| h.to_str().ok());
    let own = [host("x-forwarded-host"), host(header::HOST.as_str())];
    if own
        .into_iter()
        .flatten()
        .any(|h| h.eq_ignore_ascii_case(authority))
    {
        Ok(())
    } else {
        Err(refused())
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn only_the_sessions_own_token_passes() {
        let key = "oj_0011_2233";
        assert_eq!(check_token(key, Some(&token(key))), Ok(()));
        assert_eq!(
            check_token(key, Some(&token("oj_0011_4455"))),
            Err(CsrfError::WrongToken)
        );
        assert_eq!(check_token(key, Some("")), Err(CsrfError::MissingToken));
        assert_eq!(check_token(key, None), Err(CsrfError::MissingToken));
        assert!(!token(key).contains(key));
    }

    fn request(origin: Option<&'static str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        if let Some(origin) = origin {
            headers.insert(header::ORIGIN, HeaderValue::from_static(origin));
        }
        headers
    }

    #[test]
    fn a_foreign_origin_is_refused_and_the_own_one_passes() {
        assert_eq!(
            check_origin(&request(Some("http://127.0.0.1:8080"))),
            Ok(())
        );
        assert_eq!(check_origin(&request(None)), Ok(()));
        for origin in ["http://evil.example", "null", "http://127.0.0.1:9999"] {
            assert!(
                matches!(
                    check_origin(&request(Some(origin))),
                    Err(CsrfError::CrossOrigin { .. })
                ),
                "{origin}"
            );
        }
    }
}
