//! The explicit limits on a job's parameters, checked before anything is stored.
//!
//! * Nesting depth is capped ([`ParamsLimits::max_depth`], 32 by default).
//! * Numbers must lie within ±2^53, where every integer is exactly an IEEE 754 double, as
//!   I-JSON (RFC 7493) requires: RFC 8785 canonicalises every number as a double, so two
//!   larger integers could otherwise share one fingerprint (and be rounded on the way). This
//!   holds however the number is spelled: `10**30` arrives as an integer too large for 64
//!   bits, which JSON parsers read as a double, and is refused like `9007199254740993`.
//!   Send big identifiers as strings.
//! * Strings and object keys must not contain U+0000, which PostgreSQL cannot store in JSON;
//!   refusing it on every store keeps the two stores answering alike.
//! * [`parse_json_strict`] refuses duplicate object keys, which different JSON parsers
//!   resolve differently (first wins, last wins): such a document names no single intent.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// The largest integer magnitude that survives a round trip through an IEEE 754 double.
pub const MAX_SAFE_INTEGER: u64 = 1 << 53;

/// Why parameters were refused. Every variant names the JSON Pointer where it happened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    /// Objects or arrays nested deeper than the limit.
    #[error("params nest deeper than {limit} levels at {path}")]
    TooDeep {
        /// JSON Pointer of the first value past the limit.
        path: String,
        /// The configured limit.
        limit: usize,
    },
    /// A number beyond ±2^53, where doubles no longer hold every integer exactly.
    #[error("the number at {path} is beyond ±2^53, where it would be rounded; send it as a string")]
    UnsafeInteger {
        /// JSON Pointer of the number.
        path: String,
    },
    /// A string or key containing U+0000.
    #[error("the string at {path} contains U+0000, which is not allowed")]
    NulCharacter {
        /// JSON Pointer of the string (or of the member whose key holds it).
        path: String,
    },
}

impl ParamsError {
    /// The JSON Pointer the error is about.
    pub fn path(&self) -> &str {
        match self {
            Self::TooDeep { path, .. }
            | Self::UnsafeInteger { path }
            | Self::NulCharacter { path } => path,
        }
    }
}

/// Limits applied to every job's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamsLimits {
    /// The deepest nesting of objects and arrays allowed (the params object itself is 1).
    pub max_depth: usize,
}

impl Default for ParamsLimits {
    fn default() -> Self {
        Self { max_depth: 32 }
    }
}

impl ParamsLimits {
    /// Checks `params` against the limits; the first problem found is returned.
    pub fn check(&self, params: &Value) -> Result<(), ParamsError> {
        self.walk(params, &mut String::new(), 0, Numbers::Exact)
    }

    /// Checks an upstream's answer against the limits a store needs (the nesting depth, no
    /// U+0000), not the number range: that range is for what callers send, whose params are
    /// fingerprinted (canonical JSON reads every number as a double). An answer is stored and
    /// replayed as it came, so a 64-bit id or seed it echoes is kept exactly.
    pub fn check_answer(&self, answer: &Value) -> Result<(), ParamsError> {
        self.walk(answer, &mut String::new(), 0, Numbers::Any)
    }

    fn walk(
        &self,
        value: &Value,
        path: &mut String,
        depth: usize,
        numbers: Numbers,
    ) -> Result<(), ParamsError> {
        let pointer = |p: &String| {
            if p.is_empty() {
                "/".to_owned()
            } else {
                p.clone()
            }
        };
        match value {
            Value::Object(_) | Value::Array(_) if depth >= self.max_depth => {
                Err(ParamsError::TooDeep {
                    path: pointer(path),
                    limit: self.max_depth,
                })
            }
            Value::Object(map) => {
                for (key, member) in map {
                    let len = path.len();
                    path.push('/');
                    path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                    if key.contains('\0') {
                        return Err(ParamsError::NulCharacter { path: path.clone() });
                    }
                    self.walk(member, path, depth + 1, numbers)?;
                    path.truncate(len);
                }
                Ok(())
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let len = path.len();
                    path.push('/');
                    path.push_str(&i.to_string());
                    self.walk(item, path, depth + 1, numbers)?;
                    path.truncate(len);
                }
                Ok(())
            }
            Value::Number(_) if numbers == Numbers::Any => Ok(()),
            Value::Number(n) => {
                let safe = match (n.as_u64(), n.as_i64(), n.as_f64()) {
                    (Some(u), _, _) => u <= MAX_SAFE_INTEGER,
                    (None, Some(i), _) => i.unsigned_abs() <= MAX_SAFE_INTEGER,
                    // A double: a fraction, or an integer too large for 64 bits (`1e30`,
                    // `10**30` spelled out), which the parser already had to round.
                    (None, None, Some(f)) => f.abs() <= MAX_SAFE_INTEGER as f64,
                    (None, None, None) => false,
                };
                if safe {
                    Ok(())
                } else {
                    Err(ParamsError::UnsafeInteger {
                        path: pointer(path),
                    })
                }
            }
            Value::String(s) if s.contains('\0') => Err(ParamsError::NulCharacter {
                path: pointer(path),
            }),
            Value::String(_) | Value::Bool(_) | Value::Null => Ok(()),
        }
    }
}

