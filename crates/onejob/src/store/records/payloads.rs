//! JSON as the store writes it: members set, U+0000 replaced (PostgreSQL cannot store it),
//! and a payload's size and hash for the event log.

use serde_json::{Value, json};

/// `object` (a JSON object) with `key` set to `value`.
pub fn with_member(object: &Value, key: &str, value: Value) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.insert(key.to_owned(), value);
    }
    object
}

/// `value` with every U+0000 in its strings and object keys replaced by U+FFFD.
///
/// PostgreSQL cannot store U+0000 in `jsonb` or `text`, and a provider's error body or an
/// operator's reason may carry one: written as is, a definite failure would fail to record
/// (and end unknown), and an operator's resolution would fail. Both stores write every error,
/// event detail and reason through this, so both keep the same text.
pub fn storable(value: &Value) -> std::borrow::Cow<'_, Value> {
    fn has_nul(value: &Value) -> bool {
        match value {
            Value::String(text) => text.contains('\0'),
            Value::Array(items) => items.iter().any(has_nul),
            Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
            _ => false,
        }
    }
    fn clean(value: &Value) -> Value {
        match value {
            Value::String(text) => Value::String(storable_text(text).into_owned()),
            Value::Array(items) => Value::Array(items.iter().map(clean).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (storable_text(k).into_owned(), clean(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    if has_nul(value) {
        std::borrow::Cow::Owned(clean(value))
    } else {
        std::borrow::Cow::Borrowed(value)
    }
}

/// `text` with every U+0000 replaced by U+FFFD (see [`storable`]).
pub fn storable_text(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') {
        std::borrow::Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// The size and SHA-256 of a payload's canonical JSON: what the event log keeps of a result
/// (never the result itself).
pub fn payload_digest(payload: &Value) -> Value {
    let bytes = onejob_domain::fingerprint::canonical_bytes(payload);
    json!({
        "size": bytes.len(),
        "sha256": hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes)),
    })
}
