//! The model APIs' adapter: `openai-chat` (an OpenAI-compatible API: `POST
//! {base_url}/chat/completions`, and for the gateway's other endpoints `/embeddings`,
//! `/responses`, `/images/generations`) and `anthropic-messages` (Anthropic's `POST
//! {base_url}/messages`), both [`ModelApi`].
//!
//! Messages come from the kind's prompt template rendered over the params (minijinja), or
//! from `params.prompt` (and `params.system`) without one. With an output schema the request
//! asks for it as `response_format` (`json_schema`, strict) and the answer's content is
//! parsed as that JSON; without one the output is `{"text": content}`. `temperature` comes
//! from the params, else the kind's `temperature`; `max_tokens` from the provider. The
//! structured-output form is the provider's `structured_output` (`json_schema` as OpenAI
//! takes it, `json_object` with a `schema` as llama-cpp-python takes it, or `none`). The
//! call is synchronous: the attempt is acknowledged once the request body has been handed to
//! the connection.
//!
//! For a gateway kind (`openai_models`) the job's params *are* the caller's chat request:
//! it is sent as it came, the caller's bytes as sent (key order, number spelling; see
//! `crate::gateway::request`) with `model` replaced by the provider's own, and the
//! upstream's whole `chat.completion` is the output. Such a request can also be streamed
//! ([`Provider::submit_streaming`]): the upstream's server-sent chunks are relayed as they
//! come and assembled into the completion, the whole stream counted against
//! `max_response_bytes`, and bounded by the kind's `stream_idle_timeout` between chunks and
//! `stream_max` in all (not by `attempt_timeout`: a stream that keeps producing is not cut).
//! The upstream's `x-request-id` comes back with its answer (and its refusals).
//!
//! A gateway kind of another endpoint is sent the same way to that endpoint's path under
//! `base_url` (`/embeddings`, `/responses`, `/images/generations`), streamed where the
//! endpoint streams. The `anthropic-messages` adapter is this one speaking Anthropic's
//! Messages API: `POST {base_url}/messages`, its key as `x-api-key` with an
//! `anthropic-version`, for kinds serving `anthropic_models` only.

use std::path::PathBuf;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{Value, json};

use super::{AttemptRequest, Provider, ProviderError, Sent, Submitted, TokenCount};
use crate::{
    config::{ProviderConfig, StructuredOutput},
    gateway::Endpoint,
    kind::Kind,
};

/// A model API (OpenAI-compatible, or Anthropic's Messages API): the `openai-chat` and
/// `anthropic-messages` adapters.
#[derive(Debug)]
pub struct ModelApi {
    name: String,
    url: String,
    base: String,
    anthropic: bool,
    root: String,
    model: String,
    api_key: Option<String>,
    idempotency_header: Option<String>,
    structured_output: StructuredOutput,
    max_tokens: Option<u32>,
    #[cfg_attr(not(feature = "tokenizers"), allow(dead_code))]
    tokenizer: Option<PathBuf>,
    request_timeout: std::time::Duration,
    max_response_bytes: u64,
    http: reqwest::Client,
}

impl ModelApi {
    /// Builds the adapter from its `[[provider]]` table (`base_url` and `model` required).
    pub fn new(config: &ProviderConfig, http: reqwest::Client) -> Result<Self, String> {
        let anthropic = config.adapter == crate::config::Adapter::AnthropicMessages;
        let adapter = if anthropic {
            "anthropic-messages"
        } else {
            "openai-chat"
        };
        let base = config
            .base_url
            .as_deref()
            .ok_or_else(|| format!("base_url is required for adapter {adapter}"))?;
        let model = config
            .model
            .clone()
            .ok_or_else(|| format!("model is required for adapter {adapter}"))?;
        Ok(Self {
            name: config.name.clone(),
            url: format!("{}/chat/completions", base.trim_end_matches('/')),
            base: base.trim_end_matches('/').to_owned(),
            anthropic,
            root: base
                .trim_end_matches('/')
                .trim_end_matches("/v1")
                .to_owned(),
            model,
            api_key: super::registry::api_key(config)?,
            idempotency_header: config.idempotency_header.clone(),
            structured_output: config.structured_output,
            max_tokens: config.max_tokens,
            tokenizer: match &config.tokenizer {
                // Checked now, read only when counting: a model's tokenizer.json can be tens
                // of megabytes, and only `onejob verify` counts.
                Some(_) if !cfg!(feature = "tokenizers") => {
                    return Err("tokenizer is set, but this onejob was built without the \
                                `tokenizers` feature (rebuild with it, or remove the key: \
                                `onejob verify` then counts with the upstream's tokenize \
                                endpoint only)"
                        .to_owned());
                }
                Some(path) if !path.is_file() => {
                    return Err(format!(
                        "tokenizer {} is not a readable file (give the path of the model's \
                         tokenizer.json)",
                        path.display()
                    ));
                }
                other => other.clone(),
            },
            request_timeout: config.request_timeout,
            max_response_bytes: config.max_response_bytes,
            http,
        })
    }

