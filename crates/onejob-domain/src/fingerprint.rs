//! The fingerprint: what binds an idempotency key to one intent.
//!
//! It is the SHA-256 of the RFC 8785 (JCS) canonical JSON of `{"kind": …, "params": …}`.
//! Canonicalisation sorts object keys (by UTF-16 code units) and prints numbers and strings
//! in one fixed way, so formatting and key order never change a fingerprint while any change
//! of a value does. A kind may list the parameters that carry intent; only those are hashed.
//!
//! [`changed_paths`] explains a mismatch: the JSON Pointers of the parameters that differ,
//! never their values.

use std::fmt;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// SHA-256 of the canonical `{"kind", "params"}` of a job.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// Computes the fingerprint of `params` for `kind`.
    ///
    /// With `intent_fields`, only those top-level parameters take part (absent ones are simply
    /// absent); without, all of them do. Parameters should have passed
    /// [`crate::params::ParamsLimits::check`] first, which refuses the integers that RFC 8785
    /// could not tell apart.
    pub fn of(kind: &str, params: &Value, intent_fields: Option<&[String]>) -> Self {
        let restricted = restrict(params, intent_fields);
        let mut document = Map::new();
        document.insert("kind".into(), Value::String(kind.to_owned()));
        document.insert("params".into(), restricted.into_owned());
        let canonical = canonical_bytes(&Value::Object(document));
        Fingerprint(Sha256::digest(&canonical).into())
    }

    /// The fingerprint's bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Rebuilds a fingerprint from stored bytes; `None` unless exactly 32 bytes.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Fingerprint)
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

/// The RFC 8785 canonical serialisation of a JSON value.
pub fn canonical_bytes(value: &Value) -> Vec<u8> {
    // Serialising a `serde_json::Value` cannot fail: it holds no non-finite numbers and all
    // its keys are strings.
    serde_json_canonicalizer::to_vec(value).expect("a serde_json::Value always canonicalises")
}

