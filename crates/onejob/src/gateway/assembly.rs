//! A streamed answer put together from its events, per endpoint: a chat completion from its
//! chunks (see [`super::completion::Assembler`]), an Anthropic message from its
//! `message_start … message_stop` events, an OpenAI response from its typed events (the
//! last, `response.completed`, carries the whole response).
//!
//! Each event's JSON is given as it came ([`Assembly::push`]); the assembly says when the
//! stream is over and what it added up to, or that it ended in an error. A live stream is
//! relayed through it ([`Assembly::relay`]): each event goes on to the attempt's callers but
//! the one that ends the stream, which the sink holds until the answer won.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{Endpoint, completion::Assembler, streams::StreamSink};

/// An answer being assembled from its stream.
#[derive(Debug)]
pub enum Assembly {
    /// A chat completion: over at `[DONE]`.
    Chat(Assembler),
    /// An Anthropic message: over at `message_stop`.
    Message(MessageAssembler),
    /// An OpenAI response: over at `response.completed` (or `response.incomplete`).
    Response,
}

/// Why a stream ended without an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StreamFailed(pub String);

impl Assembly {
    /// An empty assembly for a stream from `endpoint`.
    pub fn new(endpoint: Endpoint) -> Self {
        match endpoint {
            Endpoint::Messages => Assembly::Message(MessageAssembler::default()),
            Endpoint::Responses => Assembly::Response,
            _ => Assembly::Chat(Assembler::default()),
        }
    }

    /// Takes one event; the answer once this event ends the stream.
    pub fn push(&mut self, event: &Value) -> Result<Option<Value>, StreamFailed> {
        if let Some(error) = event.get("error").filter(|e| !e.is_null()) {
            return Err(StreamFailed(format!(
                "the upstream's stream ended with an error: {error}"
            )));
        }
        let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
        match self {
            Assembly::Chat(assembler) => {
                assembler.push(event);
                Ok(None)
            }
            Assembly::Message(message) => Ok(message.push(kind, event)),
            Assembly::Response => match kind {
                "response.completed" | "response.incomplete" => Ok(event.get("response").cloned()),
                "response.failed" | "error" => Err(StreamFailed(format!(
                    "the upstream's stream ended with an error: {event}"
                ))),
                _ => Ok(None),
            },
        }
    }

    /// Takes one event of a live stream and relays it to `sink`'s readers: the answer once
    /// this event ends the stream. That last event (`message_stop`, `response.completed`) is
    /// held by the sink, relayed only if the answer wins ([`StreamSink::hold`]); an error event
    /// is not relayed (the stream's end tells its readers); Anthropic's keep-alive `ping` is
    /// no part of the answer and is not relayed.
    pub fn relay(
        &mut self,
        event: Value,
        sink: &StreamSink,
    ) -> Result<Option<Value>, StreamFailed> {
        let over = self.push(&event)?;
        if over.is_some() {
            sink.hold(event);
        } else if event.get("type").and_then(Value::as_str) != Some("ping") {
            sink.push(event);
        }
        Ok(over)
    }

    /// The answer at the stream's `[DONE]` (chat's end); other streams end at an event of
    /// their own, so `[DONE]` before it means the answer is incomplete.
    pub fn done(self) -> Result<Value, StreamFailed> {
        match self {
            Assembly::Chat(assembler) => Ok(assembler.completion()),
            _ => Err(StreamFailed(
                "the stream sent [DONE] before its last event: the answer is incomplete".into(),
            )),
        }
    }
}

/// Adds up Anthropic's stream events into the `message` they stream: `message_start`'s
/// message, each content block from its start and its deltas (text, a tool call's input
/// JSON, thinking, its signature, citations), and `message_delta`'s stop reason and usage.
#[derive(Debug, Default)]
pub struct MessageAssembler {
    message: Map<String, Value>,
    blocks: BTreeMap<u64, Map<String, Value>>,
    inputs: BTreeMap<u64, String>,
}

