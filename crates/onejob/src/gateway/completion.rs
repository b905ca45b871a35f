//! Chat completions and their streamed form: [`Assembler`] builds the `chat.completion` a
//! stream of `chat.completion.chunk`s adds up to (the job's result when the upstream
//! streamed), and [`chunks_of`] turns a stored completion back into chunks, for a caller
//! that asks for a stream after the job already finished.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// The members of a chunk that are not the completion's own: the chunk's `object`, its
/// `choices` (assembled one by one) and its `usage` (the last one sent).
const CHUNK_ONLY: [&str; 3] = ["object", "choices", "usage"];

/// One choice being assembled: its message from the deltas, and its other members
/// (`finish_reason`, `logprobs`, anything an upstream adds).
#[derive(Debug, Default)]
struct Choice {
    message: Map<String, Value>,
    tool_calls: BTreeMap<u64, Map<String, Value>>,
    members: Map<String, Value>,
}

/// Adds up `chat.completion.chunk`s into the `chat.completion` they stream, keeping every
/// field the upstream sent: the text of a delta's string members is joined (`content`,
/// `refusal`, `reasoning_content`, …), tool calls are joined by their index, `logprobs`
/// lists are appended chunk after chunk, and any other member keeps its last non-null value.
#[derive(Debug, Default)]
pub struct Assembler {
    head: Map<String, Value>,
    choices: BTreeMap<u64, Choice>,
    usage: Option<Value>,
}

/// Joins `piece` into `slot`: strings are appended, objects merged member by member,
/// arrays appended; a null piece changes nothing, anything else replaces.
fn join(slot: &mut Value, piece: &Value) {
    match (slot, piece) {
        (_, Value::Null) => {}
        (Value::String(text), Value::String(more)) => text.push_str(more),
        (Value::Object(members), Value::Object(more)) => {
            for (name, value) in more {
                join(members.entry(name.clone()).or_insert(Value::Null), value);
            }
        }
        (Value::Array(items), Value::Array(more)) => items.extend(more.iter().cloned()),
        (slot, piece) => *slot = piece.clone(),
    }
}

impl Assembler {
    /// Takes one chunk.
    pub fn push(&mut self, chunk: &Value) {
        let Some(chunk) = chunk.as_object() else {
            return;
        };
        for (field, value) in chunk {
            if CHUNK_ONLY.contains(&field.as_str()) || value.is_null() {
                continue;
            }
            // The head (`id`, `created`, `model`, …) is the same in every chunk: the first
            // one sent is kept.
            self.head
                .entry(field.clone())
                .or_insert_with(|| value.clone());
        }
        if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
            self.usage = Some(usage.clone());
        }
        for choice in chunk
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
            let slot = self.choices.entry(index).or_default();
            for (field, value) in choice.as_object().into_iter().flatten() {
                match field.as_str() {
                    "index" | "delta" => {}
                    // Each chunk's log probabilities are those of its own tokens.
                    "logprobs" => join(
                        slot.members.entry(field.clone()).or_insert(Value::Null),
                        value,
                    ),
                    _ if value.is_null() => {}
                    _ => {
                        slot.members.insert(field.clone(), value.clone());
                    }
                }
            }
            let Some(delta) = choice.get("delta").and_then(Value::as_object) else {
                continue;
            };
            for (field, value) in delta {
                match (field.as_str(), value) {
                    ("tool_calls", Value::Array(calls)) => {
                        for call in calls {
                            let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
                            let tool = slot.tool_calls.entry(index).or_default();
                            for (member, part) in call.as_object().into_iter().flatten() {
                                match member.as_str() {
                                    "index" => {}
                                    // Said once (some upstreams repeat them): not joined.
                                    "id" | "type" if !part.is_null() => {
                                        tool.insert(member.clone(), part.clone());
                                    }
                                    _ => join(
                                        tool.entry(member.clone()).or_insert(Value::Null),
                                        part,
                                    ),
                                }
                            }
                        }
                    }
                    // The role is said once; repeating it does not repeat the word.
                    ("role", Value::String(_)) => {
                        slot.message.insert(field.clone(), value.clone());
                    }
                    _ => join(
                        slot.message.entry(field.clone()).or_insert(Value::Null),
                        value,
                    ),
                }
            }
        }
    }

    /// The completion the chunks so far add up to.
    pub fn completion(&self) -> Value {
        let mut completion = self.head.clone();
        completion.insert("object".into(), json!("chat.completion"));
        let choices: Vec<Value> = self
            .choices
            .iter()
            .map(|(index, choice)| {
                let mut message = choice.message.clone();
                message.entry("role").or_insert_with(|| json!("assistant"));
                message.entry("content").or_insert(Value::Null);
                // OpenAI's message always says whether it refused.
                message.entry("refusal").or_insert(Value::Null);
                if !choice.tool_calls.is_empty() {
                    let calls: Vec<Value> = choice
                        .tool_calls
                        .values()
                        .map(|call| {
                            let mut call = call.clone();
                            call.entry("type").or_insert_with(|| json!("function"));
                            Value::Object(call)
                        })
                        .collect();
                    message.insert("tool_calls".into(), Value::Array(calls));
                }
                let mut assembled = Map::new();
                assembled.insert("index".into(), json!(index));
                assembled.insert("message".into(), Value::Object(message));
                assembled.insert("logprobs".into(), Value::Null);
                assembled.insert("finish_reason".into(), Value::Null);
                for (field, value) in &choice.members {
                    assembled.insert(field.clone(), value.clone());
                }
                Value::Object(assembled)
            })
            .collect();
        completion.insert("choices".into(), Value::Array(choices));
        if let Some(usage) = &self.usage {
            completion.insert("usage".into(), usage.clone());
        }
        Value::Object(completion)
    }
}

