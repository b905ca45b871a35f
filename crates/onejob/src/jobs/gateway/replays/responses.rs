//! A replayed Responses stream: generated answers streamed as OpenAI's Responses API streams them.

use proptest::prelude::*;

use super::*;

/// One part of a message in a generated response.
#[derive(Debug, Clone)]
enum Part {
    /// Text in pieces, with its annotations, and its pieces' log probabilities or none.
    Text(Vec<String>, Vec<Value>, bool),
    /// A refusal in pieces.
    Refusal(Vec<String>),
}

/// One output item of a generated response.
#[derive(Debug, Clone)]
enum Item {
    /// A message and its parts.
    Message(Vec<Part>),
    /// Reasoning: its summary parts, each in pieces.
    Reasoning(Vec<Vec<String>>),
    /// A function call: its name, and its arguments' JSON text cut by the sizes.
    FunctionCall(String, Value, Vec<u8>),
}

/// A generated response.
#[derive(Debug, Clone)]
struct ResponseAnswer {
    id: String,
    items: Vec<Item>,
    incomplete: bool,
}

fn annotation() -> impl Strategy<Value = Value> {
    (0u32..50, 0u32..50).prop_map(|(start, length)| {
        json!({"type": "url_citation", "url": "https://example.com/fox",
            "title": "Foxes", "start_index": start, "end_index": start + length})
    })
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        3 => prop::collection::vec(
            prop_oneof![
                4 => (pieces(6), prop::collection::vec(annotation(), 0..3), any::<bool>())
                    .prop_map(|(pieces, annotations, logprobs)| {
                        Part::Text(pieces, annotations, logprobs)
                    }),
                1 => pieces(4).prop_map(Part::Refusal),
            ],
            1..3
        )
        .prop_map(Item::Message),
        1 => prop::collection::vec(pieces(4), 0..3).prop_map(Item::Reasoning),
        2 => ("[a-z_]{1,8}", json_object(), sizes())
            .prop_map(|(name, arguments, sizes)| Item::FunctionCall(name, arguments, sizes)),
    ]
}

fn response_answer() -> impl Strategy<Value = ResponseAnswer> {
    (
        "resp_[a-zA-Z0-9]{6}",
        prop::collection::vec(item(), 1..4),
        any::<bool>(),
    )
        .prop_map(|(id, items, incomplete)| ResponseAnswer {
            id,
            items,
            incomplete,
        })
}

/// A text piece's log probability in the Responses API.
fn response_logprob(piece: &str) -> Value {
    json!({"token": piece, "logprob": -0.5, "bytes": piece.as_bytes(), "top_logprobs": []})
}

impl Item {
    /// The item, finished.
    fn stored(&self, index: usize) -> Value {
        match self {
            Item::Message(parts) => {
                let content: Vec<Value> = parts
                    .iter()
                    .map(|part| match part {
                        Part::Text(pieces, annotations, logprobs) => {
                            let logprobs: Vec<Value> = if *logprobs {
                                pieces.iter().map(|p| response_logprob(p)).collect()
                            } else {
                                vec![]
                            };
                            json!({"type": "output_text", "text": concat(pieces),
                                "annotations": annotations, "logprobs": logprobs})
                        }
                        Part::Refusal(pieces) => {
                            json!({"type": "refusal", "refusal": concat(pieces)})
                        }
                    })
                    .collect();
                json!({"type": "message", "id": format!("msg_{index}"), "status": "completed",
                    "role": "assistant", "content": content})
            }
            Item::Reasoning(summary) => {
                let summary: Vec<Value> = summary
                    .iter()
                    .map(|pieces| json!({"type": "summary_text", "text": concat(pieces)}))
                    .collect();
                json!({"type": "reasoning", "id": format!("rs_{index}"), "summary": summary})
            }
            Item::FunctionCall(name, arguments, _) => {
                json!({"type": "function_call", "id": format!("fc_{index}"),
                    "call_id": format!("call_{index}"), "name": name,
                    "arguments": arguments.to_string(), "status": "completed"})
            }
        }
    }

