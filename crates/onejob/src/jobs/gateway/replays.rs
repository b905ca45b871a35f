//! Replays equal live streams: properties over generated answers streamed the way real
//! upstreams stream them — text in random pieces, reasoning and thinking, tool-call arguments
//! in pieces, log probabilities per piece, usage (OpenAI's usage chunk after `"usage": null`
//! in every chunk, Anthropic's in `message_start` then cumulative in `message_delta`),
//! citations, keep-alive pings, several choices, blocks and items.
//!
//! Each live stream goes through the live path's own pieces: the assembly and the sink of
//! an attempt's relay ([`Assembly::relay`]), the stream's end once its answer won, and what a
//! caller reads of it ([`LiveStream::events`], asking for the usage or not). What the caller
//! read, assembled, must be the stored answer replayed ([`Endpoint::events_of`]) and
//! assembled, and the answer the upstream streamed, member for member.

use std::collections::{BTreeMap, VecDeque};

use onejob_domain::{KeyHash, Principal};
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::{LiveEvent, LiveStream};
use crate::gateway::{
    Endpoint,
    assembly::Assembly,
    streams::{LiveStreams, StreamEnd},
};

/// Relays `live` (an upstream's events, chat's `[DONE]` left out) as an attempt streaming for
/// a caller does, and ends the stream done (its answer won): the stored answer, and the
/// chunks a caller of `endpoint` read, asking for the usage or not.
fn relay(endpoint: Endpoint, live: &[Value], include_usage: bool) -> (Value, Vec<Value>) {
    let streams = LiveStreams::default();
    let owner = Principal::new("acme", "alice");
    let key = KeyHash([1; 32]);
    let wanted = streams.want(&owner, &key);
    let sink = streams
        .start(&owner, &key, Uuid::now_v7())
        .expect("a caller waits");
    let mut assembly = Assembly::new(endpoint);
    let mut stored = None;
    for (n, event) in live.iter().enumerate() {
        if let Some(answer) = assembly.relay(event.clone(), &sink).expect("no error") {
            assert_eq!(n + 1, live.len(), "the answer is over at the last event");
            stored = Some(answer);
        }
    }
    let stored = stored.unwrap_or_else(|| assembly.done().expect("over at [DONE]"));
    sink.end(StreamEnd::Done);
    let read: Vec<LiveEvent> = futures::executor::block_on(futures::StreamExt::collect(
        LiveStream::new(wanted, endpoint, include_usage).events(),
    ));
    let (end, chunks) = read.split_last().expect("the stream ends");
    assert_eq!(end, &LiveEvent::Done);
    let chunks = chunks
        .iter()
        .map(|event| match event {
            LiveEvent::Chunk(chunk) => chunk.clone(),
            other => panic!("only chunks before the end: {other:?}"),
        })
        .collect();
    (stored, chunks)
}

/// What a stream's `events` add up to, as a caller's SDK puts them together.
fn assemble(endpoint: Endpoint, events: &[Value]) -> Value {
    let mut assembly = Assembly::new(endpoint);
    for (n, event) in events.iter().enumerate() {
        if let Some(answer) = assembly.push(event).expect("no error") {
            assert_eq!(n + 1, events.len(), "the answer is over at the last event");
            return answer;
        }
    }
    assembly.done().expect("over at [DONE]")
}

/// Splits `text` into pieces of 0 to 4 characters, as `sizes` says, the rest in one last
/// piece: an upstream's deltas of it.
fn split(text: &str, sizes: &[u8]) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut pieces = Vec::new();
    let mut at = 0;
    for size in sizes {
        let end = (at + usize::from(size % 5)).min(chars.len());
        pieces.push(chars[at..end].iter().collect());
        at = end;
    }
    if at < chars.len() || pieces.is_empty() {
        pieces.push(chars[at..].iter().collect());
    }
    pieces
}

/// Merges `queues` into one sequence, each queue's order kept, the next queue picked by
/// `order` while it lasts.
fn interleave<T>(queues: Vec<Vec<T>>, order: &[u8]) -> Vec<T> {
    let mut queues: Vec<VecDeque<T>> = queues.into_iter().map(VecDeque::from).collect();
    let mut merged = Vec::new();
    let mut picks = order.iter();
    loop {
        queues.retain(|queue| !queue.is_empty());
        if queues.is_empty() {
            return merged;
        }
        let pick = picks.next().map_or(0, |p| usize::from(*p) % queues.len());
        merged.extend(queues[pick].pop_front());
    }
}