    /// The request body for `params` under `kind`, with an optional temperature override.
    pub fn request_body(
        &self,
        kind: &Kind,
        params: &Value,
        temperature: Option<f64>,
    ) -> Result<Value, ProviderError> {
        if kind.is_gateway() {
            return Ok(self.pass_through(kind.endpoint, params, temperature));
        }
        let mut messages = Vec::new();
        if let Some(system) = params.get("system").and_then(Value::as_str) {
            messages.push(json!({ "role": "system", "content": system }));
        }
        messages.push(json!({ "role": "user", "content": render_prompt(kind, params)? }));
        let mut body = json!({ "model": self.model, "messages": messages });
        let temperature = temperature
            .map(|t| json!(t))
            .or_else(|| params.get("temperature").filter(|t| t.is_number()).cloned())
            .or_else(|| kind.temperature.map(|t| json!(t)));
        if let Some(temperature) = temperature {
            body["temperature"] = temperature;
        }
        if let Some(max_tokens) = self.max_tokens {
            body["max_tokens"] = json!(max_tokens);
        }
        if let Some(schema) = &kind.output_schema {
            let name: String = kind
                .name
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            match self.structured_output {
                StructuredOutput::JsonSchema => {
                    body["response_format"] = json!({
                        "type": "json_schema",
                        "json_schema": { "name": name, "schema": schema.source(), "strict": true },
                    });
                }
                StructuredOutput::JsonObject => {
                    body["response_format"] =
                        json!({ "type": "json_object", "schema": schema.source() });
                }
                StructuredOutput::None => {}
            }
        }
        Ok(body)
    }
}

impl ModelApi {
    /// The API a request of `kind` speaks, for what its error answers prove: Anthropic's
    /// at the Messages API (whatever adapter sends it there), else OpenAI's.
    fn api(&self, kind: &Kind) -> super::UpstreamApi {
        if self.anthropic || (kind.is_gateway() && kind.endpoint == Endpoint::Messages) {
            super::UpstreamApi::Anthropic
        } else {
            super::UpstreamApi::OpenAi
        }
    }

    /// The bytes sent upstream for `request`, asking for a stream when `stream`: a gateway
    /// job's request as the caller sent it, else the body built from the params.
    fn body(&self, request: &AttemptRequest<'_>, stream: bool) -> Result<Vec<u8>, ProviderError> {
        let invalid = |e: serde_json::Error| ProviderError::Invalid(e.to_string());
        let endpoint = request.kind.endpoint;
        let stream_members: &[(&str, Value)] = match endpoint {
            Endpoint::Chat => &[
                ("stream", json!(true)),
                ("stream_options", json!({ "include_usage": true })),
            ],
            _ => &[("stream", json!(true))],
        };
        if request.kind.is_gateway()
            && let Some(sent) = request.request_body
        {
            let mut set = vec![("model", json!(self.model))];
            if endpoint == Endpoint::Responses {
                set.push(("store", json!(false)));
            }
            if let Some(temperature) = request.temperature
                && !matches!(endpoint, Endpoint::Embeddings | Endpoint::Images)
            {
                set.push(("temperature", json!(temperature)));
            }
            if let (Some(max_tokens), false, Endpoint::Chat) =
                (self.max_tokens, limited(request.params), endpoint)
            {
                set.push(("max_tokens", json!(max_tokens)));
            }
            if stream {
                set.extend(stream_members.iter().cloned());
            }
            return crate::gateway::request::forward(sent, &set, endpoint.delivery_fields())
                .map_err(invalid);
        }
        let mut body = self.request_body(request.kind, request.params, request.temperature)?;
        if stream {
            for (name, value) in stream_members {
                body[*name] = value.clone();
            }
        }
        serde_json::to_vec(&body).map_err(invalid)
    }

