//! The gateway's endpoints: what each one's request is as a job, what a real answer there
//! is, which request fields only say how the answer is delivered, and how a stored answer is
//! streamed again.
//!
//! A gateway kind serves exactly one endpoint, named by the key that lists its models:
//! `openai_models` (chat completions), `embedding_models`, `responses_models`,
//! `image_models` or `anthropic_models` (Anthropic's Messages API).

use serde_json::Value;

use onejob_domain::FieldError;

/// An endpoint of the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Endpoint {
    /// `POST /v1/chat/completions`.
    #[default]
    Chat,
    /// `POST /v1/embeddings`.
    Embeddings,
    /// `POST /v1/responses` (stateless).
    Responses,
    /// `POST /v1/images/generations`.
    Images,
    /// Anthropic's `POST /v1/messages`.
    Messages,
}

impl Endpoint {
    /// Every endpoint.
    pub const ALL: [Endpoint; 5] = [
        Endpoint::Chat,
        Endpoint::Embeddings,
        Endpoint::Responses,
        Endpoint::Images,
        Endpoint::Messages,
    ];

    /// Its path at onejob.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Chat => "/v1/chat/completions",
            Endpoint::Embeddings => "/v1/embeddings",
            Endpoint::Responses => "/v1/responses",
            Endpoint::Images => "/v1/images/generations",
            Endpoint::Messages => "/v1/messages",
        }
    }

    /// Its path under a provider's `base_url` (which ends in `/v1`).
    pub fn upstream_path(self) -> &'static str {
        self.path().trim_start_matches("/v1")
    }

    /// The `[[kind]]` key that lists the models a kind serves here.
    pub fn config_key(self) -> &'static str {
        match self {
            Endpoint::Chat => "openai_models",
            Endpoint::Embeddings => "embedding_models",
            Endpoint::Responses => "responses_models",
            Endpoint::Images => "image_models",
            Endpoint::Messages => "anthropic_models",
        }
    }

    /// What a request here is called in messages.
    pub fn request_name(self) -> &'static str {
        match self {
            Endpoint::Chat => "an OpenAI chat completion request",
            Endpoint::Embeddings => "an OpenAI embeddings request",
            Endpoint::Responses => "an OpenAI Responses API request",
            Endpoint::Images => "an OpenAI image generation request",
            Endpoint::Messages => "an Anthropic Messages API request",
        }
    }

    /// The request fields that say how the answer is delivered, not what is asked: not part
    /// of the job's params or fingerprint, and not sent upstream as the caller sent them.
    pub fn delivery_fields(self) -> &'static [&'static str] {
        match self {
            Endpoint::Chat | Endpoint::Responses => &["stream", "stream_options"],
            Endpoint::Messages => &["stream"],
            Endpoint::Embeddings | Endpoint::Images => &[],
        }
    }

    /// Whether answers here can be streamed.
    pub fn streams(self) -> bool {
        matches!(
            self,
            Endpoint::Chat | Endpoint::Responses | Endpoint::Messages
        )
    }

    /// The member of a request here that holds its conversation (chat's and Anthropic's
    /// `messages`, the Responses API's `input`); `None` where a request has none.
    pub fn conversation_member(self) -> Option<&'static str> {
        match self {
            Endpoint::Chat | Endpoint::Messages => Some("messages"),
            Endpoint::Responses => Some("input"),
            Endpoint::Embeddings | Endpoint::Images => None,
        }
    }

    /// The items of a request's conversation (see [`Endpoint::conversation_member`]), in
    /// order: a Responses API `input` given as text is the one user message it stands for
    /// (`{"role": "user", "content": text}`, as the SDKs send it again on a run's next step).
    /// `None` where the endpoint has no conversation, or the request holds none.
    pub fn conversation(self, params: &Value) -> Option<Vec<Value>> {
        match params.get(self.conversation_member()?)? {
            Value::Array(items) => Some(items.clone()),
            Value::String(text) if self == Endpoint::Responses => {
                Some(vec![serde_json::json!({ "role": "user", "content": text })])
            }
            _ => None,
        }
    }

    /// Whether its stream names each event (`event: <type>`), as the Responses and
    /// Messages APIs do, rather than sending bare `data:` lines ending `[DONE]`.
    pub fn named_events(self) -> bool {
        matches!(self, Endpoint::Responses | Endpoint::Messages)
    }

    /// Checks a request's params (the request less its delivery).
    pub fn check_request(self, params: &Value) -> Result<(), Vec<FieldError>> {
        let Some(request) = params.as_object() else {
            return refuse("/", &format!("{} is a JSON object", self.request_name()));
        };
        match self {
            Endpoint::Chat => super::check_request(params),
            Endpoint::Embeddings => match request.get("input") {
                Some(Value::String(text)) if !text.is_empty() => Ok(()),
                Some(Value::Array(items)) if !items.is_empty() => Ok(()),
                _ => refuse(
                    "/input",
                    "an embeddings request needs an `input`: a non-empty string or array",
                ),
            },
            // Run in the background, the upstream would answer `queued` with no output, by
            // whichever door the job came in (the gateway says so before this, in its words).
            Endpoint::Responses if request.get("background") == Some(&Value::Bool(true)) => refuse(
                "/background",
                "`background: true` is not supported: onejob runs the call and waits for \
                     its answer itself",
            ),
            Endpoint::Responses => match request.get("input") {
                Some(Value::String(text)) if !text.is_empty() => Ok(()),
                Some(Value::Array(items)) if !items.is_empty() => Ok(()),
                _ => refuse(
                    "/input",
                    "a Responses API request needs an `input`: text or a non-empty array of \
                     items",
                ),
            },
            Endpoint::Images => match request.get("prompt") {
                Some(Value::String(text)) if !text.trim().is_empty() => Ok(()),
                _ => refuse(
                    "/prompt",
                    "an image generation request needs a non-empty `prompt`",
                ),
            },
            Endpoint::Messages => {
                if !request.get("max_tokens").is_some_and(Value::is_u64) {
                    return refuse(
                        "/max_tokens",
                        "a Messages API request needs `max_tokens`, a positive integer",
                    );
                }
                match request.get("messages").and_then(Value::as_array) {
                    Some(messages) if !messages.is_empty() => {
                        for (i, message) in messages.iter().enumerate() {
                            if !message.get("role").is_some_and(Value::is_string) {
                                return refuse(
                                    &format!("/messages/{i}"),
                                    "each message is an object with a string `role`",
                                );
                            }
                        }
                        Ok(())
                    }
                    _ => refuse(
                        "/messages",
                        "a Messages API request needs a non-empty `messages` array",
                    ),
                }
            }
        }
    }

    /// Whether `answer` is a real one here ("no fake success").
    pub fn check_answer(self, answer: &Value) -> Result<(), Vec<FieldError>> {
        match self {
            Endpoint::Chat => super::check_completion(answer),
            Endpoint::Embeddings => {
                let data = answer.get("data").and_then(Value::as_array);
                let real = |item: &Value| match item.get("embedding") {
                    Some(Value::Array(numbers)) => !numbers.is_empty(),
                    Some(Value::String(encoded)) => !encoded.is_empty(),
                    _ => false,
                };
                match data {
                    Some(items) if !items.is_empty() && items.iter().all(real) => Ok(()),
                    _ => refuse(
                        "/data",
                        "the answer has no embeddings (or an empty one): no real answer",
                    ),
                }
            }
            Endpoint::Images => {
                let data = answer.get("data").and_then(Value::as_array);
                fn text<'a>(item: &'a Value, field: &str) -> Option<&'a str> {
                    item.get(field).and_then(Value::as_str)
                }
                let real = |item: &Value| {
                    text(item, "url").is_some_and(|url| image_url(url).is_some())
                        || text(item, "b64_json").is_some_and(is_image_base64)
                };
                match data {
                    Some(items) if !items.is_empty() && items.iter().all(real) => Ok(()),
                    _ => refuse(
                        "/data",
                        "the answer has no image (each needs a url, http(s) or data:image/, or \
                         b64_json, the base64 of an image's bytes): no real answer",
                    ),
                }
            }
            Endpoint::Responses => {
                if answer.get("status").and_then(Value::as_str) == Some("failed") {
                    return refuse("/status", "the response failed: no real answer");
                }
                let items = answer.get("output").and_then(Value::as_array);
                let real = |item: &Value| match item.get("type").and_then(Value::as_str) {
                    Some("message") => {
                        item.get("content")
                            .and_then(Value::as_array)
                            .is_some_and(|parts| {
                                parts.iter().any(|part| {
                                    ["text", "refusal"].iter().any(|field| {
                                        part.get(*field)
                                            .and_then(Value::as_str)
                                            .is_some_and(|t| !t.trim().is_empty())
                                    })
                                })
                            })
                    }
                    Some("reasoning") | None => false,
                    Some(_) => true,
                };
                if items.is_some_and(|items| items.iter().any(real)) {
                    Ok(())
                } else {
                    refuse(
                        "/output",
                        "the response has no output text and no tool call: no real answer",
                    )
                }
            }
            Endpoint::Messages => {
                let blocks = answer.get("content").and_then(Value::as_array);
                let real = |block: &Value| match block.get("type").and_then(Value::as_str) {
                    Some("text") => block
                        .get("text")
                        .and_then(Value::as_str)
                        .is_some_and(|t| !t.trim().is_empty()),
                    Some("thinking" | "redacted_thinking") | None => false,
                    Some(_) => true,
                };
                if blocks.is_some_and(|blocks| blocks.iter().any(real)) {
                    Ok(())
                } else {
                    refuse(
                        "/content",
                        "the message has no text and no tool use: no real answer",
                    )
                }
            }
        }
    }

    /// What an asynchronous task's result (an `async-task` provider's) is as this endpoint's
    /// answer, for `request`. For images: an `ImagesResponse` whose `data` are the task's
    /// images (its `data` or `images` array, or the result itself as an array or a string),
    /// each a URL string or an object with `url`, `image_url` or `b64_json` (a `data:` URL
    /// becomes `b64_json`), keeping only those in the form `response_format` asks for, so a
    /// task without an image of that form answers no image (a failed attempt). Other
    /// endpoints take the result as it is.
    pub fn task_output(self, output: Value, request: &Value) -> Value {
        if self != Endpoint::Images {
            return output;
        }
        let items: Vec<Value> = match &output {
            Value::Object(result) => ["data", "images"]
                .iter()
                .find_map(|field| result.get(*field).and_then(Value::as_array))
                .cloned()
                .unwrap_or_default(),
            Value::Array(items) => items.clone(),
            Value::String(_) => vec![output.clone()],
            _ => Vec::new(),
        };
        let asked = request.get("response_format").and_then(Value::as_str);
        let data: Vec<Value> = items
            .iter()
            .filter_map(image_of)
            .filter(|image| match asked {
                Some(form @ ("url" | "b64_json")) => image.get(form).is_some(),
                _ => true,
            })
            .collect();
        let created = output
            .get("created")
            .filter(|c| c.is_u64())
            .cloned()
            .unwrap_or_else(|| {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                Value::from(now)
            });
        serde_json::json!({ "created": created, "data": data })
    }

    /// A stored answer as the events of a stream (for a chat completion, its chunks, the
    /// usage chunk where asked).
    pub fn events_of(self, answer: &Value, include_usage: bool) -> Vec<Value> {
        match self {
            Endpoint::Responses => onejob_domain::wire::response_events(answer),
            Endpoint::Messages => onejob_domain::wire::message_events(answer),
            _ => super::completion::chunks_of(answer, include_usage),
        }
    }
}

