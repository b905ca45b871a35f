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

mod chat;
mod messages;
mod responses;
