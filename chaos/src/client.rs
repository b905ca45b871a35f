//! A client that records every request it sends and every answer it gets into a
//! [`History`], and resends submissions (and gateway calls) the way a careful client does:
//! same key, after `Retry-After`, on another node when one does not answer. It also plays
//! the caller that goes away mid-call ([`Vanish`]), over a raw TCP connection it closes at
//! the chosen point, and records where it went away.

use std::{sync::Arc, time::Duration};

use reqwest::{Method, header::HeaderMap};
use serde_json::Value;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    time::Instant,
};

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

    /// Sends `POST path` with `body` under `key` to node `node` at `base` over a TCP
    /// connection of its own, and goes away at the point `how` names: the connection is
    /// closed there, whatever the server is doing. Records the request, and a response with
    /// no status whose error says where the client went away (and what of the answer had
    /// arrived by then: its status line, its `onejob-job-id`); returns that error.
    pub async fn vanish(
        &self,
        node: usize,
        base: &str,
        path: &str,
        key: &str,
        body: &Value,
        how: Vanish,
    ) -> String {
        let seq = self.history.next_seq();
        self.history.write(&Record::Request {
            t_ms: self.history.now_ms(),
            seq,
            client: self.name.clone(),
            node,
            method: "POST".into(),
            path: path.to_owned(),
            key: Some(key.to_owned()),
            body: Some(body.clone()),
        });
        let (error, job_id) = match self.go_away(base, path, key, body, how).await {
            Ok(gone) => gone,
            Err(error) => (
                format!(
                    "client went away ({}) after a transport error of its own: {error}",
                    how.name()
                ),
                None,
            ),
        };
        self.history.write(&Record::Response {
            t_ms: self.history.now_ms(),
            seq,
            status: None,
            content_type: None,
            retry_after: None,
            replayed: None,
            body: None,
            error: Some(error.clone()),
            job_id,
        });
        error
    }

    /// [`RecordingClient::vanish`] on the wire: the error to record and the job id seen.
    async fn go_away(
        &self,
        base: &str,
        path: &str,
        key: &str,
        body: &Value,
        how: Vanish,
    ) -> std::io::Result<(String, Option<String>)> {
        let url = url::Url::parse(base).map_err(std::io::Error::other)?;
        let host = url.host_str().unwrap_or("127.0.0.1").to_owned();
        let port = url.port_or_known_default().unwrap_or(80);
        let text = serde_json::to_vec(body).map_err(std::io::Error::other)?;
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n\
             Idempotency-Key: {key}\r\nContent-Type: application/json\r\n\
             Content-Length: {length}\r\n\r\n",
            token = self.token,
            length = text.len(),
        );
        let mut stream =
            tokio::time::timeout(Duration::from_secs(5), TcpStream::connect((host, port)))
                .await
                .map_err(std::io::Error::other)??;
        stream.set_nodelay(true)?;
        stream.write_all(head.as_bytes()).await?;
        match how {
            Vanish::BeforeBody { sent } => {
                let sent = sent.min(text.len().saturating_sub(1));
                stream.write_all(&text[..sent]).await?;
                stream.flush().await?;
                Ok((
                    format!(
                        "client went away before its body was complete ({}): {sent} of {} bytes \
                         of the body sent",
                        how.name(),
                        text.len()
                    ),
                    None,
                ))
            }
            Vanish::AfterSend { after } | Vanish::MidSend { after } => {
                stream.write_all(&text).await?;
                stream.flush().await?;
                tokio::time::sleep(after).await;
                let mut arrived = Vec::new();
                let mut buffer = [0u8; 4096];
                while let Ok(n @ 1..) = stream.try_read(&mut buffer) {
                    arrived.extend_from_slice(&buffer[..n]);
                }
                let seen = Head::of(&arrived);
                Ok((
                    format!(
                        "client went away {} ms after sending the whole request ({}){}",
                        after.as_millis(),
                        how.name(),
                        seen.describe()
                    ),
                    seen.job_id,
                ))
            }
            Vanish::MidStream => {
                stream.write_all(&text).await?;
                stream.flush().await?;
                let deadline = Instant::now() + Duration::from_secs(10);
                let mut arrived = Vec::new();
                let mut buffer = [0u8; 4096];
                let why = loop {
                    let read = tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await;
                    match read {
                        Err(_) => break "gave up waiting for the first event after 10 s",
                        Ok(Err(_) | Ok(0)) => break "the server closed the connection first",
                        Ok(Ok(n)) => arrived.extend_from_slice(&buffer[..n]),
                    }
                    let seen = Head::of(&arrived);
                    if seen.complete && !seen.stream {
                        break "the answer was not a stream";
                    }
                    if seen.complete && contains(&arrived[seen.length..], b"data:") {
                        break "after the first server-sent event bytes";
                    }
                };
                let seen = Head::of(&arrived);
                Ok((
                    format!(
                        "client went away mid-stream ({}), {why}: {} bytes read{}",
                        how.name(),
                        arrived.len(),
                        seen.describe()
                    ),
                    seen.job_id,
                ))
            }
        }
    }
}

