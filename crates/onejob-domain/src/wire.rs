//! The streamed forms of two finished answers, as their APIs send them: an Anthropic
//! `message` as its `message_start … message_stop` events, and an OpenAI Responses API
//! `response` as its typed `response.created … response.completed` events.
//!
//! A gateway replays a stored answer as a stream with these, and the bundled fake streams
//! its answers with them; each event is the JSON an SDK reads from one `data:` line, its
//! `type` also being the SSE event name.

use serde_json::{Map, Value, json};

/// The events of a finished Anthropic `message`, as the Messages API streams one: first
/// `message_start`, the message without its content, its stop reason and stop sequence null,
/// its usage the message's with `output_tokens: 0` (the input and cache counts are known when
/// a stream starts); per content block `content_block_start` (the block with only its
/// streamed members emptied: a text block's `text`, and `citations` where it has some; a
/// thinking block's `thinking` and `signature`; a tool call's `input`), its deltas
/// (`text_delta` and one `citations_delta` per citation, `thinking_delta` and
/// `signature_delta`, `input_json_delta` with the tool call's input) and
/// `content_block_stop`; then `message_delta`, with the stop reason and stop sequence and the
/// whole usage (cumulative, as the API sends it), and `message_stop`. Assembled again, they
/// are the message, member for member.
pub fn message_events(message: &Value) -> Vec<Value> {
    let mut start = message.clone();
    if let Some(start) = start.as_object_mut() {
        start.insert("content".into(), json!([]));
        for field in STOP_MEMBERS {
            if start.contains_key(field) {
                start.insert(field.into(), Value::Null);
            }
        }
        if let Some(Value::Object(usage)) = start.get_mut("usage")
            && usage
                .get("output_tokens")
                .is_some_and(|tokens| !tokens.is_null())
        {
            usage.insert("output_tokens".into(), json!(0));
        }
    }
    let mut events = vec![json!({"type": "message_start", "message": start})];
    let blocks = message["content"].as_array().cloned().unwrap_or_default();
    for (index, block) in blocks.iter().enumerate() {
        let (empty, deltas) = streamed_block(block);
        events.push(json!({"type": "content_block_start", "index": index, "content_block": empty}));
        for delta in deltas {
            events.push(json!({"type": "content_block_delta", "index": index, "delta": delta}));
        }
        events.push(json!({"type": "content_block_stop", "index": index}));
    }
    let mut stop = Map::new();
    for field in STOP_MEMBERS {
        if let Some(value) = message.get(field) {
            stop.insert(field.into(), value.clone());
        }
    }
    let mut delta = json!({"type": "message_delta", "delta": stop});
    if let Some(usage) = message.get("usage") {
        delta["usage"] = usage.clone();
    }
    events.push(delta);
    events.push(json!({"type": "message_stop"}));
    events
}

/// The members of a message that its `message_delta` tells.
const STOP_MEMBERS: [&str; 2] = ["stop_reason", "stop_sequence"];

/// A content block as its stream starts it (its streamed members emptied), and the deltas
/// that fill them in again.
fn streamed_block(block: &Value) -> (Value, Vec<Value>) {
    let mut empty = block.clone();
    let mut deltas = Vec::new();
    let Some(members) = empty.as_object_mut() else {
        return (empty, deltas);
    };
    let text = |member: &str| block.get(member).and_then(Value::as_str);
    match block["type"].as_str() {
        Some("text") => {
            if let Some(text) = text("text") {
                members.insert("text".into(), json!(""));
                deltas.push(json!({"type": "text_delta", "text": text}));
            }
            if let Some(Value::Array(citations)) = block.get("citations")
                && !citations.is_empty()
            {
                members.insert("citations".into(), json!([]));
                deltas.extend(
                    citations
                        .iter()
                        .map(|citation| json!({"type": "citations_delta", "citation": citation})),
                );
            }
        }
        Some("thinking") => {
            if let Some(thinking) = text("thinking") {
                members.insert("thinking".into(), json!(""));
                deltas.push(json!({"type": "thinking_delta", "thinking": thinking}));
            }
            if let Some(signature) = text("signature") {
                members.insert("signature".into(), json!(""));
                deltas.push(json!({"type": "signature_delta", "signature": signature}));
            }
        }
        Some("tool_use" | "server_tool_use" | "mcp_tool_use") => {
            if let Some(input) = block.get("input") {
                members.insert("input".into(), json!({}));
                let input = serde_json::to_string(input).unwrap_or_default();
                deltas.push(json!({"type": "input_json_delta", "partial_json": input}));
            }
        }
        _ => {}
    }
    (empty, deltas)
}

