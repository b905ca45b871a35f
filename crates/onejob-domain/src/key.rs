//! The idempotency key: the client's name for one business action.
//!
//! A key is 1–255 visible ASCII characters (0x21–0x7E). It is never stored: the database
//! keeps its SHA-256 ([`KeyHash`]) so that no business identifier ends up in an index.
//! The HTTP header follows the IETF Idempotency-Key draft, where the value is a
//! structured-field string (`"abc"`); a bare token (`abc`) is accepted too.

use std::fmt;

use sha2::{Digest, Sha256};

/// The longest key accepted, in characters (which are bytes: keys are ASCII).
pub const MAX_KEY_LEN: usize = 255;

/// Why a key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The key is the empty string.
    #[error("the idempotency key is empty; send 1 to {MAX_KEY_LEN} visible ASCII characters")]
    Empty,
    /// The key is longer than [`MAX_KEY_LEN`].
    #[error("the idempotency key is {0} characters long; the limit is {MAX_KEY_LEN}")]
    TooLong(usize),
    /// The key holds a byte outside 0x21–0x7E (a space, a control character, non-ASCII).
    #[error(
        "the idempotency key has a character outside visible ASCII (0x21-0x7E) at position {position}; spaces, control characters and non-ASCII are not allowed"
    )]
    InvalidCharacter {
        /// Zero-based byte offset of the first offending byte.
        position: usize,
    },
    /// A quoted header value whose quoting is broken (an unfinished escape).
    #[error(
        "the Idempotency-Key header is a quoted string with a broken escape; use \\\" and \\\\ only"
    )]
    BadQuoting,
}

/// A validated idempotency key. Holds the raw key only for as long as a request lives.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Validates a raw key (already unquoted).
    pub fn parse(raw: &str) -> Result<Self, KeyError> {
        if raw.is_empty() {
            return Err(KeyError::Empty);
        }
        if let Some(position) = raw.bytes().position(|b| !(0x21..=0x7e).contains(&b)) {
            return Err(KeyError::InvalidCharacter { position });
        }
        if raw.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong(raw.len()));
        }
        Ok(Self(raw.to_owned()))
    }

    /// Parses the value of an `Idempotency-Key` header.
    ///
    /// A value that starts and ends with `"` is a structured-field string (RFC 8941 §3.3.3)
    /// and is unquoted first (`\"` and `\\` are its only escapes); any other value is taken
    /// as the key itself.
    pub fn from_header(value: &[u8]) -> Result<Self, KeyError> {
        let Ok(text) = std::str::from_utf8(value) else {
            let position = value.iter().position(|b| !b.is_ascii()).unwrap_or(0);
            return Err(KeyError::InvalidCharacter { position });
        };
        match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
            Some(inner) => Self::parse(&unquote(inner)?),
            None => Self::parse(text),
        }
    }

    /// The raw key.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The SHA-256 of the raw key: what the database stores and indexes.
    pub fn hash(&self) -> KeyHash {
        KeyHash(Sha256::digest(self.0.as_bytes()).into())
    }
}

impl fmt::Debug for IdempotencyKey {
    // Keys may carry business identifiers; keep them out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey({})", self.hash())
    }
}

fn unquote(inner: &str) -> Result<String, KeyError> {
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('"' | '\\')) => out.push(e),
                _ => return Err(KeyError::BadQuoting),
            },
            '"' => return Err(KeyError::BadQuoting),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// The SHA-256 of an idempotency key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyHash(pub [u8; 32]);

impl KeyHash {
    /// The hash's bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The key of step `step` of the agent run under this key: the job of a later model
    /// call of the run is stored under it, so the unique key index keeps one job per step.
    /// Its input holds a NUL byte, which no raw key has, so it is no key's own hash.
    pub fn step(&self, step: u32) -> KeyHash {
        let mut hasher = Sha256::new();
        hasher.update(b"onejob run step\0");
        hasher.update(self.0);
        hasher.update(step.to_be_bytes());
        KeyHash(hasher.finalize().into())
    }
}

impl fmt::Display for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyHash({self})")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_step_of_a_run_has_a_key_of_its_own() {
        let run = IdempotencyKey::parse("run-1").unwrap().hash();
        assert_ne!(run.step(2), run.step(3));
        assert_ne!(run.step(2), run);
        assert_eq!(run.step(2), run.step(2));
        let other = IdempotencyKey::parse("run-2").unwrap().hash();
        assert_ne!(run.step(2), other.step(2));
    }

    use super::*;

    #[test]
    fn accepts_visible_ascii_up_to_the_limit() {
        assert!(IdempotencyKey::parse("settlement:42:close").is_ok());
        assert!(IdempotencyKey::parse("!").is_ok());
        assert!(IdempotencyKey::parse("~").is_ok());
        assert!(IdempotencyKey::parse(&"k".repeat(255)).is_ok());
    }

    #[test]
    fn refuses_empty_long_and_invisible_keys() {
        assert_eq!(IdempotencyKey::parse(""), Err(KeyError::Empty));
        assert_eq!(
            IdempotencyKey::parse(&"k".repeat(256)),
            Err(KeyError::TooLong(256))
        );
        assert_eq!(
            IdempotencyKey::parse("a b"),
            Err(KeyError::InvalidCharacter { position: 1 })
        );
        assert_eq!(
            IdempotencyKey::parse("a\tb"),
            Err(KeyError::InvalidCharacter { position: 1 })
        );
        assert_eq!(
            IdempotencyKey::parse("\u{7f}"),
            Err(KeyError::InvalidCharacter { position: 0 })
        );
        assert_eq!(
            IdempotencyKey::parse("ключ"),
            Err(KeyError::InvalidCharacter { position: 0 })
        );
    }

    #[test]
    fn header_values_may_be_structured_field_strings() {
        let bare = IdempotencyKey::from_header(b"abc").unwrap();
        let quoted = IdempotencyKey::from_header(b"\"abc\"").unwrap();
        assert_eq!(bare, quoted);
        assert_eq!(
            IdempotencyKey::from_header(br#""a\"b""#).unwrap().as_str(),
            "a\"b"
        );
        assert_eq!(
            IdempotencyKey::from_header(br#""a\b""#),
            Err(KeyError::BadQuoting)
        );
        assert_eq!(IdempotencyKey::from_header(b"\"\""), Err(KeyError::Empty));
        assert!(IdempotencyKey::from_header(&[0xff]).is_err());
    }

    #[test]
    fn hash_is_sha256_of_the_raw_key() {
        let key = IdempotencyKey::parse("abc").unwrap();
        assert_eq!(
            key.hash().to_string(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(!format!("{key:?}").contains("abc"));
    }
}