    /// A gateway job's request: the caller's, less its delivery fields (a job that came in by
    /// `POST /v1/jobs` may carry `stream` in its params; a non-streaming send never asks for
    /// a stream), with this provider's `model`, for the Responses API `store: false`, and for
    /// chat, where the caller set no limit, its `max_tokens`; `onejob verify`'s temperature
    /// override where the endpoint takes a temperature.
    fn pass_through(&self, endpoint: Endpoint, params: &Value, temperature: Option<f64>) -> Value {
        let mut body = params.clone();
        if let Some(members) = body.as_object_mut() {
            for field in endpoint.delivery_fields() {
                members.remove(*field);
            }
        }
        body["model"] = json!(self.model);
        if endpoint == Endpoint::Responses {
            body["store"] = json!(false);
        }
        if let Some(temperature) = temperature
            && !matches!(endpoint, Endpoint::Embeddings | Endpoint::Images)
        {
            body["temperature"] = json!(temperature);
        }
        if let (Some(max_tokens), false, Endpoint::Chat) =
            (self.max_tokens, limited(params), endpoint)
        {
            body["max_tokens"] = json!(max_tokens);
        }
        body
    }

    /// The POST of `body` to the upstream, with its headers, bounded by `timeout` in all.
    fn call(
        &self,
        request: &AttemptRequest<'_>,
        body: Vec<u8>,
        sent: Option<Sent>,
        timeout: std::time::Duration,
    ) -> reqwest::RequestBuilder {
        let body = reqwest::Body::wrap(SentBody {
            data: Some(Bytes::from(body)),
            sent,
        });
        let url = if request.kind.is_gateway() {
            format!("{}{}", self.base, request.kind.endpoint.upstream_path())
        } else {
            self.url.clone()
        };
        let mut call = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .timeout(timeout)
            .body(body);
        if self.anthropic {
            call = call.header("anthropic-version", ANTHROPIC_VERSION);
            if let Some(key) = &self.api_key {
                call = call.header("x-api-key", key);
            }
        } else if let Some(key) = &self.api_key {
            call = call.bearer_auth(key);
        }
        if let Some(header) = &self.idempotency_header {
            call = call.header(header.as_str(), &request.idempotency_key);
        }
        call
    }
}

/// The `anthropic-version` an `anthropic-messages` provider is sent.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Whether the caller's request sets its own limit on the answer's length.
fn limited(params: &Value) -> bool {
    params.get("max_tokens").is_some() || params.get("max_completion_tokens").is_some()
}

/// Reads an upstream's server-sent events, relaying each chunk to `sink` and assembling the
/// answer of `endpoint` ([`crate::gateway::assembly::Assembly::relay`]: the event that ends
/// the stream is held until the answer won); the whole stream is bounded by `limit` bytes,
/// and each wait for the next event by `idle`.
async fn relay_stream(
    endpoint: Endpoint,
    response: reqwest::Response,
    limit: u64,
    idle: std::time::Duration,
    sink: &crate::gateway::streams::StreamSink,
) -> Result<Value, ProviderError> {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;

    let mut read = 0u64;
    let bytes = response.bytes_stream().map(move |piece| {
        let piece = piece?;
        read += piece.len() as u64;
        Ok::<_, StreamError>(if read > limit {
            return Err(StreamError::TooLarge);
        } else {
            piece
        })
    });
    let mut events = bytes.eventsource();
    let mut assembly = crate::gateway::assembly::Assembly::new(endpoint);
    loop {
        let Ok(next) = tokio::time::timeout(idle, events.next()).await else {
            return Err(ProviderError::Ambiguous(format!(
                "the stream stalled: no event for {idle:?} (stream_idle_timeout)"
            )));
        };
        let Some(event) = next else {
            break;
        };
        let event = match event {
            Ok(event) => event,
            Err(eventsource_stream::EventStreamError::Transport(StreamError::TooLarge)) => {
                return Err(ProviderError::TooLarge { limit });
            }
            Err(error) => {
                return Err(ProviderError::Ambiguous(format!(
                    "the stream broke off: {error}"
                )));
            }
        };
        if event.data.trim() == "[DONE]" {
            return assembly
                .done()
                .map_err(|e| ProviderError::Ambiguous(e.to_string()));
        }
        if event.data.trim().is_empty() {
            continue;
        }
        let chunk: Value = serde_json::from_str(&event.data)
            .map_err(|e| ProviderError::BadAnswer(format!("a streamed chunk is not JSON: {e}")))?;
        let over = assembly
            .relay(chunk, sink)
            .map_err(|e| ProviderError::BadAnswer(e.to_string()))?;
        if let Some(answer) = over {
            return Ok(answer);
        }
    }
    Err(ProviderError::Ambiguous(
        "the stream ended without [DONE]: the upstream's answer is incomplete".into(),
    ))
}

