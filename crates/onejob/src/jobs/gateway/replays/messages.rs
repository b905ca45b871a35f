//! A replayed Anthropic Messages stream: generated answers streamed as Anthropic streams them.

use proptest::prelude::*;

use super::*;

/// One content block of a generated message.
#[derive(Debug, Clone)]
enum Block {
    /// Text, with its citations, started with `citations` absent, null or `[]`.
    Text {
        pieces: Vec<String>,
        citations: Vec<Value>,
        started: Option<Value>,
        order: Vec<u8>,
    },
    Thinking {
        pieces: Vec<String>,
        signature: Vec<String>,
    },
    RedactedThinking {
        data: String,
    },
    /// A `tool_use` or `server_tool_use` block, its input's JSON text cut by `sizes`.
    ToolUse {
        kind: &'static str,
        name: String,
        input: Value,
        sizes: Vec<u8>,
    },
    /// A block that streams whole in its start (a server tool's result).
    Whole(Value),
}

/// A generated message and how its stream goes.
#[derive(Debug, Clone)]
struct MessageAnswer {
    id: String,
    blocks: Vec<Block>,
    stop_reason: &'static str,
    stop_sequence: Option<String>,
    /// The usage in `message_start`: input and cache counts, a first output count.
    started: Map<String, Value>,
    /// The usage in `message_delta`: cumulative, or (as the API once sent it) the output count only.
    delta: Map<String, Value>,
    /// After which events a keep-alive `ping` comes.
    pings: Vec<u8>,
}

fn citation() -> impl Strategy<Value = Value> {
    (piece(), 0u32..3, 0u32..100, 0u32..100).prop_map(|(cited, document, start, length)| {
        json!({"type": "char_location", "cited_text": cited, "document_index": document,
            "document_title": null, "start_char_index": start,
            "end_char_index": start + length})
    })
}

fn block() -> impl Strategy<Value = Block> {
    prop_oneof![
        3 => (
            pieces(8),
            prop::collection::vec(citation(), 0..3),
            prop::sample::select(vec![None, Some(Value::Null), Some(json!([]))]),
            prop::collection::vec(any::<u8>(), 0..12),
        )
            .prop_map(|(pieces, citations, started, order)| Block::Text {
                pieces,
                citations,
                started,
                order,
            }),
        1 => (pieces(6), pieces(3))
            .prop_map(|(pieces, signature)| Block::Thinking { pieces, signature }),
        1 => "[A-Za-z0-9+/]{4,12}".prop_map(|data| Block::RedactedThinking { data }),
        2 => (
            prop::sample::select(vec!["tool_use", "server_tool_use"]),
            "[a-z_]{1,8}",
            json_object(),
            sizes(),
        )
            .prop_map(|(kind, name, input, sizes)| Block::ToolUse {
                kind,
                name,
                input,
                sizes,
            }),
        1 => piece().prop_map(|title| Block::Whole(json!({
            "type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
            "content": [{"type": "web_search_result", "url": "https://example.com/fox",
                "title": title, "encrypted_content": "ZW5j", "page_age": null}]}))),
    ]
}

fn message_answer() -> impl Strategy<Value = MessageAnswer> {
    (
        "msg_[a-zA-Z0-9]{6}",
        prop::collection::vec(block(), 1..5),
        prop::sample::select(vec!["end_turn", "tool_use", "max_tokens", "stop_sequence"]),
        prop::option::of("[A-Z]{1,4}"),
        (0u32..1000, 0u32..100, 0u32..100, 1u32..500, any::<bool>()),
        any::<bool>(),
        prop::collection::vec(any::<u8>(), 0..3),
    )
        .prop_map(
            |(id, blocks, stop_reason, stop_sequence, tokens, cumulative, pings)| {
                let (input, written, read, output, tier) = tokens;
                let mut started = object(json!({"input_tokens": input,
                    "cache_creation_input_tokens": written, "cache_read_input_tokens": read,
                    "output_tokens": 1}));
                if tier {
                    started.insert("service_tier".into(), json!("standard"));
                }
                let delta = if cumulative {
                    let mut total = started.clone();
                    total.insert("output_tokens".into(), json!(output));
                    total.insert(
                        "server_tool_use".into(),
                        json!({"web_search_requests": input % 3}),
                    );
                    total
                } else {
                    object(json!({"output_tokens": output}))
                };
                MessageAnswer {
                    id,
                    blocks,
                    stop_reason,
                    stop_sequence,
                    started,
                    delta,
                    pings,
                }
            },
        )
}

