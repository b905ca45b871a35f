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

/// The events of a finished OpenAI `response`, as the Responses API streams one:
/// `response.created` and `response.in_progress` (the response in progress, without output
/// or usage), then per output item `response.output_item.added` (the item with its streamed
/// members emptied), its parts' events, and `response.output_item.done` (the item); last
/// `response.completed` (`response.incomplete`, `response.failed`) with the whole response.
/// A message's text part streams as `response.content_part.added`, one
/// `response.output_text.delta` (with the part's `logprobs`), one
/// `response.output_text.annotation.added` per annotation, `response.output_text.done` and
/// `response.content_part.done`; a refusal as `response.refusal.delta` and `.done`; a
/// reasoning item's summary parts as `response.reasoning_summary_part.added`,
/// `response.reasoning_summary_text.delta` and `.done`, `response.reasoning_summary_part.done`,
/// its reasoning text as `response.reasoning_text.delta` and `.done`; a function call's
/// arguments as `response.function_call_arguments.delta` and `.done`. Each event carries its
/// `sequence_number`; put together from its deltas or from its last event, the stream is the
/// response.
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
        // The item's own events, each naming the item and where in the output it is.
        let at = |mut event: Value, index: Option<(&str, usize)>| {
            event["item_id"] = item_id.clone();
            event["output_index"] = json!(output_index);
            if let Some((member, index)) = index {
                event[member] = json!(index);
            }
            event
        };
        let mut parts = Vec::new();
        match item["type"].as_str() {
            Some("message") => {
                added["content"] = json!([]);
                for (index, part) in list(&item["content"]).iter().enumerate() {
                    let at = |event| at(event, Some(("content_index", index)));
                    parts.extend(message_part(part).into_iter().map(at));
                }
            }
            Some("reasoning") => {
                if added.get("summary").is_some() {
                    added["summary"] = json!([]);
                }
                if added.get("content").is_some_and(Value::is_array) {
                    added["content"] = json!([]);
                }
                for (index, part) in list(&item["summary"]).iter().enumerate() {
                    let empty = json!({"type": part["type"], "text": ""});
                    let at = |event| at(event, Some(("summary_index", index)));
                    parts.extend(
                        [
                            json!({"type": "response.reasoning_summary_part.added",
                                "part": empty}),
                            json!({"type": "response.reasoning_summary_text.delta",
                                "delta": part["text"]}),
                            json!({"type": "response.reasoning_summary_text.done",
                                "text": part["text"]}),
                            json!({"type": "response.reasoning_summary_part.done",
                                "part": part}),
                        ]
                        .into_iter()
                        .map(at),
                    );
                }
                for (index, part) in list(&item["content"]).iter().enumerate() {
                    let at = |event| at(event, Some(("content_index", index)));
                    parts.extend(
                        [
                            json!({"type": "response.reasoning_text.delta",
                                "delta": part["text"]}),
                            json!({"type": "response.reasoning_text.done",
                                "text": part["text"]}),
                        ]
                        .into_iter()
                        .map(at),
                    );
                }
            }
            Some("function_call") => {
                added["arguments"] = json!("");
                parts.push(at(
                    json!({"type": "response.function_call_arguments.delta",
                        "delta": item["arguments"]}),
                    None,
                ));
                parts.push(at(
                    json!({"type": "response.function_call_arguments.done",
                        "name": item["name"], "arguments": item["arguments"]}),
                    None,
                ));
            }
            _ => {}
        }
        push(json!({"type": "response.output_item.added",
            "output_index": output_index, "item": added}));
        for event in parts {
            push(event);
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

/// The items of a list member (none where it is not a list).
fn list(value: &Value) -> Vec<Value> {
    value.as_array().cloned().unwrap_or_default()
}

/// The events of one part of a message in a response (without the part's place).
fn message_part(part: &Value) -> Vec<Value> {
    match part["type"].as_str() {
        Some("output_text") => {
            let mut empty = part.clone();
            empty["text"] = json!("");
            empty["annotations"] = json!([]);
            if empty.get("logprobs").is_some() {
                empty["logprobs"] = json!([]);
            }
            let logprobs = part
                .get("logprobs")
                .filter(|l| l.is_array())
                .cloned()
                .unwrap_or_else(|| json!([]));
            let mut events = vec![
                json!({"type": "response.content_part.added", "part": empty}),
                json!({"type": "response.output_text.delta", "delta": part["text"],
                    "logprobs": logprobs}),
            ];
            for (index, annotation) in list(&part["annotations"]).iter().enumerate() {
                events.push(json!({"type": "response.output_text.annotation.added",
                    "annotation_index": index, "annotation": annotation}));
            }
            events.push(
                json!({"type": "response.output_text.done", "text": part["text"],
                "logprobs": logprobs}),
            );
            events.push(json!({"type": "response.content_part.done", "part": part}));
            events
        }
        Some("refusal") => {
            let mut empty = part.clone();
            empty["refusal"] = json!("");
            vec![
                json!({"type": "response.content_part.added", "part": empty}),
                json!({"type": "response.refusal.delta", "delta": part["refusal"]}),
                json!({"type": "response.refusal.done", "refusal": part["refusal"]}),
                json!({"type": "response.content_part.done", "part": part}),
            ]
        }
        _ => vec![
            json!({"type": "response.content_part.added", "part": part}),
            json!({"type": "response.content_part.done", "part": part}),
        ],
    }
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

    #[test]
    fn a_replayed_response_streams_summaries_annotations_refusals_and_logprobs() {
        let annotation = json!({"type": "url_citation", "url": "https://x", "title": "t",
            "start_index": 0, "end_index": 3});
        let logprob = json!({"token": "a fox", "logprob": -0.5, "bytes": [97],
            "top_logprobs": []});
        let response = json!({"id": "resp_1", "object": "response", "status": "completed",
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": [
                    {"type": "summary_text", "text": "Red."},
                    {"type": "summary_text", "text": "A fox."}]},
                {"type": "message", "id": "m1", "status": "completed", "role": "assistant",
                    "content": [
                        {"type": "output_text", "text": "a fox",
                            "annotations": [annotation, annotation], "logprobs": [logprob]},
                        {"type": "refusal", "refusal": "not that"}]}]});
        let events = response_events(&response);
        let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        let summary = [
            "response.reasoning_summary_part.added",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.done",
            "response.reasoning_summary_part.done",
        ];
        let mut expected = vec![
            "response.created",
            "response.in_progress",
            "response.output_item.added",
        ];
        expected.extend(summary);
        expected.extend(summary);
        expected.extend([
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.annotation.added",
            "response.output_text.annotation.added",
            "response.output_text.done",
            "response.content_part.done",
            "response.content_part.added",
            "response.refusal.delta",
            "response.refusal.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]);
        assert_eq!(types, expected);
        assert_eq!(events[2]["item"]["summary"], json!([]));
        assert_eq!(events[8]["summary_index"], 1);
        assert_eq!(events[8]["delta"], "A fox.");
        let delta = &events[14];
        assert_eq!(
            delta["logprobs"],
            json!([logprob]),
            "the part's log probabilities"
        );
        assert_eq!(delta["content_index"], 0);
        assert_eq!(events[16]["annotation_index"], 1);
        assert_eq!(events[16]["annotation"], annotation);
        assert_eq!(events[20]["delta"], "not that");
        assert_eq!(events[20]["content_index"], 1);
        assert_eq!(events[20]["item_id"], "m1");
    }
}