/// Why reading a stream's bytes stopped.
#[derive(Debug, thiserror::Error)]
enum StreamError {
    #[error(transparent)]
    Transport(#[from] reqwest::Error),
    #[error("the stream is larger than max_response_bytes")]
    TooLarge,
}

/// The user prompt: the kind's template rendered over the params, else `params.prompt`,
/// else the params as JSON.
pub fn render_prompt(kind: &Kind, params: &Value) -> Result<String, ProviderError> {
    if let Some(template) = &kind.template {
        let env = minijinja::Environment::new();
        return env
            .render_str(template, minijinja::value::Serde(params))
            .map_err(|e| ProviderError::Invalid(format!("the prompt template failed: {e}")));
    }
    Ok(match params.get("prompt").and_then(Value::as_str) {
        Some(prompt) => prompt.to_owned(),
        None => params.to_string(),
    })
}

/// Reads the output out of a chat completion answer (for a gateway kind, the answer itself).
pub fn output_of(kind: &Kind, answer: &Value) -> Result<Value, ProviderError> {
    if kind.is_gateway() {
        return Ok(answer.clone());
    }
    let choice = answer
        .pointer("/choices/0")
        .ok_or_else(|| ProviderError::BadAnswer("the answer has no choices".into()))?;
    let content = choice
        .pointer("/message/content")
        .and_then(Value::as_str)
        .filter(|c| !c.trim().is_empty())
        .ok_or_else(|| ProviderError::BadAnswer("the answer's message content is empty".into()))?;
    if kind.output_schema.is_none() {
        return Ok(json!({ "text": content }));
    }
    serde_json::from_str(content).map_err(|e| {
        let finish = choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .unwrap_or("?");
        ProviderError::BadAnswer(format!(
            "the message content is not the requested JSON ({e}; finish_reason {finish})"
        ))
    })
}

#[async_trait]
impl Provider for ModelApi {
    fn name(&self) -> &str {
        &self.name
    }

    /// The upstream's own tokenizer where the server exposes one (llama-cpp-python's
    /// `/extras/tokenize`, llama.cpp's `/tokenize`), else tiktoken for OpenAI model names,
    /// else the configured local `tokenizer.json` (these two only in a build with the
    /// `tokenizers` feature).
    async fn count_tokens(&self, text: &str) -> Result<Option<TokenCount>, ProviderError> {
        let endpoints = [
            (
                "/extras/tokenize",
                json!({ "input": text, "model": self.model }),
            ),
            ("/tokenize", json!({ "content": text })),
        ];
        for (path, body) in endpoints {
            let call = self
                .http
                .post(format!("{}{path}", self.root))
                .json(&body)
                .timeout(self.request_timeout);
            if let Ok(answer) =
                super::answer::call_json(super::UpstreamApi::OpenAi, call, self.max_response_bytes)
                    .await
                && let Some(tokens) = answer.get("tokens").and_then(Value::as_array)
            {
                return Ok(Some(TokenCount {
                    tokens: tokens.len(),
                    tokenizer: format!("upstream {path}"),
                }));
            }
        }
        #[cfg(feature = "tokenizers")]
        {
            if let Ok(bpe) = tiktoken_rs::bpe_for_model(&self.model) {
                return Ok(Some(TokenCount {
                    tokens: bpe.encode_with_special_tokens(text).len(),
                    tokenizer: format!("tiktoken for {}", self.model),
                }));
            }
            if let Some(path) = &self.tokenizer {
                return count_with_file(path.clone(), text.to_owned())
                    .await
                    .map(Some);
            }
        }
        Ok(None)
    }

