//! A replayed chat completion stream: generated answers streamed as OpenAI streams them.

use proptest::prelude::*;

use super::*;

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
}
