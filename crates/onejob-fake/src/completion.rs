//! One chat completion, made once when the work starts and rendered on demand in either of
//! OpenAI's forms: one `chat.completion` JSON document, or a server-sent-event stream of
//! `chat.completion.chunk`s. Both forms of one completion carry the same id, the same answer
//! and (streamed) the same chunking, which is what lets an idempotent replay answer in either
//! form.
//!
//! The stream of a completion is:
//!
//! 1. the role chunk, delta `{"role": "assistant", "content": ""}` (`"content": null` when
//!    the answer is a tool call);
//! 2. one chunk per [`Completion::pieces`]: the content word by word (each piece keeps the
//!    whitespace before its word, so the pieces concatenate to the content), or a tool call's
//!    header (`id`, `type`, `name`, `arguments: ""`) and then its argument fragments;
//! 3. the finish chunk, an empty delta with `finish_reason` `"stop"` or `"tool_calls"`;
//! 4. only when the request asked `stream_options.include_usage`, a usage chunk with
//!    `"choices": []`;
//! 5. `data: [DONE]`.
//!
//! A completion with `reasoning` streams it first, word by word as `reasoning_content`
//! deltas (its JSON form carries it as the message's `reasoning_content`); one asked for
//! `logprobs` carries each content piece's log probability in its chunk (its JSON form, all
//! of them in the choice's `logprobs`), as OpenAI's do.
//!
//! A completion scripted to break (`break_stream_after`) stops after that many pieces of
//! step 2, without steps 3-5.

use axum::body::Bytes;
use serde_json::{Value, json};

/// The last event of a finished stream.
pub(crate) const DONE: &[u8] = b"data: [DONE]\n\n";

/// At most this many characters of a tool call's arguments go in one argument fragment.
const ARGUMENT_FRAGMENT_CHARS: usize = 8;

/// What the assistant answers.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Answer {
    /// A text answer.
    Content(String),
    /// A call of one of the request's tools.
    ToolCall {
        /// The call id, `call_…`.
        id: String,
        /// The function called.
        name: String,
        /// The call's arguments, as JSON text.
        arguments: String,
    },
}

/// One finished piece of work, ready to be rendered in either form.
#[derive(Clone, Debug)]
pub(crate) struct Completion {
    /// `chatcmpl-…`, the same in every form and chunk.
    pub(crate) id: String,
    /// Seconds since the Unix epoch.
    pub(crate) created: u64,
    /// The request's `model` (`"fake"` when it had none).
    pub(crate) model: String,
    /// The answer.
    pub(crate) answer: Answer,
    /// The `usage` object.
    pub(crate) usage: Value,
    /// The answer is cut after this many pieces (a stream that dies mid-way).
    pub(crate) break_after: Option<usize>,
    /// What the model thought before answering (`reasoning_content`).
    reasoning: Option<String>,
    /// Whether the request asked for `logprobs`.
    logprobs: bool,
    pieces: Vec<Value>,
}

impl Completion {
    /// A completion of `answer`; `pieces` are derived from it.
    pub(crate) fn new(
        id: String,
        created: u64,
        model: String,
        answer: Answer,
        usage: Value,
        break_after: Option<usize>,
    ) -> Completion {
        let pieces = deltas(&answer, None);
        Completion {
            id,
            created,
            model,
            answer,
            usage,
            break_after,
            reasoning: None,
            logprobs: false,
            pieces,
        }
    }

    /// The same completion, thinking `reasoning` first.
    pub(crate) fn thinking(mut self, reasoning: Option<String>) -> Completion {
        self.pieces = deltas(&self.answer, reasoning.as_deref());
        self.reasoning = reasoning;
        self
    }

    /// The same completion, with log probabilities when `asked`.
    pub(crate) fn with_logprobs(mut self, asked: bool) -> Completion {
        self.logprobs = asked;
        self
    }