/// One image of a task's result as an `Image` (`url` or `b64_json`, and `revised_prompt`):
/// from a string (an `http(s)` URL, a `data:image/…;base64,` URL or the base64 of an image's
/// bytes) or an object's `url`, `image_url` or `b64_json` in those forms. Anything else (a
/// task whose result is `"content policy violation"`) is no image.
fn image_of(item: &Value) -> Option<Value> {
    let mut image = serde_json::Map::new();
    let text = |field: &str| item.get(field).and_then(Value::as_str);
    let mut take = |text: &str| match image_url(text) {
        Some(ImageUrl::Http) => {
            image.insert("url".into(), Value::from(text));
        }
        Some(ImageUrl::Data(encoded)) => {
            image.insert("b64_json".into(), Value::from(encoded));
        }
        None if is_image_base64(text) => {
            image.insert("b64_json".into(), Value::from(text));
        }
        None => {}
    };
    match item {
        Value::String(text) => take(text),
        _ => {
            if let Some(url) = text("url").or_else(|| text("image_url")) {
                take(url);
            }
            if let Some(encoded) = text("b64_json") {
                take(encoded);
            }
        }
    }
    if image.is_empty() {
        return None;
    }
    if let Some(revised) = text("revised_prompt").filter(|s| !s.trim().is_empty()) {
        image.insert("revised_prompt".into(), Value::from(revised));
    }
    Some(Value::Object(image))
}

