//! A chat request as the caller sent it, and the copy forwarded upstream.
//!
//! The job's params are a parsed `Value` (whose objects keep their keys sorted, as does
//! PostgreSQL's `jsonb`): right for the fingerprint, wrong for the upstream, where key order
//! carries meaning (OpenAI's structured outputs emit keys in the schema's order, tools'
//! parameters likewise) and a number is as the caller spelled it. So a gateway job keeps
//! the request's bytes as sent, and [`forward`] writes the upstream's body from them: the
//! caller's top-level members in their order, each value byte for byte, with only the
//! members the provider sets (`model`, and where it must, `max_tokens`, `stream`, …)
//! replaced in place or appended, and the caller's delivery fields left out.

use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::{Value, value::RawValue};

/// The top-level members of a JSON object, in the order sent, each value as its raw text.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de> serde::Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct InOrder;

        impl<'de> Visitor<'de> for InOrder {
            type Value = Members<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    members.push((key, map.next_value::<&'de RawValue>()?));
                }
                Ok(Members(members))
            }
        }

        deserializer.deserialize_map(InOrder)
    }
}

/// The body to send upstream for the caller's request `sent` (a JSON object's text): its
/// members in the order sent and as sent, less those named in `drop`, with each of `set`
/// replacing the member of its name where the caller sent one and appended after them
/// otherwise.
pub fn forward(
    sent: &str,
    set: &[(&str, Value)],
    drop: &[&str],
) -> Result<Vec<u8>, serde_json::Error> {
    let Members(members) = serde_json::from_str(sent)?;
    let mut body = Vec::with_capacity(sent.len() + 64);
    body.push(b'{');
    let mut first = true;
    let mut member =
        |body: &mut Vec<u8>, key: &str, value: &[u8]| -> Result<(), serde_json::Error> {
            if !first {
                body.push(b',');
            }
            first = false;
            serde_json::to_writer(&mut *body, key)?;
            body.push(b':');
            body.extend_from_slice(value);
            Ok(())
        };
    let mut replaced = Vec::new();
    for (key, value) in &members {
        if drop.contains(&key.as_str()) {
            continue;
        }
        match set.iter().find(|(name, _)| name == key) {
            Some((name, replacement)) => {
                member(&mut body, key, &serde_json::to_vec(replacement)?)?;
                replaced.push(*name);
            }
            None => member(&mut body, key, value.get().as_bytes())?,
        }
    }
    for (name, value) in set {
        if !replaced.contains(name) {
            member(&mut body, name, &serde_json::to_vec(value)?)?;
        }
    }
    body.push(b'}');
    Ok(body)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_callers_order_and_spelling_survive_with_the_providers_members() {
        let sent = r#"{"model": "fast", "response_format": {"type": "json_schema",
            "json_schema": {"schema": {"properties": {"reasoning": {"type": "string"},
            "final_answer": {"type": "string"}}}}}, "seed": 1.0e2, "temperature": 0.70,
            "stream": true, "messages": [{"role": "user", "content": "hi"}]}"#;
        let body = forward(
            sent,
            &[
                ("model", json!("gpt-x")),
                ("max_tokens", json!(64)),
                ("stream", json!(false)),
            ],
            &["stream", "stream_options"],
        )
        .unwrap();
        let text = String::from_utf8(body).unwrap();
        assert!(
            text.starts_with(r#"{"model":"gpt-x","response_format":"#),
            "{text}"
        );
        let reasoning = text.find("reasoning").unwrap();
        assert!(reasoning < text.find("final_answer").unwrap(), "{text}");
        assert!(
            text.contains(r#""seed":1.0e2,"temperature":0.70,"#),
            "{text}"
        );
        assert!(
            !text.contains("true"),
            "the caller's delivery is dropped: {text}"
        );
        assert!(
            text.ends_with(r#""max_tokens":64,"stream":false}"#),
            "{text}"
        );
        let parsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed["messages"][0]["content"], "hi");
    }

    #[test]
    fn only_an_object_is_forwarded() {
        assert!(forward("[1]", &[], &[]).is_err());
        assert_eq!(
            forward("{}", &[("model", json!("m"))], &[]).unwrap(),
            br#"{"model":"m"}"#
        );
    }
}