/// The events of a finished OpenAI `response`: `response.created` and
/// `response.in_progress` (the response in progress, without output), per output item
/// `response.output_item.added`, for a message's text parts `response.content_part.added`,
/// one `response.output_text.delta`, `response.output_text.done` and
/// `response.content_part.done`, for a function call its
/// `response.function_call_arguments.delta` and `.done`, then `response.output_item.done`,
/// and last `response.completed` with the whole response. Each carries its
/// `sequence_number`.
pub fn response_events(response: &Value) -> Vec<Value> {
    let mut events: Vec<Value> = Vec::new();
    let mut push = |mut event: Value| {
        event["sequence_number"] = json!(events.len());
        events.push(event);
    };
    let mut started = response.clone();
    started["status"] = json!("in_progress");
    started["output"] = json!([]);
    if let Some(started) = started.as_object_mut() {
        started.remove("usage");
        started.insert("completed_at".into(), Value::Null);
    }
    push(json!({"type": "response.created", "response": started}));
    push(json!({"type": "response.in_progress", "response": started}));
    let items = response["output"].as_array().cloned().unwrap_or_default();
    for (output_index, item) in items.iter().enumerate() {
        let item_id = item["id"].clone();
        let mut added = item.clone();
        if added.get("status").is_some() {
            added["status"] = json!("in_progress");
        }
        match item["type"].as_str() {
            Some("message") => {
                added["content"] = json!([]);
                push(json!({"type": "response.output_item.added",
                    "output_index": output_index, "item": added}));
                let parts = item["content"].as_array().cloned().unwrap_or_default();
                for (content_index, part) in parts.iter().enumerate() {
                    let at = json!({"item_id": item_id, "output_index": output_index,
                        "content_index": content_index});
                    let with = |mut event: Value| {
                        for (key, value) in at.as_object().into_iter().flatten() {
                            event[key] = value.clone();
                        }
                        event
                    };
                    if part["type"] == "output_text" {
                        let mut empty = part.clone();
                        empty["text"] = json!("");
                        empty["annotations"] = json!([]);
                        push(with(
                            json!({"type": "response.content_part.added", "part": empty}),
                        ));
                        push(with(json!({"type": "response.output_text.delta",
                            "delta": part["text"], "logprobs": []})));
                        push(with(json!({"type": "response.output_text.done",
                            "text": part["text"], "logprobs": []})));
                    } else {
                        push(with(
                            json!({"type": "response.content_part.added", "part": part}),
                        ));
                    }
                    push(with(
                        json!({"type": "response.content_part.done", "part": part}),
                    ));
                }
            }
            Some("function_call") => {
                added["arguments"] = json!("");
                push(json!({"type": "response.output_item.added",
                    "output_index": output_index, "item": added}));
                push(json!({"type": "response.function_call_arguments.delta",
                    "item_id": item_id, "output_index": output_index,
                    "delta": item["arguments"]}));
                push(json!({"type": "response.function_call_arguments.done",
                    "item_id": item_id, "output_index": output_index,
                    "name": item["name"], "arguments": item["arguments"]}));
            }
            _ => push(json!({"type": "response.output_item.added",
                "output_index": output_index, "item": added})),
        }
        push(json!({"type": "response.output_item.done",
            "output_index": output_index, "item": item}));
    }
    let last = match response["status"].as_str() {
        Some("incomplete") => "response.incomplete",
        Some("failed") => "response.failed",
        _ => "response.completed",
    };
    push(json!({"type": last, "response": response}));
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_streamed_block_by_block() {
        let message = json!({"id": "msg_1", "type": "message", "role": "assistant",
            "model": "m", "content": [{"type": "text", "text": "hi"},
            {"type": "tool_use", "id": "t", "name": "w", "input": {"city": "Oslo"}}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 3, "output_tokens": 2}});
        let events = message_events(&message);
        let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(events[0]["message"]["content"], json!([]));
        assert_eq!(events[2]["delta"]["text"], "hi");
        assert_eq!(events[5]["delta"]["partial_json"], r#"{"city":"Oslo"}"#);
        assert_eq!(events[7]["delta"]["stop_reason"], "tool_use");
    }

    #[test]
    fn a_replayed_message_streams_usage_citations_and_signatures_as_the_api_does() {
        let citation = json!({"type": "char_location", "cited_text": "red",
            "document_index": 0, "start_char_index": 0, "end_char_index": 3});
        let message = json!({"id": "msg_1", "type": "message", "role": "assistant",
            "model": "m", "content": [
                {"type": "thinking", "thinking": "hm", "signature": "c2ln"},
                {"type": "text", "text": "a red fox", "citations": [citation, citation]},
                {"type": "text", "text": "!", "citations": null}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 3, "cache_creation_input_tokens": 1,
                "cache_read_input_tokens": 2, "output_tokens": 5}});
        let events = message_events(&message);
        assert_eq!(
            events[0]["message"]["usage"],
            json!({"input_tokens": 3, "cache_creation_input_tokens": 1,
                "cache_read_input_tokens": 2, "output_tokens": 0}),
            "the input and cache counts come first"
        );
        assert_eq!(
            events[1]["content_block"],
            json!({"type": "thinking", "thinking": "", "signature": ""})
        );
        assert_eq!(
            events[3]["delta"],
            json!({"type": "signature_delta", "signature": "c2ln"})
        );
        assert_eq!(
            events[5]["content_block"],
            json!({"type": "text", "text": "", "citations": []})
        );
        let cited: Vec<&Value> = events
            .iter()
            .filter(|e| e["delta"]["type"] == "citations_delta")
            .map(|e| &e["delta"]["citation"])
            .collect();
        assert_eq!(cited, [&citation, &citation], "one event per citation");
        assert_eq!(
            events[10]["content_block"],
            json!({"type": "text", "text": "", "citations": null})
        );
        let delta = &events[events.len() - 2];
        assert_eq!(delta["type"], "message_delta");
        assert_eq!(
            delta["usage"], message["usage"],
            "the whole usage, cumulative"
        );
    }

    #[test]
    fn a_response_is_streamed_with_sequence_numbers_and_completed_last() {
        let response = json!({"id": "resp_1", "object": "response", "status": "completed",
            "output": [{"type": "message", "id": "m1", "status": "completed",
            "role": "assistant", "content": [{"type": "output_text", "text": "hi",
            "annotations": []}]}]});
        let events = response_events(&response);
        for (n, event) in events.iter().enumerate() {
            assert_eq!(event["sequence_number"], n);
        }
        assert_eq!(events[0]["response"]["status"], "in_progress");
        let delta = events
            .iter()
            .find(|e| e["type"] == "response.output_text.delta")
            .unwrap();
        assert_eq!(delta["delta"], "hi");
        assert_eq!(delta["item_id"], "m1");
        assert_eq!(events.last().unwrap()["type"], "response.completed");
        assert_eq!(events.last().unwrap()["response"], response);
    }
}