    /// Its events, as the Responses API streams them (sequence numbers left to the caller).
    fn events(&self, index: usize) -> Vec<Value> {
        let item = self.stored(index);
        let id = item["id"].clone();
        let mut added = item.clone();
        let mut events = Vec::new();
        let at = |event: Value| {
            let mut event = event;
            event["item_id"] = id.clone();
            event["output_index"] = json!(index);
            event
        };
        match self {
            Item::Message(parts) => {
                added["status"] = json!("in_progress");
                added["content"] = json!([]);
                events.push(json!({"type": "response.output_item.added",
                    "output_index": index, "item": added}));
                for (part_index, part) in parts.iter().enumerate() {
                    let stored = &item["content"][part_index];
                    let with = |event: Value| {
                        let mut event = at(event);
                        event["content_index"] = json!(part_index);
                        event
                    };
                    let (pieces, annotations, logprobs) = match part {
                        Part::Text(pieces, annotations, logprobs) => {
                            (pieces, annotations, logprobs)
                        }
                        Part::Refusal(pieces) => {
                            events.push(with(json!({"type": "response.content_part.added",
                                "part": {"type": "refusal", "refusal": ""}})));
                            for piece in pieces {
                                events.push(with(json!({"type": "response.refusal.delta",
                                    "delta": piece})));
                            }
                            events.push(with(json!({"type": "response.refusal.done",
                                "refusal": stored["refusal"]})));
                            events.push(with(json!({"type": "response.content_part.done",
                                "part": stored})));
                            continue;
                        }
                    };
                    let part = stored;
                    events.push(with(json!({"type": "response.content_part.added",
                        "part": {"type": "output_text", "text": "", "annotations": [],
                            "logprobs": []}})));
                    for piece in pieces {
                        let logprobs = if *logprobs {
                            vec![response_logprob(piece)]
                        } else {
                            vec![]
                        };
                        events.push(with(json!({"type": "response.output_text.delta",
                            "delta": piece, "logprobs": logprobs})));
                    }
                    for (n, annotation) in annotations.iter().enumerate() {
                        events.push(with(
                            json!({"type": "response.output_text.annotation.added",
                            "annotation_index": n, "annotation": annotation}),
                        ));
                    }
                    events.push(with(json!({"type": "response.output_text.done",
                        "text": part["text"], "logprobs": part["logprobs"]})));
                    events.push(with(json!({"type": "response.content_part.done",
                        "part": part})));
                }
            }
            Item::Reasoning(summary) => {
                added["summary"] = json!([]);
                events.push(json!({"type": "response.output_item.added",
                    "output_index": index, "item": added}));
                for (summary_index, pieces) in summary.iter().enumerate() {
                    let with = |event: Value| {
                        let mut event = at(event);
                        event["summary_index"] = json!(summary_index);
                        event
                    };
                    events.push(with(
                        json!({"type": "response.reasoning_summary_part.added",
                        "part": {"type": "summary_text", "text": ""}}),
                    ));
                    for piece in pieces {
                        events.push(with(json!({"type":
                            "response.reasoning_summary_text.delta", "delta": piece})));
                    }
                    let text = concat(pieces);
                    events.push(with(json!({"type": "response.reasoning_summary_text.done",
                        "text": text})));
                    events.push(with(json!({"type": "response.reasoning_summary_part.done",
                        "part": {"type": "summary_text", "text": text}})));
                }
            }
            Item::FunctionCall(_, arguments, sizes) => {
                added["status"] = json!("in_progress");
                added["arguments"] = json!("");
                events.push(json!({"type": "response.output_item.added",
                    "output_index": index, "item": added}));
                for piece in split(&arguments.to_string(), sizes) {
                    events.push(at(json!({"type": "response.function_call_arguments.delta",
                        "delta": piece})));
                }
                events.push(at(json!({"type": "response.function_call_arguments.done",
                    "arguments": item["arguments"]})));
            }
        }
        events.push(
            json!({"type": "response.output_item.done", "output_index": index,
            "item": item}),
        );
        events
    }
}

impl ResponseAnswer {
    fn stored(&self) -> Value {
        let output: Vec<Value> = self
            .items
            .iter()
            .enumerate()
            .map(|(index, item)| item.stored(index))
            .collect();
        let status = if self.incomplete {
            "incomplete"
        } else {
            "completed"
        };
        let details = if self.incomplete {
            json!({"reason": "max_output_tokens"})
        } else {
            Value::Null
        };
        json!({"id": self.id, "object": "response", "created_at": 1, "status": status,
            "completed_at": 2, "model": "gpt-x", "output": output, "error": null,
            "incomplete_details": details, "store": false, "tools": [],
            "usage": {"input_tokens": 3, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 2},
                "total_tokens": 8}})
    }

    /// Its events as OpenAI streams them.
    fn live(&self) -> Vec<Value> {
        let stored = self.stored();
        let mut started = stored.clone();
        started["status"] = json!("in_progress");
        started["output"] = json!([]);
        started["usage"] = Value::Null;
        let mut events = vec![
            json!({"type": "response.created", "response": started}),
            json!({"type": "response.in_progress", "response": started}),
        ];
        for (index, item) in self.items.iter().enumerate() {
            events.extend(item.events(index));
        }
        let last = if self.incomplete {
            "response.incomplete"
        } else {
            "response.completed"
        };
        events.push(json!({"type": last, "response": stored}));
        for (n, event) in events.iter_mut().enumerate() {
            event["sequence_number"] = json!(n);
        }
        events
    }
}