fn restrict<'a>(
    params: &'a Value,
    intent_fields: Option<&[String]>,
) -> std::borrow::Cow<'a, Value> {
    match (params, intent_fields) {
        (Value::Object(map), Some(fields)) => std::borrow::Cow::Owned(Value::Object(
            map.iter()
                .filter(|(k, _)| fields.iter().any(|f| f == *k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )),
        _ => std::borrow::Cow::Borrowed(params),
    }
}

/// The JSON Pointers (RFC 6901) of the intent-bearing parameters that differ between
/// `stored` and `submitted`, sorted. Only paths are returned, never values.
///
/// Objects are compared key by key and arrays of equal length element by element; anything
/// else that differs in canonical form is reported at its own path.
pub fn changed_paths(
    stored: &Value,
    submitted: &Value,
    intent_fields: Option<&[String]>,
) -> Vec<String> {
    let mut out = Vec::new();
    diff(
        &restrict(stored, intent_fields),
        &restrict(submitted, intent_fields),
        &mut String::new(),
        &mut out,
    );
    out.sort();
    out
}

fn diff(a: &Value, b: &Value, path: &mut String, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let len = path.len();
                path.push('/');
                path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                match (x.get(key), y.get(key)) {
                    (Some(va), Some(vb)) => diff(va, vb, path, out),
                    _ => out.push(path.clone()),
                }
                path.truncate(len);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                diff(va, vb, path, out);
                path.truncate(len);
            }
        }
        _ => {
            if canonical_bytes(a) != canonical_bytes(b) {
                out.push(if path.is_empty() {
                    "/".to_owned()
                } else {
                    path.clone()
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn fp(kind: &str, params: &Value) -> Fingerprint {
        Fingerprint::of(kind, params, None)
    }

    #[test]
    fn formatting_and_key_order_do_not_matter() {
        let a: Value =
            serde_json::from_str(r#"{"prompt":"a fox","n":1,"opts":{"x":1,"y":[1,2]}}"#).unwrap();
        let b: Value = serde_json::from_str(
            "{ \"opts\" : { \"y\" : [ 1 , 2 ] , \"x\" : 1.0 } ,\n \"n\": 1e0, \"prompt\": \"a fox\" }",
        )
        .unwrap();
        assert_eq!(fp("image.generate", &a), fp("image.generate", &b));
    }

    #[test]
    fn one_more_space_inside_a_string_is_another_intent() {
        assert_ne!(
            fp("chat", &json!({"prompt": "a fox"})),
            fp("chat", &json!({"prompt": "a  fox"}))
        );
    }

    #[test]
    fn the_kind_is_part_of_the_intent() {
        let p = json!({"prompt": "a fox"});
        assert_ne!(fp("chat", &p), fp("image", &p));
    }

    #[test]
    fn only_intent_fields_count_when_listed() {
        let fields = vec!["prompt".to_owned()];
        let a = json!({"prompt": "a fox", "trace_id": "1"});
        let b = json!({"prompt": "a fox", "trace_id": "2"});
        let c = json!({"prompt": "a cat", "trace_id": "1"});
        assert_eq!(
            Fingerprint::of("k", &a, Some(&fields)),
            Fingerprint::of("k", &b, Some(&fields))
        );
        assert_ne!(
            Fingerprint::of("k", &a, Some(&fields)),
            Fingerprint::of("k", &c, Some(&fields))
        );
        assert_ne!(fp("k", &a), fp("k", &b));
    }

    #[test]
    fn fingerprint_is_sha256_of_the_canonical_document() {
        let params = json!({"b": 2, "a": "x"});
        let expected = Sha256::digest(br#"{"kind":"k","params":{"a":"x","b":2}}"#);
        assert_eq!(fp("k", &params).0, <[u8; 32]>::from(expected));
    }

    /// The example of RFC 8785 §3.2.2 (its input and its exact canonical output).
    #[test]
    fn rfc8785_example_canonicalises_as_the_rfc_says() {
        let input = r#"{
  "numbers": [333333333.33333329, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}"#;
        let value: Value = serde_json::from_str(input).unwrap();
        let expected = "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\"string\":\"€$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}";
        assert_eq!(
            String::from_utf8(canonical_bytes(&value)).unwrap(),
            expected
        );
    }

    /// RFC 8785 §3.2.3: keys sort by their UTF-16 code units, not by UTF-8 bytes.
    #[test]
    fn rfc8785_key_order_follows_utf16() {
        let input = r#"{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}"#;
        let value: Value = serde_json::from_str(input).unwrap();
        let canonical = String::from_utf8(canonical_bytes(&value)).unwrap();
        let order: Vec<&str> = [
            "Carriage Return",
            "One",
            "Control",
            "Latin Small Letter O With Diaeresis",
            "Euro Sign",
            "Emoji: Grinning Face",
            "Hebrew Letter Dalet With Dagesh",
        ]
        .into_iter()
        .collect();
        let positions: Vec<usize> = order.iter().map(|v| canonical.find(v).unwrap()).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{canonical}");
    }

    /// RFC 8785 Appendix B: IEEE 754 doubles and their canonical text.
    #[test]
    fn rfc8785_number_samples() {
        let samples: &[(u64, &str)] = &[
            (0x0000000000000000, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ];
        for (bits, text) in samples {
            let n = serde_json::Number::from_f64(f64::from_bits(*bits)).unwrap();
            let got = String::from_utf8(canonical_bytes(&Value::Number(n))).unwrap();
            assert_eq!(&got, text, "bits {bits:#x}");
        }
    }

    #[test]
    fn changed_paths_name_paths_not_values() {
        let old = json!({"prompt": "a fox", "n": 1, "opts": {"size": "1024", "seed": 7}, "tags": ["a", "b"]});
        let new = json!({"prompt": "a  fox", "n": 1.0, "opts": {"size": "512"}, "tags": ["a", "c"], "extra/x": true});
        assert_eq!(
            changed_paths(&old, &new, None),
            vec![
                "/extra~1x",
                "/opts/seed",
                "/opts/size",
                "/prompt",
                "/tags/1"
            ]
        );
        assert!(changed_paths(&old, &old, None).is_empty());
        let fields = vec!["n".to_owned()];
        assert!(changed_paths(&old, &new, Some(&fields)).is_empty());
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-(1i64 << 53)..(1i64 << 53)).prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            "\\PC{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map("[a-z\\PC]{0,6}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Serialises with object keys in reverse order and generous whitespace.
    fn reformat(value: &Value) -> String {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.reverse();
                let body: Vec<String> = entries
                    .into_iter()
                    .map(|(k, v)| {
                        format!(
                            "\n  {} :  {}",
                            serde_json::to_string(k).unwrap(),
                            reformat(v)
                        )
                    })
                    .collect();
                format!("{{ {} \n}}", body.join(" ,"))
            }
            Value::Array(items) => {
                let body: Vec<String> = items.iter().map(reformat).collect();
                format!("[ {} ]", body.join(" , "))
            }
            other => serde_json::to_string(other).unwrap(),
        }
    }

    /// JSON Pointers of every scalar and every empty container in `v`.
    fn leaves(v: &Value, path: &mut String, out: &mut Vec<String>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, x) in m {
                    let len = path.len();
                    path.push('/');
                    path.push_str(&k.replace('~', "~0").replace('/', "~1"));
                    leaves(x, path, out);
                    path.truncate(len);
                }
            }
            Value::Array(a) if !a.is_empty() => {
                for (i, x) in a.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("/{i}"));
                    leaves(x, path, out);
                    path.truncate(len);
                }
            }
            _ => out.push(path.clone()),
        }
    }

    /// Changes a leaf's value in the smallest way that keeps it valid JSON.
    fn mutate(v: &mut Value) {
        *v = match v.take() {
            Value::Null => Value::Bool(false),
            Value::Bool(b) => Value::Bool(!b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => json!(i + 1),
                None => {
                    let f = n.as_f64().unwrap();
                    json!(if f == 0.0 {
                        1.0
                    } else if f.abs() > 1.0 {
                        f / 2.0
                    } else {
                        f * 2.0
                    })
                }
            },
            Value::String(s) => Value::String(format!("{s} ")),
            Value::Array(_) => json!([null]),
            Value::Object(_) => json!({"k": null}),
        }
    }

    proptest! {
        #[test]
        fn prop_key_order_and_formatting_never_change_it(v in json_value()) {
            let text = reformat(&v);
            let reparsed: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(fp("k", &v), fp("k", &reparsed));
        }

        #[test]
        fn prop_any_value_change_changes_it(v in json_value(), pick in any::<prop::sample::Index>()) {
            let original = json!({"p": v});
            let mut targets = Vec::new();
            leaves(&original, &mut String::new(), &mut targets);
            let target = &targets[pick.index(targets.len())];
            let mut changed = original.clone();
            mutate(changed.pointer_mut(target).unwrap());
            prop_assert_ne!(fp("k", &original), fp("k", &changed));
            prop_assert!(!changed_paths(&original, &changed, None).is_empty());
        }

        #[test]
        fn prop_equal_fingerprints_mean_no_changed_paths(a in json_value(), b in json_value()) {
            let (pa, pb) = (json!({"x": a}), json!({"x": b}));
            let same = fp("k", &pa) == fp("k", &pb);
            prop_assert_eq!(same, changed_paths(&pa, &pb, None).is_empty());
        }
    }
}
