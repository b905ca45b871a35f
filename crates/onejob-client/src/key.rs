//! The idempotency key as the client handles it: checked before anything is sent, and
//! written into the `Idempotency-Key` header so that the server reads back exactly the key
//! the caller named.

/// The longest key the server accepts, in characters (keys are ASCII, so also in bytes).
pub const MAX_KEY_LEN: usize = 255;

/// Why a key was refused locally, without a request being sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key is the empty string.
    #[error("the idempotency key is empty; use 1 to {MAX_KEY_LEN} visible ASCII characters")]
    Empty,
    /// The key is longer than [`MAX_KEY_LEN`].
    #[error("the idempotency key is {0} characters long; the limit is {MAX_KEY_LEN}")]
    TooLong(usize),
    /// The key holds a character outside visible ASCII (0x21–0x7E).
    #[error(
        "the idempotency key has a character outside visible ASCII (0x21-0x7E) at byte {position}; \
         spaces, control characters and non-ASCII are not allowed"
    )]
    InvalidCharacter {
        /// Zero-based byte offset of the first offending byte.
        position: usize,
    },
}

/// Checks that `key` is a key the server accepts: 1–255 visible ASCII characters.
///
/// ```
/// assert!(onejob_client::validate_key("order-42:caption").is_ok());
/// assert!(onejob_client::validate_key("order 42").is_err());
/// ```
pub fn validate_key(key: &str) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if let Some(position) = key.bytes().position(|b| !(0x21..=0x7e).contains(&b)) {
        return Err(KeyError::InvalidCharacter { position });
    }
    if key.len() > MAX_KEY_LEN {
        return Err(KeyError::TooLong(key.len()));
    }
    Ok(())
}

/// The `Idempotency-Key` header value naming `key` (already validated).
///
/// The server reads a value wrapped in double quotes as an RFC 8941 string and unquotes it,
/// so a key that itself starts and ends with `"` is sent quoted (with `\"` and `\\`
/// escapes); every other key is sent bare, as it reads best in logs.
pub(crate) fn header_value(key: &str) -> String {
    let looks_quoted = key.len() >= 2 && key.starts_with('"') && key.ends_with('"');
    if !looks_quoted {
        return key.to_owned();
    }
    let mut quoted = String::with_capacity(key.len() + 4);
    quoted.push('"');
    for c in key.chars() {
        if matches!(c, '"' | '\\') {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_outside_visible_ascii_or_the_length_limit_are_refused() {
        assert_eq!(validate_key(""), Err(KeyError::Empty));
        assert_eq!(
            validate_key("a b"),
            Err(KeyError::InvalidCharacter { position: 1 })
        );
        assert_eq!(
            validate_key("caf\u{e9}"),
            Err(KeyError::InvalidCharacter { position: 3 })
        );
        assert_eq!(validate_key(&"k".repeat(256)), Err(KeyError::TooLong(256)));
        assert!(validate_key(&"k".repeat(255)).is_ok());
        assert!(validate_key("!~").is_ok());
    }

    #[test]
    fn header_value_is_bare_unless_the_key_would_read_as_a_quoted_string() {
        assert_eq!(header_value("order-42"), "order-42");
        assert_eq!(header_value("\"a"), "\"a");
        assert_eq!(header_value("\""), "\"");
        assert_eq!(header_value("\"a\\b\""), "\"\\\"a\\\\b\\\"\"");
    }
}