fn concat(pieces: &[String]) -> String {
    pieces.concat()
}

fn object(members: Value) -> Map<String, Value> {
    match members {
        Value::Object(members) => members,
        other => panic!("an object: {other}"),
    }
}

/// A piece of text as models stream them: a few characters, some that JSON escapes, some
/// beyond ASCII, or none.
fn piece() -> impl Strategy<Value = String> {
    "[a-z .é🦊\"\\\\{}\n]{0,6}"
}

fn pieces(most: usize) -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(piece(), 1..most)
}

/// Any JSON a tool's input or arguments may hold.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        piece().prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
        Just(Value::Null),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,4}", inner, 0..3)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

fn json_object() -> impl Strategy<Value = Value> {
    prop::collection::btree_map("[a-z_]{1,6}", json_value(), 0..4)
        .prop_map(|members| Value::Object(members.into_iter().collect()))
}

fn sizes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..12)
}

// --- Chat completions -------------------------------------------------------------------

/// One choice of a generated chat answer.
#[derive(Debug, Clone)]
struct ChatChoice {
    reasoning: Vec<String>,
    content: Option<Vec<String>>,
    logprobs: bool,
    /// Tool calls: name, arguments, and how their JSON text is cut into deltas.
    calls: Vec<(String, Value, Vec<u8>)>,
    finish_reason: &'static str,
}

/// A generated chat answer and how its choices' chunks interleave.
#[derive(Debug, Clone)]
struct GatewayAnswer {
    head: Map<String, Value>,
    choices: Vec<ChatChoice>,
    usage: Value,
    order: Vec<u8>,
}

fn chat_choice() -> impl Strategy<Value = ChatChoice> {
    (
        prop::collection::vec(piece(), 0..4),
        prop::option::of(pieces(8)),
        any::<bool>(),
        prop::collection::vec(("[a-z_]{1,8}", json_object(), sizes()), 0..3),
        prop::sample::select(vec!["stop", "length", "tool_calls", "content_filter"]),
    )
        .prop_map(
            |(reasoning, content, logprobs, calls, finish_reason)| ChatChoice {
                reasoning,
                content,
                logprobs,
                calls,
                finish_reason,
            },
        )
}

