//! The side-effect log: every submit that reached the fake provider, counted the moment it is
//! received (before any delay or hang), and keyed by the hash of its input.
//!
//! An idempotent replay (a submit whose `Idempotency-Key` the endpoint has already seen) is
//! not a side effect: it increments [`Submissions::idempotent_replays`] and nothing else.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The counters and records of everything submitted, as served by `GET /_fake/submissions`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Submissions {
    /// Submits received that were not idempotent replays (side effects).
    pub total: u64,
    /// Side effects per input: the key is [`input_hash`] of the request's input.
    pub by_input: BTreeMap<String, u64>,
    /// Submits answered from the upstream idempotency cache instead of running again.
    pub idempotent_replays: u64,
    /// Cancel requests received for known tasks.
    pub cancels: u64,
    /// One record per side effect, oldest first (`requests.len() == total`).
    pub requests: Vec<SubmissionRecord>,
}

/// One side effect: a submit the fake provider received and ran.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SubmissionRecord {
    /// `"chat"`, `"tasks"`, `"embeddings"`, `"responses"`, `"images"` or `"messages"`.
    pub endpoint: String,
    /// [`input_hash`] of `input`.
    pub input_hash: String,
    /// Chat: the request's `messages`; tasks: the whole request body.
    pub input: Value,
    /// The whole request body as received (both endpoints), so a test can see every field
    /// that reached the upstream (`model`, `tools`, `stream`, …). Absent from documents
    /// written before it existed: it then reads as `null`.
    #[serde(default)]
    pub request: Value,
    /// The request body's text exactly as received (chat), so a test can see the key order
    /// and number spelling that reached the upstream. Absent from older documents.
    #[serde(default)]
    pub body_text: Option<String>,
    /// The id the fake gave the request in its `x-request-id` answer header (chat).
    #[serde(default)]
    pub request_id: Option<String>,
    /// The `Idempotency-Key` header, if the request had one.
    pub idempotency_key: Option<String>,
    /// The task created for it (tasks endpoint only; none when a status was scripted).
    pub task_id: Option<String>,
}

impl Submissions {
    /// Counts one side effect.
    pub(crate) fn record(&mut self, record: SubmissionRecord) {
        self.total += 1;
        *self.by_input.entry(record.input_hash.clone()).or_default() += 1;
        self.requests.push(record);
    }

    /// Side effects for this input (0 when never submitted).
    pub fn count_for(&self, input: &Value) -> u64 {
        self.by_input.get(&input_hash(input)).copied().unwrap_or(0)
    }
}

/// The RFC 8785 canonical JSON text of a value.
pub(crate) fn canonical_text(input: &Value) -> String {
    String::from_utf8_lossy(&onejob_domain::fingerprint::canonical_bytes(input)).into_owned()
}

/// The SHA-256 (lower-case hex) of the RFC 8785 canonical bytes of an input: the key of
/// [`Submissions::by_input`]. Formatting and key order do not change it.
pub fn input_hash(input: &Value) -> String {
    hex::encode(Sha256::digest(onejob_domain::fingerprint::canonical_bytes(
        input,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn input_hash_ignores_key_order_and_formatting() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": [1, 2]}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":[1,2],"b":1}"#).unwrap();
        assert_eq!(input_hash(&a), input_hash(&b));
        assert_ne!(input_hash(&a), input_hash(&json!({"a": [2, 1], "b": 1})));
        assert_eq!(input_hash(&a).len(), 64);
    }

    #[test]
    fn record_counts_total_and_by_input() {
        let mut log = Submissions::default();
        let input = json!({"prompt": "x"});
        for _ in 0..2 {
            log.record(SubmissionRecord {
                endpoint: "tasks".into(),
                input_hash: input_hash(&input),
                input: input.clone(),
                request: input.clone(),
                body_text: None,
                request_id: None,
                idempotency_key: None,
                task_id: None,
            });
        }
        assert_eq!(log.total, 2);
        assert_eq!(log.count_for(&input), 2);
        assert_eq!(log.count_for(&json!({})), 0);
        assert_eq!(log.requests.len(), 2);
    }
}