    /// The log probabilities of the content pieces among `pieces`, as OpenAI's `logprobs`.
    fn logprobs_of<'a>(&self, pieces: impl Iterator<Item = &'a Value>) -> Option<Value> {
        self.logprobs.then(|| {
            let tokens: Vec<Value> = pieces
                .filter_map(|piece| piece.get("content").and_then(Value::as_str))
                .map(|token| {
                    json!({"token": token, "logprob": -0.25, "bytes": token.as_bytes(),
                        "top_logprobs": []})
                })
                .collect();
            json!({"content": tokens, "refusal": null})
        })
    }

    /// The deltas of the content chunks (step 2 of the stream), in order.
    pub(crate) fn pieces(&self) -> &[Value] {
        &self.pieces
    }

    /// How many pieces are ever sent: all of them, or fewer when the answer breaks.
    pub(crate) fn pieces_sent(&self) -> usize {
        self.break_after
            .map_or(self.pieces.len(), |cut| cut.min(self.pieces.len()))
    }

    /// Whether the answer is cut (no finish chunk, no `[DONE]`, no complete JSON).
    pub(crate) fn breaks(&self) -> bool {
        self.break_after.is_some()
    }

    fn finish_reason(&self) -> &'static str {
        match self.answer {
            Answer::Content(_) => "stop",
            Answer::ToolCall { .. } => "tool_calls",
        }
    }

    /// The non-streamed form: one `chat.completion` document.
    pub(crate) fn json(&self) -> Value {
        let message = match &self.answer {
            Answer::Content(content) => {
                json!({"role": "assistant", "content": content, "refusal": null})
            }
            Answer::ToolCall {
                id,
                name,
                arguments,
            } => json!({
                "role": "assistant",
                "content": null,
                "refusal": null,
                "tool_calls": [{
                    "id": id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }],
            }),
        };
        let mut message = message;
        if let Some(reasoning) = &self.reasoning {
            message["reasoning_content"] = json!(reasoning);
        }
        let mut choice = json!({
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": self.finish_reason(),
        });
        if let Some(logprobs) = self.logprobs_of(self.pieces.iter()) {
            choice["logprobs"] = logprobs;
        }
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": self.usage,
        })
    }

    fn chunk(&self, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        })
    }

    fn delta_event(&self, delta: &Value, finish_reason: Option<&str>) -> Bytes {
        event(&self.chunk(json!([{
            "index": 0,
            "delta": delta,
            "finish_reason": finish_reason,
        }])))
    }

    /// Step 1: the role chunk.
    pub(crate) fn role_event(&self) -> Bytes {
        let content = match self.answer {
            Answer::Content(_) => json!(""),
            Answer::ToolCall { .. } => Value::Null,
        };
        self.delta_event(&json!({"role": "assistant", "content": content}), None)
    }

    /// Step 2: the chunk of piece `index` (with its log probability, where asked).
    pub(crate) fn piece_event(&self, index: usize) -> Bytes {
        let piece = &self.pieces[index];
        match self
            .logprobs_of(std::iter::once(piece))
            .filter(|_| piece.get("content").is_some())
        {
            Some(logprobs) => event(&self.chunk(json!([{
                "index": 0,
                "delta": piece,
                "logprobs": logprobs,
                "finish_reason": null,
            }]))),
            None => self.delta_event(piece, None),
        }
    }

    /// Step 3: the finish chunk.
    pub(crate) fn finish_event(&self) -> Bytes {
        self.delta_event(&json!({}), Some(self.finish_reason()))
    }

    /// Step 4: the usage chunk.
    pub(crate) fn usage_event(&self) -> Bytes {
        let mut chunk = self.chunk(json!([]));
        chunk["usage"] = self.usage.clone();
        event(&chunk)
    }
}