fn chat_answer() -> impl Strategy<Value = GatewayAnswer> {
    (
        "chatcmpl-[a-zA-Z0-9]{4}",
        any::<u32>(),
        prop::option::of("fp_[a-f0-9]{6}"),
        prop::collection::vec(chat_choice(), 1..4),
        (0u32..1000, 0u32..1000, prop::option::of(0u32..100)),
        prop::collection::vec(any::<u8>(), 0..40),
    )
        .prop_map(|(id, created, fingerprint, choices, tokens, order)| {
            let mut head = object(json!({"id": id, "created": created, "model": "gpt-x"}));
            if let Some(fingerprint) = fingerprint {
                head.insert("system_fingerprint".into(), json!(fingerprint));
            }
            let (prompt, completion, reasoning) = tokens;
            let mut usage = json!({"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion});
            if let Some(reasoning) = reasoning {
                usage["completion_tokens_details"] = json!({"reasoning_tokens": reasoning});
            }
            GatewayAnswer {
                head,
                choices,
                usage,
                order,
            }
        })
}

/// One token's log probability, as OpenAI streams it with its piece.
fn token(piece: &str) -> Value {
    json!({"token": piece, "logprob": -0.25, "bytes": piece.as_bytes(), "top_logprobs": []})
}

impl ChatChoice {
    /// The `choices` entries of this choice's chunks, in order.
    fn entries(&self, index: usize) -> Vec<Value> {
        let entry = |delta: Value, logprobs: Value, finish_reason: Value| {
            json!({"index": index, "delta": delta, "logprobs": logprobs,
                "finish_reason": finish_reason})
        };
        let opening = if self.content.is_some() {
            json!("")
        } else {
            Value::Null
        };
        let mut entries = vec![entry(
            json!({"role": "assistant", "content": opening, "refusal": null}),
            Value::Null,
            Value::Null,
        )];
        for piece in &self.reasoning {
            entries.push(entry(
                json!({"reasoning_content": piece}),
                Value::Null,
                Value::Null,
            ));
        }
        for piece in self.content.iter().flatten() {
            let logprobs = if self.logprobs {
                json!({"content": [token(piece)], "refusal": null})
            } else {
                Value::Null
            };
            entries.push(entry(json!({"content": piece}), logprobs, Value::Null));
        }
        for (n, (name, arguments, sizes)) in self.calls.iter().enumerate() {
            entries.push(entry(
                json!({"tool_calls": [{"index": n, "id": format!("call_{index}_{n}"),
                    "type": "function", "function": {"name": name, "arguments": ""}}]}),
                Value::Null,
                Value::Null,
            ));
            for fragment in split(&arguments.to_string(), sizes) {
                entries.push(entry(
                    json!({"tool_calls": [{"index": n, "function": {"arguments": fragment}}]}),
                    Value::Null,
                    Value::Null,
                ));
            }
        }
        entries.push(entry(json!({}), Value::Null, json!(self.finish_reason)));
        entries
    }

    /// The choice as the completion has it.
    fn stored(&self, index: usize) -> Value {
        let content = self.content.as_deref().map(concat);
        let mut message = json!({"role": "assistant", "content": content, "refusal": null});
        if !self.reasoning.is_empty() {
            message["reasoning_content"] = json!(concat(&self.reasoning));
        }
        if !self.calls.is_empty() {
            let calls: Vec<Value> = self
                .calls
                .iter()
                .enumerate()
                .map(|(n, (name, arguments, _))| {
                    json!({"id": format!("call_{index}_{n}"), "type": "function",
                        "function": {"name": name, "arguments": arguments.to_string()}})
                })
                .collect();
            message["tool_calls"] = json!(calls);
        }
        let logprobs = match &self.content {
            Some(pieces) if self.logprobs => {
                json!({"content": pieces.iter().map(|p| token(p)).collect::<Vec<_>>(),
                    "refusal": null})
            }
            _ => Value::Null,
        };
        json!({"index": index, "message": message, "logprobs": logprobs,
            "finish_reason": self.finish_reason})
    }
}

impl GatewayAnswer {
    /// Its chunks as OpenAI streams them to onejob (which always asks for the usage):
    /// `"usage": null` in every chunk, the choices' chunks interleaved, the usage chunk last.
    fn live(&self) -> Vec<Value> {
        let chunk = |choices: Value, usage: Value| {
            let mut chunk = self.head.clone();
            chunk.insert("object".into(), json!("chat.completion.chunk"));
            chunk.insert("choices".into(), choices);
            chunk.insert("usage".into(), usage);
            Value::Object(chunk)
        };
        let queues = self
            .choices
            .iter()
            .enumerate()
            .map(|(index, choice)| choice.entries(index))
            .collect();
        let mut chunks: Vec<Value> = interleave(queues, &self.order)
            .into_iter()
            .map(|entry| chunk(json!([entry]), Value::Null))
            .collect();
        chunks.push(chunk(json!([]), self.usage.clone()));
        chunks
    }

    /// The completion they add up to.
    fn stored(&self) -> Value {
        let mut completion = self.head.clone();
        completion.insert("object".into(), json!("chat.completion"));
        let choices: Vec<Value> = self
            .choices
            .iter()
            .enumerate()
            .map(|(index, choice)| choice.stored(index))
            .collect();
        completion.insert("choices".into(), json!(choices));
        completion.insert("usage".into(), self.usage.clone());
        Value::Object(completion)
    }
}

// --- Anthropic messages -----------------------------------------------------------------

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

// --- OpenAI responses -------------------------------------------------------------------

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
    fn a_replayed_chat_stream_assembles_as_the_live_one(
        answer in chat_answer(),
        include_usage in any::<bool>(),
    ) {
        let live = answer.live();
        let (stored, read) = relay(Endpoint::Chat, &live, include_usage);
        prop_assert_eq!(&stored, &answer.stored());
        let replayed = Endpoint::Chat.events_of(&stored, include_usage);
        let mut told = stored.clone();
        if !include_usage {
            told.as_object_mut().unwrap().remove("usage");
        }
        prop_assert_eq!(&assemble(Endpoint::Chat, &read), &told);
        prop_assert_eq!(&assemble(Endpoint::Chat, &replayed), &told);
        // The usage as OpenAI streams it: `null` in every chunk but the last where asked,
        // nowhere where not.
        for chunks in [&read, &replayed] {
            let (last, before) = chunks.split_last().unwrap();
            if include_usage {
                prop_assert_eq!(&last["usage"], &stored["usage"]);
                for chunk in before {
                    prop_assert_eq!(chunk.get("usage"), Some(&Value::Null));
                }
            } else {
                for chunk in chunks.iter() {
                    prop_assert!(chunk.get("usage").is_none(), "{}", chunk);
                }
            }
        }
    }

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
