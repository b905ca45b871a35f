//! The `openai-chat` adapter: an OpenAI-compatible `POST {base_url}/chat/completions`.
//!
//! Messages come from the kind's prompt template rendered over the params (minijinja), or
//! from `params.prompt` (and `params.system`) without one. With an output schema the request
//! asks for it as `response_format` (`json_schema`, strict) and the answer's content is
//! parsed as that JSON; without one the output is `{"text": content}`. `temperature` is taken
//! from the params. The call is synchronous: the attempt is acknowledged once the request
//! body has been handed to the connection.

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream;
use serde_json::{Value, json};

use super::{AttemptRequest, Provider, ProviderError, Sent, Submitted, TokenCount};
use crate::{config::ProviderConfig, kind::Kind};

/// An OpenAI-compatible chat completions endpoint.
#[derive(Debug)]
pub struct OpenAiChat {
    name: String,
    url: String,
    root: String,
    model: String,
    api_key: Option<String>,
    idempotency_header: Option<String>,
    http: reqwest::Client,
}

impl OpenAiChat {
    /// Builds the adapter from its `[[provider]]` table (`base_url` and `model` required).
    pub fn new(config: &ProviderConfig, http: reqwest::Client) -> Result<Self, String> {
        let base = config
            .base_url
            .as_deref()
            .ok_or("base_url is required for adapter openai-chat")?;
        let model = config
            .model
            .clone()
            .ok_or("model is required for adapter openai-chat")?;
        Ok(Self {
            name: config.name.clone(),
            url: format!("{}/chat/completions", base.trim_end_matches('/')),
            root: base
                .trim_end_matches('/')
                .trim_end_matches("/v1")
                .to_owned(),
            model,
            api_key: super::registry::api_key(config)?,
            idempotency_header: config.idempotency_header.clone(),
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
        let mut messages = Vec::new();
        if let Some(system) = params.get("system").and_then(Value::as_str) {
            messages.push(json!({ "role": "system", "content": system }));
        }
        messages.push(json!({ "role": "user", "content": render_prompt(kind, params)? }));
        let mut body = json!({ "model": self.model, "messages": messages });
        if let Some(temperature) = temperature {
            body["temperature"] = json!(temperature);
        } else if let Some(temperature) = params.get("temperature").filter(|t| t.is_number()) {
            body["temperature"] = temperature.clone();
        }
        if let Some(schema) = &kind.output_schema {
            let name: String = kind
                .name
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            body["response_format"] = json!({
                "type": "json_schema",
                "json_schema": { "name": name, "schema": schema.source(), "strict": true },
            });
        }
        Ok(body)
    }
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

/// Reads the output out of a chat completion answer.
pub fn output_of(kind: &Kind, answer: &Value) -> Result<Value, ProviderError> {
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
impl Provider for OpenAiChat {
    fn name(&self) -> &str {
        &self.name
    }

    /// The upstream's own tokenizer where the server exposes one (llama-cpp-python's
    /// `/extras/tokenize`, llama.cpp's `/tokenize`), else tiktoken for OpenAI model names.
    async fn count_tokens(&self, text: &str) -> Result<Option<TokenCount>, ProviderError> {
        let endpoints = [
            (
                "/extras/tokenize",
                json!({ "input": text, "model": self.model }),
            ),
            ("/tokenize", json!({ "content": text })),
        ];
        for (path, body) in endpoints {
            let Ok(response) = self
                .http
                .post(format!("{}{path}", self.root))
                .json(&body)
                .send()
                .await
            else {
                continue;
            };
            if !response.status().is_success() {
                continue;
            }
            if let Ok(answer) = response.json::<Value>().await
                && let Some(tokens) = answer.get("tokens").and_then(Value::as_array)
            {
                return Ok(Some(TokenCount {
                    tokens: tokens.len(),
                    tokenizer: format!("upstream {path}"),
                }));
            }
        }
        if let Ok(bpe) = tiktoken_rs::bpe_for_model(&self.model) {
            return Ok(Some(TokenCount {
                tokens: bpe.encode_with_special_tokens(text).len(),
                tokenizer: format!("tiktoken for {}", self.model),
            }));
        }
        Ok(None)
    }

    async fn submit(
        &self,
        request: &AttemptRequest<'_>,
        sent: Option<Sent>,
    ) -> Result<Submitted, ProviderError> {
        let body = self.request_body(request.kind, request.params, request.temperature)?;
        let body = serde_json::to_vec(&body).map_err(|e| ProviderError::Invalid(e.to_string()))?;
        // The body is one chunk; when the transport asks for the next one, the request is out.
        let mut sent = sent;
        let chunks = stream::iter([Ok::<_, std::io::Error>(Bytes::from(body))]).chain(
            stream::poll_fn(move |_| {
                if let Some(sent) = sent.take() {
                    let _ = sent.send(());
                }
                std::task::Poll::Ready(None)
            }),
        );
        let mut call = self
            .http
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(reqwest::Body::wrap_stream(chunks));
        if let Some(key) = &self.api_key {
            call = call.bearer_auth(key);
        }
        if let Some(header) = &self.idempotency_header {
            call = call.header(header.as_str(), &request.idempotency_key);
        }
        let response = call
            .send()
            .await
            .map_err(|e| ProviderError::from_transport(&e))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| ProviderError::Ambiguous(format!("reading the answer failed: {e}")))?;
        if let Some(error) = ProviderError::from_status(status, &text) {
            return Err(error);
        }
        let answer: Value = serde_json::from_str(&text)
            .map_err(|e| ProviderError::BadAnswer(format!("the answer is not JSON: {e}")))?;
        output_of(request.kind, &answer).map(Submitted::Output)
    }
}

use futures::StreamExt as _;
