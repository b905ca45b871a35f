//! What a request to the fake provider does: [`Rule`]s, the [`Behaviour`] they script, the
//! [`Outcome`] of the finished work, and the `RuleBook` that picks the behaviour of each
//! request.
//!
//! Rules are tried in the order they were added. The first whose `matches` is absent or is a
//! substring of the request's canonical input (RFC 8785 JSON), and whose `times` is not used
//! up, decides; a request no rule matches gets [`Behaviour::default`] (answer at once,
//! succeed).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The fields a rule document may contain; anything else is refused as a likely typo.
const RULE_FIELDS: &[&str] = &[
    "matches",
    "times",
    "ack_delay_ms",
    "hang_before_ack",
    "run_ms",
    "hang_after_ack",
    "outcome",
    "output",
    "http_status",
    "break_stream_after",
    "retry_after",
    "reasoning",
];

/// One scripted behaviour and the requests it applies to.
#[derive(Clone, Debug, Serialize, Deserialize, Default, PartialEq)]
pub struct Rule {
    /// Applies only to requests whose canonical input contains this substring; `None` applies
    /// to every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matches: Option<String>,
    /// Applies to at most this many requests, then falls through to later rules; `None` is
    /// unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u32>,
    /// What a matching request does.
    #[serde(flatten)]
    pub behaviour: Behaviour,
}

/// What one request does: its latency, whether and where it hangs, and how it ends.
#[derive(Clone, Debug, Serialize, Deserialize, Default, PartialEq)]
#[serde(default)]
pub struct Behaviour {
    /// Delay before answering the submit (tasks), or before the acknowledgement (chat: a
    /// stream's first chunk; part of a non-streamed answer's latency).
    pub ack_delay_ms: u64,
    /// The submit is received (and counted) but never answered. A task submitted this way
    /// still exists and runs its course: a caller can find it by its `Idempotency-Key`.
    pub hang_before_ack: bool,
    /// Tasks: time from the acknowledgement until the task finishes. Chat: added latency,
    /// spread evenly over a stream's content chunks.
    pub run_ms: u64,
    /// Tasks: acknowledged, then the status stays `running` forever. Chat: never answers;
    /// a stream sends its role chunk and then nothing until the server stops.
    pub hang_after_ack: bool,
    /// What the finished work looks like.
    pub outcome: Outcome,
    /// The exact output of the finished work. It replaces the output every outcome but
    /// [`Outcome::Fail`] would produce: a task's result, a chat answer's content (or a tool
    /// call's arguments) as JSON text, and at the endpoints beyond chat the whole answer (a
    /// message, a response, an embeddings list, an images response).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Answer the submit with this HTTP status and a JSON error body instead of running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// Chat only: the answer dies mid-way, like an upstream that crashes while it streams. A
    /// streamed answer sends its role chunk and this many content chunks, then the
    /// connection closes without the finish chunk and without `data: [DONE]`; a non-streamed
    /// answer sends its 200 headers, then the connection closes without a body. Replays
    /// under the same `Idempotency-Key` break the same way. Ignored by the tasks endpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub break_stream_after: Option<u32>,
    /// With `http_status`: sent as the answer's `Retry-After` header, in seconds (a `429`'s
    /// wait, as a rate-limited upstream says it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
    /// Chat only: what the model "thought" before answering, as reasoning models send it:
    /// the message's `reasoning_content`, streamed word by word before the content.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
}

/// How the finished work turns out.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The work succeeds with the expected output.
    #[default]
    Succeed,
    /// The work fails (chat: HTTP 400; tasks: status `failed`).
    Fail,
    /// The work succeeds but the artifact is empty (`{"text": ""}`, `{"images": []}`).
    MissingArtifact,
    /// The work succeeds but the output uses other key names (`answer`, `image_urls`).
    DriftedKeys,
    /// The work succeeds but its output is not valid JSON (`not json {`).
    Malformed,
}

/// Why a rule document was refused.
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    /// The document is not a valid rule (wrong type, unknown outcome, …).
    #[error("not a valid rule: {0}")]
    Invalid(#[from] serde_json::Error),
    /// The document is not a JSON object.
    #[error("a rule must be a JSON object")]
    NotAnObject,
    /// The document has a field no rule has.
    #[error("unknown rule field `{0}` (known: {known})", known = RULE_FIELDS.join(", "))]
    UnknownField(String),
    /// `http_status` is not an HTTP status code.
    #[error("http_status {0} is not an HTTP status code (100-999)")]
    BadStatus(u16),
}

impl Rule {
    /// Parses and checks a rule document, refusing unknown fields and impossible statuses.
    pub fn from_json(value: Value) -> Result<Rule, RuleError> {
        let Value::Object(map) = &value else {
            return Err(RuleError::NotAnObject);
        };
        if let Some(unknown) = map.keys().find(|k| !RULE_FIELDS.contains(&k.as_str())) {
            return Err(RuleError::UnknownField(unknown.clone()));
        }
        let rule: Rule = serde_json::from_value(value)?;
        rule.check()?;
        Ok(rule)
    }