/// The gateway's chat path.
pub const CHAT_PATH: &str = "/v1/chat/completions";

/// The header naming the job of a gateway answer.
pub const JOB_ID_HEADER: &str = "onejob-job-id";

/// Where a caller goes away from its call ([`RecordingClient::vanish`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vanish {
    /// Before its request is complete: the head (whose `Content-Length` promises the whole
    /// body) and the first `sent` bytes of the body, then the connection closes. No intake
    /// can have started.
    BeforeBody {
        /// Bytes of the body sent (fewer than all of them).
        sent: usize,
    },
    /// Right after the whole request was sent: the connection closes `after` it (a few
    /// milliseconds: before, during or just after intake commits).
    AfterSend {
        /// How long after the last byte.
        after: Duration,
    },
    /// While the upstream works: the connection closes `after` the whole request was sent
    /// (longer than intake takes, shorter than the upstream's answer).
    MidSend {
        /// How long after the last byte.
        after: Duration,
    },
    /// Mid-stream: a `"stream": true` call whose client reads the answer up to its first
    /// server-sent event bytes, then closes the connection.
    MidStream,
}

impl Vanish {
    /// Its name in histories and figures: `before-body`, `after-send`, `mid-send`,
    /// `mid-stream`.
    pub fn name(self) -> &'static str {
        match self {
            Vanish::BeforeBody { .. } => "before-body",
            Vanish::AfterSend { .. } => "after-send",
            Vanish::MidSend { .. } => "mid-send",
            Vanish::MidStream => "mid-stream",
        }
    }
}

/// What a vanishing client saw of an answer's head.
struct Head {
    /// The head is complete (its blank line arrived).
    complete: bool,
    /// Its length in bytes, blank line included, when complete.
    length: usize,
    /// The status line, if it arrived.
    status_line: Option<String>,
    /// `Content-Type: text/event-stream`.
    stream: bool,
    /// The `onejob-job-id` header.
    job_id: Option<String>,
}

impl Head {
    fn of(bytes: &[u8]) -> Head {
        let end = bytes.windows(4).position(|w| w == b"\r\n\r\n");
        let text = String::from_utf8_lossy(&bytes[..end.unwrap_or(bytes.len())]);
        let mut lines = text.split("\r\n");
        let status_line = lines
            .next()
            .filter(|line| line.starts_with("HTTP/"))
            .map(str::to_owned);
        let (mut stream, mut job_id) = (false, None);
        for line in lines {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
            if name == "content-type" && value.starts_with("text/event-stream") {
                stream = true;
            }
            // A half-received header line is no job id.
            if name == JOB_ID_HEADER && end.is_some() {
                job_id = Some(value.to_owned());
            }
        }
        Head {
            complete: end.is_some(),
            length: end.map_or(0, |end| end + 4),
            status_line,
            stream,
            job_id,
        }
    }

    /// `""` when nothing arrived, else `"; the answer had begun: <status line>"`.
    fn describe(&self) -> String {
        match &self.status_line {
            Some(line) => format!("; the answer had begun: {line}"),
            None => String::new(),
        }
    }
}

/// Whether `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