/// Which numbers a walk accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Numbers {
    /// Only those within ±2^53 (params).
    Exact,
    /// Any (answers).
    Any,
}

/// Parses JSON like `serde_json::from_slice`, but refuses an object with a repeated key.
pub fn parse_json_strict(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let StrictValue(value) = StrictValue::deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

struct StrictValue(Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = StrictValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::Bool(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::from(v)))
    }

    fn visit_u64<E>(self, v: u64) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::from(v)))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<StrictValue, E> {
        serde_json::Number::from_f64(v)
            .map(|n| StrictValue(Value::Number(n)))
            .ok_or_else(|| E::custom("numbers must be finite"))
    }

    fn visit_str<E>(self, v: &str) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::String(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::String(v)))
    }

    fn visit_unit<E>(self) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::Null))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<StrictValue, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(StrictValue(Value::Array(items)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StrictValue, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "duplicate object key {key:?}"
                )));
            }
            let StrictValue(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(StrictValue(Value::Object(object)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strict_parsing_refuses_duplicate_keys_anywhere() {
        assert_eq!(
            parse_json_strict(br#"{"a": [1, {"b": null}], "c": 1.5}"#).unwrap(),
            json!({"a": [1, {"b": null}], "c": 1.5})
        );
        let error = parse_json_strict(br#"{"a": {"b": 1, "b": 2}}"#).unwrap_err();
        assert!(
            error.to_string().contains("duplicate object key \"b\""),
            "{error}"
        );
        assert!(parse_json_strict(b"{} x").is_err());
        assert!(parse_json_strict(b"").is_err());
    }

    #[test]
    fn accepts_ordinary_params() {
        let limits = ParamsLimits::default();
        assert_eq!(
            limits.check(&json!({"prompt": "a fox", "n": 9007199254740992u64, "x": -1.5})),
            Ok(())
        );
    }

    #[test]
    fn refuses_deep_nesting_with_its_path() {
        let limits = ParamsLimits { max_depth: 3 };
        assert_eq!(limits.check(&json!({"a": {"b": 1}})), Ok(()));
        assert_eq!(limits.check(&json!({"a": {"b": [1]}})), Ok(()));
        assert_eq!(
            limits.check(&json!({"a": {"b": [[1]]}})),
            Err(ParamsError::TooDeep {
                path: "/a/b/0".into(),
                limit: 3
            })
        );
    }

    #[test]
    fn refuses_integers_a_double_cannot_hold() {
        let limits = ParamsLimits::default();
        assert_eq!(
            limits.check(&json!({"id": [9007199254740993u64]})),
            Err(ParamsError::UnsafeInteger {
                path: "/id/0".into()
            })
        );
        assert_eq!(
            limits.check(&json!({"id": -9007199254740993i64})),
            Err(ParamsError::UnsafeInteger { path: "/id".into() })
        );
    }

    #[test]
    fn an_answer_keeps_any_number_and_still_has_the_stores_limits() {
        let limits = ParamsLimits { max_depth: 3 };
        let answer = json!({"seed": 14249853862446563000u64, "id": -9007199254740993i64,
            "x": [1.5e30]});
        assert_eq!(limits.check_answer(&answer), Ok(()));
        assert!(limits.check(&answer).is_err(), "params keep the range");
        assert!(matches!(
            limits.check_answer(&json!({"a": {"b": {"c": [1]}}})),
            Err(ParamsError::TooDeep { .. })
        ));
        assert!(matches!(
            limits.check_answer(&json!({"text": "a\u{0}b"})),
            Err(ParamsError::NulCharacter { .. })
        ));
    }

    #[test]
    fn refuses_integers_beyond_64_bits_and_large_doubles() {
        let limits = ParamsLimits::default();
        // Python's `10**30`, and one more: both parse to the double 1e30.
        for text in [
            r#"{"seed": 1000000000000000000000000000000}"#,
            r#"{"seed": 1000000000000000000000000000001}"#,
            r#"{"seed": -1e30}"#,
            r#"{"x": [1.5e16]}"#,
        ] {
            let params = parse_json_strict(text.as_bytes()).unwrap();
            assert!(
                matches!(
                    limits.check(&params),
                    Err(ParamsError::UnsafeInteger { .. })
                ),
                "{text}"
            );
        }
        let fine =
            parse_json_strict(br#"{"t": 0.7, "big": 9007199254740992.0, "n": -2.5e-300}"#).unwrap();
        assert_eq!(limits.check(&fine), Ok(()));
    }

    #[test]
    fn refuses_nul_in_strings_and_keys() {
        let limits = ParamsLimits::default();
        assert_eq!(
            limits.check(&json!({"p": "a\u{0}b"})),
            Err(ParamsError::NulCharacter { path: "/p".into() })
        );
        assert_eq!(
            limits.check(&json!({"a\u{0}": 1})),
            Err(ParamsError::NulCharacter {
                path: "/a\u{0}".into()
            })
        );
    }
}
