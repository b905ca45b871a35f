//! Chat completions and their streamed form: [`Assembler`] builds the `chat.completion` a
//! stream of `chat.completion.chunk`s adds up to (the job's result when the upstream
//! streamed), and [`chunks_of`] turns a stored completion back into chunks, for a caller
//! that asks for a stream after the job already finished.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// One choice being assembled.
#[derive(Debug, Default)]
struct Choice {
    role: Option<String>,
    content: Option<String>,
    refusal: Option<String>,
    tool_calls: BTreeMap<u64, ToolCall>,
    finish_reason: Option<Value>,
    logprobs: Option<Value>,
}

/// One tool call being assembled: OpenAI streams its id, type and name once and its
/// arguments in fragments.
#[derive(Debug, Default)]
struct ToolCall {
    id: Option<String>,
    kind: Option<String>,
    name: String,
    arguments: String,
}

/// Adds up `chat.completion.chunk`s into the `chat.completion` they stream.
#[derive(Debug, Default)]
pub struct Assembler {
    head: Map<String, Value>,
    choices: BTreeMap<u64, Choice>,
    usage: Option<Value>,
}

fn append(slot: &mut Option<String>, piece: Option<&str>) {
    if let Some(piece) = piece {
        slot.get_or_insert_with(String::new).push_str(piece);
    }
}

impl Assembler {
    /// Takes one chunk.
    pub fn push(&mut self, chunk: &Value) {
        for field in [
            "id",
            "created",
            "model",
            "system_fingerprint",
            "service_tier",
        ] {
            if let Some(value) = chunk.get(field).filter(|v| !v.is_null()) {
                self.head.entry(field).or_insert_with(|| value.clone());
            }
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
            if let Some(reason) = choice.get("finish_reason").filter(|r| !r.is_null()) {
                slot.finish_reason = Some(reason.clone());
            }
            if let Some(logprobs) = choice.get("logprobs").filter(|l| !l.is_null()) {
                slot.logprobs = Some(logprobs.clone());
            }
            let Some(delta) = choice.get("delta") else {
                continue;
            };
            if let Some(role) = delta.get("role").and_then(Value::as_str) {
                slot.role = Some(role.to_owned());
            }
            append(
                &mut slot.content,
                delta.get("content").and_then(Value::as_str),
            );
            append(
                &mut slot.refusal,
                delta.get("refusal").and_then(Value::as_str),
            );
            for call in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
                let tool = slot.tool_calls.entry(index).or_default();
                if let Some(id) = call.get("id").and_then(Value::as_str) {
                    tool.id = Some(id.to_owned());
                }
                if let Some(kind) = call.get("type").and_then(Value::as_str) {
                    tool.kind = Some(kind.to_owned());
                }
                if let Some(function) = call.get("function") {
                    if let Some(name) = function.get("name").and_then(Value::as_str) {
                        tool.name.push_str(name);
                    }
                    if let Some(arguments) = function.get("arguments").and_then(Value::as_str) {
                        tool.arguments.push_str(arguments);
                    }
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
                let mut message = Map::new();
                message.insert(
                    "role".into(),
                    json!(choice.role.as_deref().unwrap_or("assistant")),
                );
                message.insert("content".into(), json!(choice.content));
                if let Some(refusal) = &choice.refusal {
                    message.insert("refusal".into(), json!(refusal));
                }
                if !choice.tool_calls.is_empty() {
                    let calls: Vec<Value> = choice
                        .tool_calls
                        .values()
                        .map(|call| {
                            json!({
                                "id": call.id,
                                "type": call.kind.as_deref().unwrap_or("function"),
                                "function": { "name": call.name, "arguments": call.arguments },
                            })
                        })
                        .collect();
                    message.insert("tool_calls".into(), Value::Array(calls));
                }
                json!({
                    "index": index,
                    "message": message,
                    "logprobs": choice.logprobs,
                    "finish_reason": choice.finish_reason,
                })
            })
            .collect();
        completion.insert("choices".into(), Value::Array(choices));
        if let Some(usage) = &self.usage {
            completion.insert("usage".into(), usage.clone());
        }
        Value::Object(completion)
    }
}

/// The chunks a stored `completion` streams as: the role, the content (and refusal and tool
/// calls) of each choice, its finish reason, and with `include_usage` a last chunk with the
/// usage and no choices, as OpenAI sends them.
pub fn chunks_of(completion: &Value, include_usage: bool) -> Vec<Value> {
    let chunk = |choices: Value| {
        let mut chunk = Map::new();
        for field in ["id", "created", "model", "system_fingerprint"] {
            if let Some(value) = completion.get(field) {
                chunk.insert(field.into(), value.clone());
            }
        }
        chunk.insert("object".into(), json!("chat.completion.chunk"));
        chunk.insert("choices".into(), choices);
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
        let message = choice.get("message").cloned().unwrap_or(json!({}));
        let delta =
            |delta: Value| json!([{ "index": index, "delta": delta, "finish_reason": null }]);
        let role = message.get("role").cloned().unwrap_or(json!("assistant"));
        chunks.push(chunk(delta(json!({ "role": role, "content": "" }))));
        if let Some(content) = message.get("content").and_then(Value::as_str) {
            chunks.push(chunk(delta(json!({ "content": content }))));
        }
        if let Some(refusal) = message.get("refusal").and_then(Value::as_str) {
            chunks.push(chunk(delta(json!({ "refusal": refusal }))));
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
            chunks.push(chunk(delta(json!({ "tool_calls": calls }))));
        }
        let finish = choice
            .get("finish_reason")
            .cloned()
            .unwrap_or(json!("stop"));
        chunks.push(chunk(
            json!([{ "index": index, "delta": {}, "finish_reason": finish }]),
        ));
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
        assert!(chunks_of(&completion, false).last().unwrap()["usage"].is_null());
    }
}