/// What an image URL is.
#[derive(Debug, PartialEq, Eq)]
enum ImageUrl<'a> {
    /// An `http://` or `https://` URL.
    Http,
    /// A `data:image/…;base64,` URL, with its base64 image bytes.
    Data(&'a str),
}

/// `text` as an image URL: an `http(s)` URL with a host, or a `data:image/…;base64,` URL
/// whose data is the base64 of an image's bytes; `None` for anything else.
fn image_url(text: &str) -> Option<ImageUrl<'_>> {
    let text = text.trim();
    let lower = text.get(..8).unwrap_or(text).to_ascii_lowercase();
    if let Some(rest) = ["http://", "https://"]
        .iter()
        .find(|scheme| lower.starts_with(**scheme))
        .map(|scheme| &text[scheme.len()..])
    {
        let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
        return (!host.is_empty() && !rest.contains(char::is_whitespace)).then_some(ImageUrl::Http);
    }
    let (_, encoded) = text.strip_prefix("data:image/")?.split_once(";base64,")?;
    is_image_base64(encoded).then_some(ImageUrl::Data(encoded))
}

/// Whether `text` is the standard base64 of an image's bytes: base64 characters only, and
/// bytes that begin as a PNG, JPEG, GIF, WebP, BMP, TIFF, AVIF or HEIF file does.
fn is_image_base64(text: &str) -> bool {
    use base64::Engine;

    let text = text.trim();
    let base64_only = text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
    // 16 characters are 12 bytes: enough for every signature below.
    let Some(head) = text.get(..16).filter(|_| base64_only) else {
        return false;
    };
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(head) else {
        return false;
    };
    const SIGNATURES: [&[u8]; 7] = [
        b"\x89PNG\r\n\x1a\n",
        b"\xff\xd8\xff",
        b"GIF87a",
        b"GIF89a",
        b"BM",
        b"II*\0",
        b"MM\0*",
    ];
    const HEIF_BRANDS: [&[u8]; 5] = [b"avif", b"avis", b"heic", b"heix", b"mif1"];
    let at = |from: usize| bytes.get(from..from + 4).unwrap_or_default();
    SIGNATURES
        .iter()
        .any(|signature| bytes.starts_with(signature))
        || (at(0) == b"RIFF" && at(8) == b"WEBP")
        || (at(4) == b"ftyp" && HEIF_BRANDS.contains(&at(8)))
}