/// What an SDK that builds a response from its deltas (as LangChain's does), not from its
/// last event, puts together: per output item, what and part, the text of its deltas (text,
/// refusal, reasoning summary, reasoning text, arguments), a text's log probabilities and its
/// annotations.
fn response_deltas(events: &[Value]) -> BTreeMap<(u64, &'static str, u64), Value> {
    let mut parts: BTreeMap<(u64, &'static str, u64), Value> = BTreeMap::new();
    for event in events {
        let item = event["output_index"].as_u64().unwrap_or(0);
        let part = event["content_index"]
            .as_u64()
            .or(event["summary_index"].as_u64())
            .unwrap_or(0);
        let mut append = |what: &'static str, piece: &Value| {
            let slot = parts
                .entry((item, what, part))
                .or_insert_with(|| match piece {
                    Value::Array(_) => json!([]),
                    _ => json!(""),
                });
            match (slot, piece) {
                (Value::String(text), Value::String(more)) => text.push_str(more),
                (Value::Array(items), Value::Array(more)) => items.extend(more.iter().cloned()),
                (slot, piece) => panic!("{piece} does not add to {slot}"),
            }
        };
        match event["type"].as_str().unwrap_or_default() {
            "response.output_text.delta" => {
                append("text", &event["delta"]);
                append("logprobs", &event["logprobs"]);
            }
            "response.output_text.annotation.added" => {
                append("annotations", &json!([event["annotation"]]));
            }
            "response.refusal.delta" => append("refusal", &event["delta"]),
            "response.reasoning_summary_text.delta" => append("summary", &event["delta"]),
            "response.reasoning_text.delta" => append("reasoning", &event["delta"]),
            "response.function_call_arguments.delta" => append("arguments", &event["delta"]),
            _ => {}
        }
    }
    parts
}

/// What [`response_deltas`] puts together of a stream of `response`.
fn deltas_of(response: &Value) -> BTreeMap<(u64, &'static str, u64), Value> {
    let mut parts = BTreeMap::new();
    let list = |value: &Value| value.as_array().cloned().unwrap_or_default();
    for (item, output) in (0u64..).zip(list(&response["output"])) {
        for (part, content) in (0u64..).zip(list(&output["content"])) {
            match content["type"].as_str() {
                Some("output_text") => {
                    parts.insert((item, "text", part), content["text"].clone());
                    parts.insert((item, "logprobs", part), content["logprobs"].clone());
                    if !list(&content["annotations"]).is_empty() {
                        parts.insert((item, "annotations", part), content["annotations"].clone());
                    }
                }
                Some("refusal") => {
                    parts.insert((item, "refusal", part), content["refusal"].clone());
                }
                _ => {}
            }
        }
        for (part, summary) in (0u64..).zip(list(&output["summary"])) {
            parts.insert((item, "summary", part), summary["text"].clone());
        }
        if output["type"] == "function_call" {
            parts.insert((item, "arguments", 0), output["arguments"].clone());
        }
    }
    parts
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn a_replayed_response_stream_assembles_as_the_live_one(answer in response_answer()) {
        let live = answer.live();
        let (stored, read) = relay(Endpoint::Responses, &live, false);
        prop_assert_eq!(&stored, &answer.stored());
        prop_assert_eq!(read.last(), live.last(), "the held last event, once the answer won");
        let replayed = Endpoint::Responses.events_of(&stored, false);
        prop_assert_eq!(&assemble(Endpoint::Responses, &read), &stored);
        prop_assert_eq!(&assemble(Endpoint::Responses, &replayed), &stored);
        // Put together from their deltas rather than their last event, the same again.
        let expected = deltas_of(&stored);
        prop_assert_eq!(&response_deltas(&read), &expected);
        prop_assert_eq!(&response_deltas(&replayed), &expected);
    }
}