/// One server-sent event carrying a JSON value.
fn event(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// The content chunks' deltas of an answer, after those of its `reasoning`.
fn deltas(answer: &Answer, reasoning: Option<&str>) -> Vec<Value> {
    let thoughts = reasoning
        .map(words_with_spacing)
        .unwrap_or_default()
        .into_iter()
        .map(|piece| json!({"reasoning_content": piece}));
    thoughts.chain(answer_deltas(answer)).collect()
}

fn answer_deltas(answer: &Answer) -> Vec<Value> {
    match answer {
        Answer::Content(content) => words_with_spacing(content)
            .into_iter()
            .map(|piece| json!({"content": piece}))
            .collect(),
        Answer::ToolCall {
            id,
            name,
            arguments,
        } => {
            let header = json!({"tool_calls": [{
                "index": 0,
                "id": id,
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }]});
            let fragments = fragments(arguments, ARGUMENT_FRAGMENT_CHARS)
                .into_iter()
                .map(|fragment| json!({"tool_calls": [{"index": 0, "function": {"arguments": fragment}}]}));
            std::iter::once(header).chain(fragments).collect()
        }
    }
}

/// Splits text into words, each keeping the whitespace before it (trailing whitespace is a
/// last piece of its own), so the pieces concatenate back to the text.
fn words_with_spacing(text: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut in_word = false;
    for (at, character) in text.char_indices() {
        let space = character.is_whitespace();
        if space && in_word && start < at {
            // A word just ended; the next piece starts with this whitespace.
            pieces.push(&text[start..at]);
            start = at;
        }
        in_word = !space;
    }
    if start < text.len() {
        pieces.push(&text[start..]);
    }
    pieces
}

/// Splits text into pieces of at most `size` characters.
fn fragments(text: &str, size: usize) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    for (count, (at, _)) in text.char_indices().enumerate() {
        if count > 0 && count % size == 0 {
            pieces.push(&text[start..at]);
            start = at;
        }
    }
    if start < text.len() {
        pieces.push(&text[start..]);
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(answer: Answer) -> Completion {
        Completion::new("chatcmpl-1".into(), 1, "m".into(), answer, json!({}), None)
    }

    #[test]
    fn words_keep_their_spacing_and_concatenate_back() {
        for text in [
            "{\"text\":\"fake answer: a red fox.\"}",
            "  leading and trailing  ",
            "one",
            "tabs\tand\nnew lines",
            "",
        ] {
            let pieces = words_with_spacing(text);
            assert_eq!(pieces.concat(), text, "{text:?}");
            assert!(pieces.iter().all(|piece| !piece.is_empty()));
        }
        assert_eq!(
            words_with_spacing("not json {"),
            ["not", " json", " {"],
            "one piece per word"
        );
    }

    #[test]
    fn fragments_cut_on_character_boundaries() {
        assert_eq!(fragments("{}", 8), ["{}"]);
        assert_eq!(fragments("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        assert_eq!(fragments("ééééé", 2).concat(), "ééééé");
        assert!(fragments("", 8).is_empty());
    }

    #[test]
    fn a_tool_call_streams_its_header_then_its_arguments() {
        let call = completion(Answer::ToolCall {
            id: "call_1".into(),
            name: "lookup".into(),
            arguments: "{\"city\":\"Paris\"}".into(),
        });
        let pieces = call.pieces();
        assert_eq!(pieces[0]["tool_calls"][0]["id"], "call_1");
        assert_eq!(pieces[0]["tool_calls"][0]["function"]["arguments"], "");
        let arguments: String = pieces[1..]
            .iter()
            .map(|piece| {
                piece["tool_calls"][0]["function"]["arguments"]
                    .as_str()
                    .unwrap()
            })
            .collect();
        assert_eq!(arguments, "{\"city\":\"Paris\"}");
        assert_eq!(call.json()["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(call.json()["choices"][0]["message"]["content"], Value::Null);
    }

    #[test]
    fn a_break_caps_the_pieces_sent() {
        let mut answer = completion(Answer::Content("a b c".into()));
        assert_eq!(answer.pieces_sent(), 3);
        answer.break_after = Some(2);
        assert_eq!(answer.pieces_sent(), 2);
        answer.break_after = Some(9);
        assert_eq!(answer.pieces_sent(), 3);
        assert!(answer.breaks());
    }
}