impl Block {
    /// Its events after its start: start, deltas, stop.
    fn events(&self, index: usize) -> Vec<Value> {
        let delta =
            |delta: Value| json!({"type": "content_block_delta", "index": index, "delta": delta});
        let (start, deltas) = match self {
            Block::Text {
                pieces,
                citations,
                started,
                order,
            } => {
                let mut start = json!({"type": "text", "text": ""});
                if let Some(started) = started {
                    start["citations"] = started.clone();
                }
                let texts = pieces
                    .iter()
                    .map(|text| delta(json!({"type": "text_delta", "text": text})))
                    .collect();
                let cited = citations
                    .iter()
                    .map(|c| delta(json!({"type": "citations_delta", "citation": c})))
                    .collect();
                (start, interleave(vec![texts, cited], order))
            }
            Block::Thinking { pieces, signature } => (
                json!({"type": "thinking", "thinking": "", "signature": ""}),
                pieces
                    .iter()
                    .map(|t| delta(json!({"type": "thinking_delta", "thinking": t})))
                    .chain(
                        signature
                            .iter()
                            .map(|s| delta(json!({"type": "signature_delta", "signature": s}))),
                    )
                    .collect(),
            ),
            Block::RedactedThinking { data } => {
                (json!({"type": "redacted_thinking", "data": data}), vec![])
            }
            Block::ToolUse {
                kind,
                name,
                input,
                sizes,
            } => (
                json!({"type": kind, "id": format!("toolu_{index}"), "name": name,
                    "input": {}}),
                split(&input.to_string(), sizes)
                    .into_iter()
                    .map(|json| delta(json!({"type": "input_json_delta", "partial_json": json})))
                    .collect(),
            ),
            Block::Whole(block) => (block.clone(), vec![]),
        };
        let mut events =
            vec![json!({"type": "content_block_start", "index": index, "content_block": start})];
        events.extend(deltas);
        events.push(json!({"type": "content_block_stop", "index": index}));
        events
    }

    /// The block as the message has it.
    fn stored(&self, index: usize) -> Value {
        match self {
            Block::Text {
                pieces,
                citations,
                started,
                ..
            } => {
                let mut block = json!({"type": "text", "text": concat(pieces)});
                if !citations.is_empty() {
                    block["citations"] = json!(citations);
                } else if let Some(started) = started {
                    block["citations"] = started.clone();
                }
                block
            }
            Block::Thinking { pieces, signature } => json!({"type": "thinking",
                "thinking": concat(pieces), "signature": concat(signature)}),
            Block::RedactedThinking { data } => json!({"type": "redacted_thinking", "data": data}),
            Block::ToolUse {
                kind, name, input, ..
            } => json!({"type": kind, "id": format!("toolu_{index}"), "name": name,
                "input": input}),
            Block::Whole(block) => block.clone(),
        }
    }
}

impl MessageAnswer {
    fn head(&self) -> Map<String, Value> {
        object(
            json!({"id": self.id, "type": "message", "role": "assistant",
            "model": "claude-x", "container": null}),
        )
    }

    /// Its events as Anthropic streams them, with keep-alive pings among them.
    fn live(&self) -> Vec<Value> {
        let mut start = self.head();
        start.insert("content".into(), json!([]));
        start.insert("stop_reason".into(), Value::Null);
        start.insert("stop_sequence".into(), Value::Null);
        start.insert("usage".into(), Value::Object(self.started.clone()));
        let mut events = vec![json!({"type": "message_start", "message": start})];
        for (index, block) in self.blocks.iter().enumerate() {
            events.extend(block.events(index));
        }
        events.push(json!({"type": "message_delta",
            "delta": {"stop_reason": self.stop_reason, "stop_sequence": self.stop_sequence},
            "usage": self.delta}));
        for ping in &self.pings {
            let at = 1 + usize::from(*ping) % (events.len() - 1);
            events.insert(at, json!({"type": "ping"}));
        }
        events.push(json!({"type": "message_stop"}));
        events
    }

    /// The message they add up to.
    fn stored(&self) -> Value {
        let mut message = self.head();
        let content: Vec<Value> = self
            .blocks
            .iter()
            .enumerate()
            .map(|(index, block)| block.stored(index))
            .collect();
        message.insert("content".into(), json!(content));
        message.insert("stop_reason".into(), json!(self.stop_reason));
        message.insert("stop_sequence".into(), json!(self.stop_sequence));
        let mut usage = self.started.clone();
        usage.extend(self.delta.clone());
        message.insert("usage".into(), Value::Object(usage));
        Value::Object(message)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn a_replayed_message_stream_assembles_as_the_live_one(answer in message_answer()) {
        let live = answer.live();
        let (stored, read) = relay(Endpoint::Messages, &live, false);
        prop_assert_eq!(&stored, &answer.stored());
        prop_assert!(read.iter().all(|event| event["type"] != "ping"), "pings are not relayed");
        prop_assert_eq!(read.last().map(|e| &e["type"]), Some(&json!("message_stop")));
        let replayed = Endpoint::Messages.events_of(&stored, false);
        prop_assert_eq!(&assemble(Endpoint::Messages, &read), &stored);
        prop_assert_eq!(&assemble(Endpoint::Messages, &replayed), &stored);
        // The usage where the API puts it: the input and cache counts at the start, the whole
        // of it (cumulative) in `message_delta`.
        let usage = &stored["usage"];
        let started = &replayed[0]["message"]["usage"];
        for count in ["input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"] {
            prop_assert_eq!(&started[count], &usage[count]);
        }
        let delta = replayed.iter().find(|e| e["type"] == "message_delta").unwrap();
        prop_assert_eq!(&delta["usage"], usage);
    }
}