impl MessageAssembler {
    fn push(&mut self, kind: &str, event: &Value) -> Option<Value> {
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind {
            "message_start" => {
                if let Some(message) = event.get("message").and_then(Value::as_object) {
                    self.message = message.clone();
                }
            }
            "content_block_start" => {
                if let Some(block) = event.get("content_block").and_then(Value::as_object) {
                    self.blocks.insert(index, block.clone());
                }
            }
            "content_block_delta" => {
                let delta = &event["delta"];
                let block = self.blocks.entry(index).or_default();
                let mut append = |field: &str, piece: &Value| {
                    let text = piece.as_str().unwrap_or_default();
                    let slot = block
                        .entry(field.to_owned())
                        .or_insert_with(|| Value::String(String::new()));
                    if let Value::String(existing) = slot {
                        existing.push_str(text);
                    } else {
                        *slot = Value::String(text.to_owned());
                    }
                };
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => append("text", &delta["text"]),
                    Some("thinking_delta") => append("thinking", &delta["thinking"]),
                    Some("signature_delta") => append("signature", &delta["signature"]),
                    Some("input_json_delta") => self
                        .inputs
                        .entry(index)
                        .or_default()
                        .push_str(delta["partial_json"].as_str().unwrap_or_default()),
                    Some("citations_delta") => {
                        let citations = block
                            .entry("citations")
                            .or_insert_with(|| Value::Array(Vec::new()));
                        if !citations.is_array() {
                            *citations = Value::Array(Vec::new());
                        }
                        if let Value::Array(list) = citations {
                            list.push(delta["citation"].clone());
                        }
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(json) = self.inputs.remove(&index) {
                    let input = if json.trim().is_empty() {
                        Value::Object(Map::new())
                    } else {
                        serde_json::from_str(&json).unwrap_or(Value::String(json))
                    };
                    self.blocks
                        .entry(index)
                        .or_default()
                        .insert("input".into(), input);
                }
            }
            "message_delta" => {
                if let Some(delta) = event.get("delta").and_then(Value::as_object) {
                    for (field, value) in delta {
                        self.message.insert(field.clone(), value.clone());
                    }
                }
                if let Some(usage) = event.get("usage").and_then(Value::as_object) {
                    let slot = self
                        .message
                        .entry("usage")
                        .or_insert_with(|| Value::Object(Map::new()));
                    if let Value::Object(total) = slot {
                        for (field, value) in usage {
                            if !value.is_null() {
                                total.insert(field.clone(), value.clone());
                            }
                        }
                    }
                }
            }
            "message_stop" => {
                let mut message = std::mem::take(&mut self.message);
                let content = std::mem::take(&mut self.blocks)
                    .into_values()
                    .map(Value::Object)
                    .collect();
                message.insert("content".into(), Value::Array(content));
                return Some(Value::Object(message));
            }
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_message_is_assembled_from_its_stream() {
        let message = json!({"id": "msg_1", "type": "message", "role": "assistant",
            "model": "m", "content": [{"type": "text", "text": "a red fox"},
            {"type": "tool_use", "id": "t", "name": "w", "input": {"city": "Oslo"}}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 3, "output_tokens": 2}});
        let mut assembly = Assembly::new(Endpoint::Messages);
        let mut answer = None;
        for event in onejob_domain::wire::message_events(&message) {
            answer = assembly.push(&event).unwrap();
        }
        assert_eq!(answer, Some(message));
    }

    #[test]
    fn a_replayed_message_assembles_back_to_itself_member_for_member() {
        let citation = json!({"type": "web_search_result_location", "url": "https://x",
            "title": "Foxes", "encrypted_index": "e", "cited_text": "red"});
        let message = json!({"id": "msg_2", "type": "message", "role": "assistant",
            "model": "m", "container": null, "content": [
                {"type": "thinking", "thinking": "Red, then.", "signature": "c2ln"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "a red fox", "citations": [citation]},
                {"type": "text", "text": "!", "citations": null},
                {"type": "tool_use", "id": "t", "name": "w", "input": {"city": "Oslo",
                    "days": [1, 2]}, "caller": {"type": "direct"}}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 3, "cache_creation_input_tokens": 1,
                "cache_read_input_tokens": 2, "output_tokens": 9,
                "server_tool_use": {"web_search_requests": 1}, "service_tier": "standard"}});
        let mut assembly = Assembly::new(Endpoint::Messages);
        let mut answer = None;
        for event in onejob_domain::wire::message_events(&message) {
            answer = assembly.push(&event).unwrap();
        }
        assert_eq!(answer, Some(message));
    }

    #[test]
    fn a_response_is_its_completed_event() {
        let response = json!({"id": "r", "status": "completed", "output": []});
        let mut assembly = Assembly::new(Endpoint::Responses);
        let events = onejob_domain::wire::response_events(&response);
        let (last, before) = events.split_last().unwrap();
        for event in before {
            assert_eq!(assembly.push(event).unwrap(), None);
        }
        assert_eq!(assembly.push(last).unwrap(), Some(response));
        let mut failed = Assembly::new(Endpoint::Responses);
        assert!(
            failed
                .push(&json!({"type": "error", "message": "overloaded"}))
                .is_err()
        );
    }
}