    async fn submit(
        &self,
        request: &AttemptRequest<'_>,
        sent: Option<Sent>,
    ) -> Result<Submitted, ProviderError> {
        if self.anthropic && !request.kind.is_gateway() {
            return Err(ProviderError::Invalid(
                "an anthropic-messages provider serves only kinds with anthropic_models".into(),
            ));
        }
        let body = self.body(request, false)?;
        let call = self.call(request, body, sent, request.kind.attempt_timeout);
        let answered =
            super::answer::call_answered(self.api(request.kind), call, self.max_response_bytes)
                .await?;
        let output = output_of(request.kind, &answered.body)?;
        let receipt = answered
            .body
            .get("id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        Ok(Submitted::Output {
            output,
            receipt,
            request_id: answered.request_id,
        })
    }

    async fn submit_streaming(
        &self,
        request: &AttemptRequest<'_>,
        sent: Option<Sent>,
        sink: &crate::gateway::streams::StreamSink,
    ) -> Result<Submitted, ProviderError> {
        if !request.kind.is_gateway() || !request.kind.endpoint.streams() {
            return Err(ProviderError::Unsupported("streaming"));
        }
        let kind = request.kind;
        let body = self.body(request, true)?;
        // The whole stream may take up to `stream_max`; each wait, for the answer's head as
        // for every event after it, at most `stream_idle_timeout`.
        let call = self.call(request, body, sent, kind.stream_max);
        let response = tokio::time::timeout(kind.stream_idle_timeout, call.send())
            .await
            .map_err(|_| {
                ProviderError::Ambiguous(format!(
                    "no answer within {:?} (stream_idle_timeout)",
                    kind.stream_idle_timeout
                ))
            })?
            .map_err(|e| ProviderError::from_transport(&e))?;
        let status = response.status();
        let headers = response.headers().clone();
        if !status.is_success() {
            let text = super::answer::read_body(response, self.max_response_bytes).await?;
            let text = String::from_utf8_lossy(&text);
            return Err(
                ProviderError::from_response(self.api(kind), status, &headers, &text)
                    .unwrap_or_else(|| ProviderError::BadAnswer(format!("HTTP {status}"))),
            );
        }
        let output = relay_stream(
            kind.endpoint,
            response,
            self.max_response_bytes,
            kind.stream_idle_timeout,
            sink,
        )
        .await?;
        let receipt = output.get("id").and_then(Value::as_str).map(str::to_owned);
        Ok(Submitted::Output {
            output,
            receipt,
            request_id: super::answer::request_id(&headers),
        })
    }

    /// Every request's body is a [`SentBody`], which fires the notice as the connection
    /// takes it.
    fn reports_sent(&self, _kind: &Kind) -> bool {
        true
    }

    fn idempotency_header(&self) -> Option<&str> {
        self.idempotency_header.as_deref()
    }
}

/// The request body: one JSON chunk of known length (sent with a `Content-Length`, not
/// chunked) that fires `sent` when the connection takes it. The transport only asks for the
/// body once the connection is up and the headers are out, so a refused connection never
/// fires it: that attempt definitely did not reach the upstream.
struct SentBody {
    data: Option<Bytes>,
    sent: Option<Sent>,
}

impl http_body::Body for SentBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let frame = this.data.take().map(|data| {
            if let Some(sent) = this.sent.take() {
                let _ = sent.send(());
            }
            Ok(http_body::Frame::data(data))
        });
        std::task::Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
    }
}

