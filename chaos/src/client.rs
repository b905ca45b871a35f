//! A client that records every request it sends and every answer it gets into a
//! [`History`], and resends submissions (and gateway calls) the way a careful client does:
//! same key, after `Retry-After`, on another node when one does not answer.

use std::{sync::Arc, time::Duration};

use reqwest::{Method, header::HeaderMap};
use serde_json::Value;
use tokio::time::Instant;

use crate::history::{History, Record};

/// What one recorded request got.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The HTTP status, or `None` when no answer came.
    pub status: Option<u16>,
    /// The `Retry-After` header.
    pub retry_after: Option<u64>,
    /// The body (JSON, or the text as a JSON string).
    pub body: Value,
    /// The `onejob-job-id` header (gateway answers).
    pub job_id: Option<String>,
}

impl Answer {
    /// Whether a careful client sends the same request again: no answer, 408 or 503.
    pub fn is_transient(&self) -> bool {
        matches!(self.status, None | Some(408 | 503))
    }
}

/// A plain HTTP client with a per-request `timeout` (TLS provider installed, as
/// `rustls-no-provider` requires, though the suite speaks plain HTTP on loopback).
pub fn http_client(timeout: Duration) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(timeout)
        .pool_max_idle_per_host(4)
        .build()
        .expect("http client")
}

/// A recording client for one principal.
#[derive(Clone)]
pub struct RecordingClient {
    http: reqwest::Client,
    history: Arc<History>,
    name: String,
    token: String,
}

impl RecordingClient {
    /// A client named `name` using API key `token`, writing to `history`.
    pub fn new(history: Arc<History>, name: impl Into<String>, token: &str) -> RecordingClient {
        RecordingClient {
            http: http_client(Duration::from_secs(30)),
            history,
            name: name.into(),
            token: token.to_owned(),
        }
    }

    /// Sends one request to node `node` at `base` and records both sides.
    pub async fn send(
        &self,
        node: usize,
        base: &str,
        method: Method,
        path: &str,
        key: Option<&str>,
        body: Option<&Value>,
    ) -> Answer {
        let seq = self.history.next_seq();
        self.history.write(&Record::Request {
            t_ms: self.history.now_ms(),
            seq,
            client: self.name.clone(),
            node,
            method: method.to_string(),
            path: path.to_owned(),
            key: key.map(str::to_owned),
            body: body.cloned(),
        });
        let mut request = self
            .http
            .request(method, format!("{base}{path}"))
            .bearer_auth(&self.token);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let (answer, record) = match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                let headers = response.headers().clone();
                let text = response.text().await.unwrap_or_default();
                let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
                let header = |h: &HeaderMap, name: &str| {
                    h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
                };
                let retry_after = header(&headers, "retry-after");
                let job_id = header(&headers, JOB_ID_HEADER);
                let record = Record::Response {
                    t_ms: self.history.now_ms(),
                    seq,
                    status: Some(status),
                    content_type: header(&headers, "content-type"),
                    retry_after: retry_after.clone(),
                    replayed: header(&headers, "idempotent-replayed"),
                    body: Some(body.clone()),
                    error: None,
                    job_id: job_id.clone(),
                };
                let answer = Answer {
                    status: Some(status),
                    retry_after: retry_after.and_then(|v| v.parse().ok()),
                    body,
                    job_id,
                };
                (answer, record)
            }
            Err(error) => {
                let message = format!("{error:?}");
                let record = Record::Response {
                    t_ms: self.history.now_ms(),
                    seq,
                    status: None,
                    content_type: None,
                    retry_after: None,
                    replayed: None,
                    body: None,
                    error: Some(message.clone()),
                    job_id: None,
                };
                let answer = Answer {
                    status: None,
                    retry_after: None,
                    body: Value::String(message),
                    job_id: None,
                };
                (answer, record)
            }
        };
        self.history.write(&record);
        answer
    }

    /// `POST /v1/jobs` once.
    pub async fn submit_once(&self, node: usize, base: &str, key: &str, body: &Value) -> Answer {
        self.send(node, base, Method::POST, "/v1/jobs", Some(key), Some(body))
            .await
    }

    /// Submits until an answer that is not transient, up to `tries` times, with the same
    /// key: after `Retry-After` (at most 2 s here) on a 503, on the next node when one
    /// gives no answer.
    pub async fn submit(
        &self,
        nodes: &[String],
        first: usize,
        key: &str,
        body: &Value,
        tries: usize,
    ) -> Answer {
        let mut node = first % nodes.len();
        let mut answer = self.submit_once(node, &nodes[node], key, body).await;
        for _ in 1..tries {
            if !answer.is_transient() {
                break;
            }
            let wait = answer.retry_after.unwrap_or(0).clamp(0, 2);
            tokio::time::sleep(Duration::from_millis(100 + wait * 1000)).await;
            if answer.status.is_none() {
                node = (node + 1) % nodes.len();
            }
            answer = self.submit_once(node, &nodes[node], key, body).await;
        }
        answer
    }

    /// `GET path`.
    pub async fn get(&self, node: usize, base: &str, path: &str) -> Answer {
        self.send(node, base, Method::GET, path, None, None).await
    }

    /// `POST /v1/chat/completions` (the gateway) once.
    pub async fn chat_once(&self, node: usize, base: &str, key: &str, body: &Value) -> Answer {
        self.send(node, base, Method::POST, CHAT_PATH, Some(key), Some(body))
            .await
    }

    /// Calls the gateway under `key` until it answers something that is not worth waiting
    /// for again, as an OpenAI SDK retries: the same key and body, after `Retry-After` (at
    /// most 5 s here) on a `409` (the job still runs, or awaits proof), a `408` or a `503`,
    /// on the next node when one gives no answer. At most `tries` calls, and none started
    /// once `within` has passed; returns the last answer.
    pub async fn chat(
        &self,
        nodes: &[String],
        first: usize,
        key: &str,
        body: &Value,
        tries: usize,
        within: Duration,
    ) -> Answer {
        let deadline = Instant::now() + within;
        let mut node = first % nodes.len();
        let mut answer = self.chat_once(node, &nodes[node], key, body).await;
        for _ in 1..tries {
            if !(answer.is_transient() || answer.status == Some(409)) {
                break;
            }
            let wait = Duration::from_millis(100 + answer.retry_after.unwrap_or(0).min(5) * 1000);
            if Instant::now() + wait >= deadline {
                break;
            }
            tokio::time::sleep(wait).await;
            if answer.status.is_none() {
                node = (node + 1) % nodes.len();
            }
            answer = self.chat_once(node, &nodes[node], key, body).await;
        }
        answer
    }
}

/// The gateway's chat path.
pub const CHAT_PATH: &str = "/v1/chat/completions";

/// The header naming the job of a gateway answer.
pub const JOB_ID_HEADER: &str = "onejob-job-id";