/// The chunks a stored `completion` streams as, giving all of it back: the role, then each
/// other member of each choice's message in its own chunk (`reasoning_content` before
/// `content`, as models think before they answer; the choice's `logprobs` ride with the
/// content), its tool calls, its finish reason, and with `include_usage` a last chunk with
/// the usage and no choices, every chunk before it carrying `"usage": null`, as OpenAI sends
/// them. Assembled again they are the completion.
pub fn chunks_of(completion: &Value, include_usage: bool) -> Vec<Value> {
    let chunk = |choices: Value| {
        let mut chunk = Map::new();
        for (field, value) in completion.as_object().into_iter().flatten() {
            if !CHUNK_ONLY.contains(&field.as_str()) {
                chunk.insert(field.clone(), value.clone());
            }
        }
        chunk.insert("object".into(), json!("chat.completion.chunk"));
        chunk.insert("choices".into(), choices);
        if include_usage {
            chunk.insert("usage".into(), Value::Null);
        }
        Value::Object(chunk)
    };
    let mut chunks = Vec::new();
    for (position, choice) in completion
        .get("choices")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let index = choice.get("index").cloned().unwrap_or(json!(position));
        let message = choice
            .get("message")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let delta = |delta: Value, logprobs: Option<&Value>| {
            let mut entry = json!({ "index": index, "delta": delta, "finish_reason": null });
            if let Some(logprobs) = logprobs {
                entry["logprobs"] = logprobs.clone();
            }
            json!([entry])
        };
        let role = message.get("role").cloned().unwrap_or(json!("assistant"));
        let content = message.get("content").cloned().unwrap_or(Value::Null);
        // The role chunk opens the content as OpenAI's does: `""` for a text answer, null
        // for a tool call.
        let opening = if content.is_string() {
            json!("")
        } else {
            Value::Null
        };
        chunks.push(chunk(delta(
            json!({ "role": role, "content": opening }),
            None,
        )));
        let logprobs = choice.get("logprobs").filter(|l| !l.is_null());
        // What the model thought comes before what it says.
        let (thinking, rest): (Vec<_>, Vec<_>) = message
            .iter()
            .filter(|(field, value)| {
                !matches!(field.as_str(), "role" | "content" | "tool_calls") && !value.is_null()
            })
            .partition(|(field, _)| field.starts_with("reasoning"));
        for (field, value) in thinking {
            chunks.push(chunk(delta(json!({ field.clone(): value }), None)));
        }
        if content.is_string() || logprobs.is_some() {
            chunks.push(chunk(delta(json!({ "content": content }), logprobs)));
        }
        for (field, value) in rest {
            chunks.push(chunk(delta(json!({ field.clone(): value }), None)));
        }
        if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
            let calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, call)| {
                    let mut call = call.clone();
                    call["index"] = json!(i);
                    call
                })
                .collect();
            chunks.push(chunk(delta(json!({ "tool_calls": calls }), None)));
        }
        let mut last = json!({ "index": index, "delta": {}, "finish_reason": null });
        for (field, value) in choice.as_object().into_iter().flatten() {
            if !matches!(field.as_str(), "index" | "message" | "logprobs") {
                last[field] = value.clone();
            }
        }
        if last["finish_reason"].is_null() {
            last["finish_reason"] = json!("stop");
        }
        chunks.push(chunk(json!([last])));
    }
    if include_usage && let Some(usage) = completion.get("usage") {
        let mut last = chunk(json!([]));
        last["usage"] = usage.clone();
        chunks.push(last);
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream() -> Vec<Value> {
        let head = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk",
            "created": 7, "model": "m"});
        let with = |choices: Value| {
            let mut chunk = head.clone();
            chunk["choices"] = choices;
            chunk
        };
        vec![
            with(json!([{"index": 0, "delta": {"role": "assistant", "content": ""}}])),
            with(json!([{"index": 0, "delta": {"content": "a red"}}])),
            with(json!([{"index": 0, "delta": {"content": " fox"}}])),
            with(json!([{"index": 0, "delta": {}, "finish_reason": "stop"}])),
            {
                let mut usage = with(json!([]));
                usage["usage"] =
                    json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5});
                usage
            },
        ]
    }

    #[test]
    fn chunks_add_up_to_the_completion() {
        let mut assembler = Assembler::default();
        for chunk in stream() {
            assembler.push(&chunk);
        }
        let completion = assembler.completion();
        assert_eq!(completion["id"], "chatcmpl-1");
        assert_eq!(completion["object"], "chat.completion");
        assert_eq!(completion["choices"][0]["message"]["content"], "a red fox");
        assert_eq!(completion["choices"][0]["finish_reason"], "stop");
        assert_eq!(completion["usage"]["total_tokens"], 5);
    }

    #[test]
    fn tool_call_fragments_are_joined() {
        let mut assembler = Assembler::default();
        assembler.push(
            &json!({"id": "c", "choices": [{"index": 0, "delta": {"role": "assistant",
            "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "weather", "arguments": ""}}]}}]}),
        );
        assembler.push(
            &json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
            "function": {"arguments": "{\"city\":"}}]}}]}),
        );
        assembler.push(
            &json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
            "function": {"arguments": "\"Oslo\"}"}}]}, "finish_reason": "tool_calls"}]}),
        );
        let completion = assembler.completion();
        let call = &completion["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["id"], "call_1");
        assert_eq!(call["function"]["name"], "weather");
        assert_eq!(call["function"]["arguments"], "{\"city\":\"Oslo\"}");
        assert_eq!(completion["choices"][0]["message"]["content"], Value::Null);
    }

    #[test]
    fn a_stored_completion_streams_back_to_itself() {
        let mut assembler = Assembler::default();
        for chunk in stream() {
            assembler.push(&chunk);
        }
        let completion = assembler.completion();
        let mut again = Assembler::default();
        let chunks = chunks_of(&completion, true);
        assert!(
            chunks
                .iter()
                .all(|c| c["object"] == "chat.completion.chunk")
        );
        assert_eq!(chunks.last().unwrap()["choices"], json!([]));
        for chunk in &chunks {
            again.push(chunk);
        }
        assert_eq!(again.completion(), completion);
        let (usage, before) = chunks.split_last().unwrap();
        assert_eq!(usage["usage"], completion["usage"]);
        for chunk in before {
            assert_eq!(chunk.get("usage"), Some(&Value::Null), "as OpenAI: {chunk}");
        }
        for chunk in chunks_of(&completion, false) {
            assert!(chunk.get("usage").is_none(), "usage not asked: {chunk}");
        }
    }

    #[test]
    fn every_streamed_field_is_kept_and_streamed_back() {
        let head = json!({"id": "chatcmpl-r", "object": "chat.completion.chunk",
            "created": 9, "model": "m", "system_fingerprint": "fp", "provider": "up"});
        let with = |choices: Value| {
            let mut chunk = head.clone();
            chunk["choices"] = choices;
            chunk
        };
        let token =
            |t: &str| json!({"token": t, "logprob": -0.5, "bytes": null, "top_logprobs": []});
        let chunks = vec![
            with(
                json!([{"index": 0, "delta": {"role": "assistant", "content": ""},
                "logprobs": null, "finish_reason": null}]),
            ),
            with(json!([{"index": 0, "delta": {"reasoning_content": "think"}}])),
            with(json!([{"index": 0, "delta": {"reasoning_content": "ing."}}])),
            with(json!([{"index": 0, "delta": {"content": "a"},
                "logprobs": {"content": [token("a")], "refusal": null}}])),
            with(json!([{"index": 0, "delta": {"content": " fox"},
                "logprobs": {"content": [token(" fox")], "refusal": null}}])),
            with(json!([{"index": 0, "delta": {}, "finish_reason": "stop"}])),
        ];
        let mut assembler = Assembler::default();
        for chunk in &chunks {
            assembler.push(chunk);
        }
        let completion = assembler.completion();
        assert_eq!(completion["provider"], "up");
        assert_eq!(completion["system_fingerprint"], "fp");
        let choice = &completion["choices"][0];
        assert_eq!(choice["message"]["reasoning_content"], "thinking.");
        assert_eq!(choice["message"]["content"], "a fox");
        assert_eq!(
            choice["logprobs"]["content"],
            json!([token("a"), token(" fox")]),
            "every chunk's logprobs"
        );
        // Streamed back, the chunks add up to the same completion again.
        let replayed = chunks_of(&completion, false);
        assert!(
            replayed
                .iter()
                .any(|c| c["choices"][0]["delta"]["reasoning_content"] == "thinking.")
        );
        let mut again = Assembler::default();
        for chunk in &replayed {
            again.push(chunk);
        }
        assert_eq!(again.completion(), completion);
    }

    #[test]
    fn a_tool_call_streams_back_with_null_content() {
        let mut assembler = Assembler::default();
        assembler.push(
            &json!({"id": "c", "created": 1, "model": "m", "choices": [{"index": 0,
            "delta": {"role": "assistant", "content": null, "tool_calls": [{"index": 0,
            "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}]}}]}),
        );
        assembler.push(
            &json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
            "function": {"arguments": "{}"}}]}, "finish_reason": "tool_calls"}]}),
        );
        let completion = assembler.completion();
        let mut again = Assembler::default();
        for chunk in chunks_of(&completion, false) {
            again.push(&chunk);
        }
        assert_eq!(again.completion(), completion);
        assert_eq!(completion["choices"][0]["message"]["content"], Value::Null);
    }
}