/// Counts `text` with a Hugging Face `tokenizer.json` (special tokens such as BOS included,
/// as the model would see them), off the async threads: loading one takes a while.
#[cfg(feature = "tokenizers")]
async fn count_with_file(path: PathBuf, text: String) -> Result<TokenCount, ProviderError> {
    tokio::task::spawn_blocking(move || {
        let tokenizer = tokenizers::Tokenizer::from_file(&path).map_err(|e| {
            ProviderError::Invalid(format!("tokenizer {} cannot be read: {e}", path.display()))
        })?;
        let encoding = tokenizer.encode(text, true).map_err(|e| {
            ProviderError::Invalid(format!("tokenizer {} failed: {e}", path.display()))
        })?;
        Ok(TokenCount {
            tokens: encoding.len(),
            tokenizer: format!("tokenizer.json {}", path.display()),
        })
    })
    .await
    .map_err(|e| ProviderError::Invalid(format!("counting tokens stopped: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Adapter, Config, DEMO_CONFIG};
    use crate::kind::Kinds;

    fn chat_kind() -> Kind {
        let config = Config::from_toml(
            DEMO_CONFIG,
            "demo.toml".as_ref(),
            ".".into(),
            std::iter::empty(),
        )
        .unwrap();
        let kinds = Kinds::compile(&config).unwrap();
        (**kinds.get("chat.completion").unwrap()).clone()
    }

    fn adapter(change: impl FnOnce(&mut ProviderConfig)) -> ModelApi {
        let mut config = ProviderConfig::new("llm", Adapter::OpenaiChat);
        config.base_url = Some("http://127.0.0.1:9/v1".into());
        config.model = Some("gemma-3-270m".into());
        change(&mut config);
        ModelApi::new(&config, crate::provider::http_client()).unwrap()
    }

    #[test]
    #[cfg(not(feature = "tokenizers"))]
    fn a_tokenizer_file_without_the_tokenizers_feature_is_a_configuration_error() {
        let mut config = ProviderConfig::new("chat", crate::config::Adapter::OpenaiChat);
        config.base_url = Some("http://127.0.0.1:9/v1".into());
        config.model = Some("m".into());
        config.tokenizer = Some("/nonexistent/tokenizer.json".into());
        let error = ModelApi::new(&config, crate::provider::http_client()).unwrap_err();
        assert!(error.contains("`tokenizers` feature"), "{error}");
    }

    #[test]
    #[cfg(feature = "tokenizers")]
    fn a_missing_tokenizer_file_is_a_configuration_error() {
        let mut config = ProviderConfig::new("chat", crate::config::Adapter::OpenaiChat);
        config.base_url = Some("http://127.0.0.1:9/v1".into());
        config.model = Some("m".into());
        config.tokenizer = Some("/nonexistent/tokenizer.json".into());
        let error = ModelApi::new(&config, crate::provider::http_client()).unwrap_err();
        assert!(
            error.contains("/nonexistent/tokenizer.json is not a readable file"),
            "{error}"
        );
    }

    #[test]
    fn structured_output_takes_the_configured_form() {
        let kind = chat_kind();
        let params = json!({"prompt": "hi"});
        let openai = adapter(|_| {}).request_body(&kind, &params, None).unwrap();
        assert_eq!(openai["response_format"]["type"], "json_schema");
        assert_eq!(openai["response_format"]["json_schema"]["strict"], true);
        let llama = adapter(|c| c.structured_output = StructuredOutput::JsonObject)
            .request_body(&kind, &params, None)
            .unwrap();
        assert_eq!(llama["response_format"]["type"], "json_object");
        assert_eq!(
            llama["response_format"]["schema"]["required"],
            json!(["text"])
        );
        let none = adapter(|c| c.structured_output = StructuredOutput::None)
            .request_body(&kind, &params, None)
            .unwrap();
        assert!(none.get("response_format").is_none());
    }

    #[test]
    fn temperature_comes_from_the_override_then_params_then_the_kind() {
        let mut kind = chat_kind();
        kind.temperature = Some(0.0);
        let llm = adapter(|c| c.max_tokens = Some(64));
        let from_kind = llm
            .request_body(&kind, &json!({"prompt": "x"}), None)
            .unwrap();
        assert_eq!(from_kind["temperature"], 0.0);
        assert_eq!(from_kind["max_tokens"], 64);
        let from_params = llm
            .request_body(&kind, &json!({"prompt": "x", "temperature": 0.7}), None)
            .unwrap();
        assert_eq!(from_params["temperature"], 0.7);
        let forced = llm
            .request_body(
                &kind,
                &json!({"prompt": "x", "temperature": 0.7}),
                Some(0.0),
            )
            .unwrap();
        assert_eq!(forced["temperature"], 0.0);
        assert_eq!(
            forced["messages"],
            json!([{"role": "user", "content": "x"}])
        );
    }
}