fn refuse(path: &str, message: &str) -> Result<(), Vec<FieldError>> {
    Err(vec![FieldError {
        path: path.into(),
        message: message.into(),
    }])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_embedding_answer_needs_every_embedding() {
        let e = Endpoint::Embeddings;
        assert!(
            e.check_answer(&json!({"data": [{"embedding": [0.1]}, {"embedding": "AAAA"}]}))
                .is_ok()
        );
        assert!(e.check_answer(&json!({"data": []})).is_err());
        assert!(
            e.check_answer(&json!({"data": [{"embedding": [0.1]}, {"embedding": []}]}))
                .is_err()
        );
    }

    #[test]
    fn a_message_or_response_needs_text_or_a_tool_call() {
        let m = Endpoint::Messages;
        assert!(
            m.check_answer(&json!({"content": [{"type": "text", "text": "hi"}]}))
                .is_ok()
        );
        assert!(
            m.check_answer(&json!({"content": [{"type": "tool_use", "name": "w"}]}))
                .is_ok()
        );
        assert!(
            m.check_answer(&json!({"content": [{"type": "text", "text": " "}]}))
                .is_err()
        );
        let r = Endpoint::Responses;
        let text = |t: &str| {
            json!({"status": "completed", "output": [{"type": "message",
            "content": [{"type": "output_text", "text": t}]}]})
        };
        assert!(r.check_answer(&text("hi")).is_ok());
        assert!(r.check_answer(&text("")).is_err());
        assert!(
            r.check_answer(&json!({"output": [{"type": "function_call", "name": "w"}]}))
                .is_ok()
        );
    }

    #[test]
    fn requests_need_their_input() {
        assert!(
            Endpoint::Embeddings
                .check_request(&json!({"input": ["a"]}))
                .is_ok()
        );
        assert_eq!(
            Endpoint::Embeddings
                .check_request(&json!({"input": []}))
                .unwrap_err()[0]
                .path,
            "/input"
        );
        assert_eq!(
            Endpoint::Messages
                .check_request(&json!({"messages": [{"role": "user", "content": "x"}]}))
                .unwrap_err()[0]
                .path,
            "/max_tokens"
        );
        assert!(
            Endpoint::Images
                .check_request(&json!({"prompt": "a fox"}))
                .is_ok()
        );
    }

    #[test]
    fn a_tasks_images_are_an_images_response_in_the_form_asked() {
        let images = Endpoint::Images;
        let task = json!({"images": [{"url": "https://x/a.png"}, "https://x/b.png",
            {"image_url": format!("data:image/png;base64,{PNG}")}]});
        let answer = images.task_output(task.clone(), &json!({"prompt": "a fox"}));
        assert_eq!(
            answer["data"],
            json!([{"url": "https://x/a.png"}, {"url": "https://x/b.png"},
                {"b64_json": PNG}])
        );
        assert!(answer["created"].is_u64());
        assert!(images.check_answer(&answer).is_ok());
        let b64 = images.task_output(task, &json!({"response_format": "b64_json"}));
        assert_eq!(b64["data"], json!([{"b64_json": PNG}]));
        let none = images.task_output(
            json!({"images": [{"url": "https://x/a.png"}]}),
            &json!({"response_format": "b64_json"}),
        );
        assert!(
            images.check_answer(&none).is_err(),
            "no image in the form asked: no answer"
        );
        assert!(
            images
                .check_answer(&images.task_output(json!({"images": []}), &json!({})))
                .is_err()
        );
        assert_eq!(
            Endpoint::Chat.task_output(json!({"a": 1}), &json!({})),
            json!({"a": 1})
        );
    }

    /// The first bytes of a PNG file, as base64.
    const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB";

    #[test]
    fn an_image_is_a_url_a_data_url_or_image_bytes_and_nothing_else() {
        let images = Endpoint::Images;
        let image = |result: Value| images.task_output(result, &json!({}));
        for (result, expected) in [
            (
                json!("https://cdn.example/a.png"),
                json!([{"url": "https://cdn.example/a.png"}]),
            ),
            (
                json!("HTTP://cdn.example/a"),
                json!([{"url": "HTTP://cdn.example/a"}]),
            ),
            (json!(PNG), json!([{"b64_json": PNG}])),
            (
                json!("/9j/4AAQSkZJRgABAQAAAQABAAD"),
                json!([{"b64_json": "/9j/4AAQSkZJRgABAQAAAQABAAD"}]),
            ),
            (
                json!("UklGRiQAAABXRUJQVlA4IBgAAAAw"),
                json!([{"b64_json": "UklGRiQAAABXRUJQVlA4IBgAAAAw"}]),
            ),
            (json!({"b64_json": PNG}), json!([{"b64_json": PNG}])),
        ] {
            let answer = image(json!({"images": [result.clone()]}));
            assert_eq!(answer["data"], expected, "{result}");
            assert!(images.check_answer(&answer).is_ok(), "{result}");
        }
        for junk in [
            json!("content policy violation"),
            json!("a red fox"),
            json!("ftp://files.example/a.png"),
            json!("https://"),
            json!("data:text/plain;base64,aGVsbG8gd29ybGQgaGVsbG8"),
            json!("data:image/png;base64,bm90IGFuIGltYWdlIGF0IGFsbA=="),
            json!("aGVsbG8gd29ybGQgaGVsbG8gd29ybGQ="),
            json!({"url": "content policy violation"}),
            json!({"b64_json": "content policy violation"}),
        ] {
            let answer = image(json!({"images": [junk.clone()]}));
            assert_eq!(answer["data"], json!([]), "{junk}");
            assert!(images.check_answer(&answer).is_err(), "{junk}");
            assert!(
                images
                    .check_answer(&json!({"data": [{"url": junk.clone()}]}))
                    .is_err(),
                "{junk} as a url"
            );
        }
        assert!(
            images
                .check_answer(&json!({"data": [{"b64_json": "not an image"}]}))
                .is_err()
        );
    }

    #[test]
    fn upstream_paths_sit_under_v1() {
        assert_eq!(Endpoint::Embeddings.upstream_path(), "/embeddings");
        assert_eq!(Endpoint::Messages.upstream_path(), "/messages");
        assert_eq!(Endpoint::Chat.upstream_path(), "/chat/completions");
    }
}