    /// Parses a rule from JSON text (as given on the command line).
    pub fn from_json_str(text: &str) -> Result<Rule, RuleError> {
        Rule::from_json(serde_json::from_str(text)?)
    }

    /// Checks the values serde cannot: `http_status` must be a status code.
    pub fn check(&self) -> Result<(), RuleError> {
        match self.behaviour.http_status {
            Some(status) if axum::http::StatusCode::from_u16(status).is_err() => {
                Err(RuleError::BadStatus(status))
            }
            _ => Ok(()),
        }
    }

    fn applies_to(&self, canonical_input: &str) -> bool {
        self.matches
            .as_deref()
            .is_none_or(|needle| canonical_input.contains(needle))
    }
}

/// The rules in force, each with how often it has been used.
#[derive(Debug, Default)]
pub(crate) struct RuleBook {
    slots: Vec<(Rule, u32)>,
}

impl RuleBook {
    /// Appends a rule after the existing ones.
    pub(crate) fn add(&mut self, rule: Rule) {
        self.slots.push((rule, 0));
    }

    /// Removes every rule.
    pub(crate) fn clear(&mut self) {
        self.slots.clear();
    }

    /// Picks the behaviour of a request with this canonical input, using up one of the
    /// chosen rule's `times`.
    pub(crate) fn pick(&mut self, canonical_input: &str) -> Behaviour {
        for (rule, used) in &mut self.slots {
            let exhausted = rule.times.is_some_and(|times| *used >= times);
            if !exhausted && rule.applies_to(canonical_input) {
                *used += 1;
                return rule.behaviour.clone();
            }
        }
        Behaviour::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(value: Value) -> Rule {
        Rule::from_json(value).expect("valid rule")
    }

    #[test]
    fn a_rule_document_flattens_its_behaviour() {
        let parsed =
            rule(json!({"matches": "fox", "times": 2, "run_ms": 5, "outcome": "drifted_keys"}));
        assert_eq!(parsed.matches.as_deref(), Some("fox"));
        assert_eq!(parsed.times, Some(2));
        assert_eq!(parsed.behaviour.run_ms, 5);
        assert_eq!(parsed.behaviour.outcome, Outcome::DriftedKeys);
        assert!(!parsed.behaviour.hang_after_ack);
        assert_eq!(parsed.behaviour.break_stream_after, None);
        let breaking = rule(json!({"break_stream_after": 3}));
        assert_eq!(breaking.behaviour.break_stream_after, Some(3));
    }

    #[test]
    fn unknown_fields_and_impossible_statuses_are_refused() {
        assert!(matches!(
            Rule::from_json(json!({"hang_befor_ack": true})),
            Err(RuleError::UnknownField(f)) if f == "hang_befor_ack"
        ));
        assert!(matches!(
            Rule::from_json(json!({"http_status": 42})),
            Err(RuleError::BadStatus(42))
        ));
        assert!(matches!(
            Rule::from_json(json!([])),
            Err(RuleError::NotAnObject)
        ));
        assert!(matches!(
            Rule::from_json(json!({"outcome": "explode"})),
            Err(RuleError::Invalid(_))
        ));
    }

    #[test]
    fn rule_fields_name_every_field_of_a_rule() {
        let full = Rule {
            matches: Some("x".into()),
            times: Some(1),
            behaviour: Behaviour {
                output: Some(json!({})),
                http_status: Some(500),
                break_stream_after: Some(1),
                retry_after: Some(1),
                reasoning: Some("hm".into()),
                ..Behaviour::default()
            },
        };
        let Value::Object(document) = serde_json::to_value(&full).unwrap() else {
            panic!("a rule serializes to an object");
        };
        let mut serialized: Vec<&str> = document.keys().map(String::as_str).collect();
        let mut known = RULE_FIELDS.to_vec();
        serialized.sort_unstable();
        known.sort_unstable();
        assert_eq!(serialized, known);
    }

    #[test]
    fn the_first_matching_rule_with_uses_left_decides() {
        let mut book = RuleBook::default();
        book.add(rule(json!({"matches": "fox", "times": 1, "run_ms": 1})));
        book.add(rule(json!({"matches": "fox", "run_ms": 2})));
        book.add(rule(json!({"run_ms": 3})));
        assert_eq!(book.pick("a red fox").run_ms, 1);
        assert_eq!(book.pick("a red fox").run_ms, 2);
        assert_eq!(book.pick("a red fox").run_ms, 2);
        assert_eq!(book.pick("a hen").run_ms, 3);
        book.clear();
        assert_eq!(book.pick("a red fox"), Behaviour::default());
    }

    #[test]
    fn zero_times_never_applies() {
        let mut book = RuleBook::default();
        book.add(rule(json!({"times": 0, "outcome": "fail"})));
        assert_eq!(book.pick("anything").outcome, Outcome::Succeed);
    }
}
