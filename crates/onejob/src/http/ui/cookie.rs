//! The dashboard's sign-in cookie: its name, its attributes, and reading it back.
//!
//! The cookie holds the API key itself (there is no server-side session to revoke: revoking
//! the key signs every browser out). It is `HttpOnly` (no script reads it), `SameSite=Strict`
//! (no other site's page makes the browser send it) and `Path=/ui` (the JSON API never sees
//! it). It is `Secure` unless the request came over plain http to a loopback host: a
//! `Secure` cookie set over plain http is dropped by browsers (some except `localhost`),
//! which would make `onejob serve`'s default `http://127.0.0.1:8080` unusable, while a
//! loopback connection never crosses a network. A request naming any other host, or one a
//! proxy marks as https (`X-Forwarded-Proto: https`, `Forwarded: proto=https`), gets a
//! `Secure` cookie, so a deployment behind TLS never sends the key in clear.

use std::net::IpAddr;

use axum::http::{HeaderMap, HeaderValue, header};

/// The cookie's name.
pub const NAME: &str = "onejob_ui";

/// The path the cookie is scoped to.
pub const PATH: &str = "/ui";

/// The `Set-Cookie` value that signs the browser in with `token`.
pub fn sign_in(token: &str, request: &HeaderMap) -> HeaderValue {
    header_value(format!("{NAME}={token}; {}", attributes(request)))
}

/// The `Set-Cookie` value that signs the browser out (an expired, empty cookie).
pub fn sign_out(request: &HeaderMap) -> HeaderValue {
    header_value(format!("{NAME}=; Max-Age=0; {}", attributes(request)))
}

fn header_value(text: String) -> HeaderValue {
    // Tokens that reach here passed `api_key::parse`, so only `[a-z0-9_]` is interpolated.
    HeaderValue::try_from(text).expect("a cookie of ASCII letters, digits and `_` is a header")
}

fn attributes(request: &HeaderMap) -> String {
    let secure = if needs_secure(request) {
        "; Secure"
    } else {
        ""
    };
    format!("Path={PATH}; HttpOnly; SameSite=Strict{secure}")
}

/// Whether the cookie must be `Secure`: always, except for a plain-http request to a
/// loopback host (`localhost`, `127.0.0.0/8`, `[::1]`) that no proxy marks as https.
pub fn needs_secure(request: &HeaderMap) -> bool {
    if forwarded_https(request) {
        return true;
    }
    let host = request
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    !is_loopback_host(host)
}

fn forwarded_https(request: &HeaderMap) -> bool {
    let proto = request
        .get_all("x-forwarded-proto")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|p| p.trim().eq_ignore_ascii_case("https")));
    let forwarded = request
        .get_all(header::FORWARDED)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.split([',', ';']).any(|pair| {
                pair.split_once('=').is_some_and(|(name, value)| {
                    name.trim().eq_ignore_ascii_case("proto")
                        && value.trim().trim_matches('"').eq_ignore_ascii_case("https")
                })
            })
        });
    proto || forwarded
}

/// Whether a `Host` header value (`name[:port]`, `[v6][:port]`) names a loopback host.
fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split_once(']').map_or("", |(inside, _)| inside)
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The cookie's value in a request, if it carries one.
pub fn read(request: &HeaderMap) -> Option<&str> {
    request
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, value)| *name == NAME && !value.is_empty())
        .map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn loopback_hosts_over_plain_http_are_not_secure() {
        for host in [
            "127.0.0.1:8080",
            "127.9.0.1",
            "localhost:3000",
            "LOCALHOST",
            "[::1]:8080",
        ] {
            assert!(!needs_secure(&headers(&[("host", host)])), "{host}");
        }
    }

    #[test]
    fn other_hosts_and_https_behind_a_proxy_are_secure() {
        for request in [
            headers(&[("host", "onejob.example.com")]),
            headers(&[("host", "10.0.0.5:8080")]),
            headers(&[("host", "localhost.example.com")]),
            headers(&[]),
            headers(&[("host", "127.0.0.1:8080"), ("x-forwarded-proto", "https")]),
            headers(&[
                ("host", "localhost"),
                ("forwarded", "for=1.2.3.4;proto=https"),
            ]),
        ] {
            assert!(needs_secure(&request), "{request:?}");
        }
    }

    #[test]
    fn the_cookie_has_every_attribute() {
        let set = sign_in("oj_ab_cd", &headers(&[("host", "onejob.example.com")]));
        assert_eq!(
            set,
            "onejob_ui=oj_ab_cd; Path=/ui; HttpOnly; SameSite=Strict; Secure"
        );
        let out = sign_out(&headers(&[("host", "127.0.0.1")]));
        assert_eq!(
            out,
            "onejob_ui=; Max-Age=0; Path=/ui; HttpOnly; SameSite=Strict"
        );
    }

    #[test]
    fn the_cookie_is_read_among_others() {
        let request = headers(&[("cookie", "a=1; onejob_ui=oj_x_y; b=2")]);
        assert_eq!(read(&request), Some("oj_x_y"));
        assert_eq!(read(&headers(&[("cookie", "onejob_ui=")])), None);
        assert_eq!(read(&headers(&[])), None);
    }
}
