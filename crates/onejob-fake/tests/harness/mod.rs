//! The integration-test harness: a fake server spawned on a free loopback port, a plain
//! HTTP client to talk to it, and "eventually" polling with generous deadlines (machines
//! are noisy; nothing here asserts how fast anything is).

// Each test binary uses a different subset of the harness.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use onejob_fake::{FakeServer, Rule};
use serde_json::{Value, json};

/// How long "eventually" waits before a test fails.
pub const DEADLINE: Duration = Duration::from_secs(5);

/// How often "eventually" looks.
pub const POLL: Duration = Duration::from_millis(20);

/// A running fake server and a client for it.
pub struct Fake {
    /// The server under test.
    pub server: FakeServer,
    /// A plain-HTTP client.
    pub http: reqwest::Client,
}

/// Starts a fake server on a free port.
pub async fn start() -> Fake {
    // reqwest is built with `rustls-no-provider`: even a plain-HTTP client panics at
    // construction unless a process-wide crypto provider is installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = FakeServer::spawn("127.0.0.1:0".parse().unwrap())
        .await
        .expect("the fake server binds a free port");
    Fake {
        server,
        http: reqwest::Client::new(),
    }
}

/// Parses a rule document (panics on an invalid one: it is a test bug).
pub fn rule(value: Value) -> Rule {
    Rule::from_json(value).expect("a valid rule")
}

/// A one-message chat request body.
pub fn chat_body(content: &str) -> Value {
    json!({"model": "fake-1", "messages": [{"role": "user", "content": content}]})
}

impl Fake {
    /// The absolute URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.base_url())
    }

    /// POSTs a JSON body, with an `Idempotency-Key` if given.
    pub async fn post(&self, path: &str, body: &Value, key: Option<&str>) -> reqwest::Response {
        let mut request = self.http.post(self.url(path)).json(body);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request.send().await.expect("the fake server answers")
    }

    /// GETs a path.
    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.http
            .get(self.url(path))
            .send()
            .await
            .expect("the fake server answers")
    }

    /// Submits a task and returns its id (asserting a 200 ack with status `queued`).
    pub async fn submit_task(&self, body: &Value, key: Option<&str>) -> String {
        let response = self.post("/v1/tasks", body, key).await;
        assert_eq!(response.status(), 200);
        let ack: Value = response.json().await.unwrap();
        assert_eq!(ack["status"], "queued", "the ack says queued: {ack}");
        ack["task_id"].as_str().expect("a task id").to_owned()
    }

    /// The status document of a task (asserting it exists).
    pub async fn task(&self, task_id: &str) -> Value {
        let response = self.get(&format!("/v1/tasks/{task_id}")).await;
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }

    /// Polls a task until its status is `status`; fails after [`DEADLINE`].
    pub async fn eventually_status(&self, task_id: &str, status: &str) -> Value {
        let started = Instant::now();
        loop {
            let view = self.task(task_id).await;
            if view["status"] == status {
                return view;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "task {task_id} never became {status}: {view}"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Polls the side-effect log until `total` reaches `total`; fails after [`DEADLINE`].
    pub async fn eventually_total(&self, total: u64) {
        let started = Instant::now();
        while self.server.submissions().total < total {
            assert!(
                started.elapsed() < DEADLINE,
                "never saw {total} submissions"
            );
            tokio::time::sleep(POLL).await;
        }
    }
}

/// One server-sent event as the client received it.
#[derive(Debug)]
pub struct Event {
    /// The text after `data: `.
    pub data: String,
    /// When the bytes completing it arrived.
    pub at: Instant,
}

impl Event {
    /// The event's JSON chunk (panics on `[DONE]` or bad JSON: a test bug or a fake bug).
    pub fn chunk(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("{e}: {}", self.data))
    }
}

/// A streamed answer read until its body ended.
#[derive(Debug)]
pub struct Streamed {
    /// Every event, in order.
    pub events: Vec<Event>,
    /// The body ended with an error (the connection closed mid-body), not cleanly.
    pub cut: bool,
    /// Bytes after the last complete event (there should be none).
    pub rest: String,
}

impl Streamed {
    /// Whether the last event is `[DONE]`.
    pub fn done(&self) -> bool {
        self.events
            .last()
            .is_some_and(|event| event.data == "[DONE]")
    }

    /// The JSON chunks (every event but `[DONE]`).
    pub fn chunks(&self) -> Vec<Value> {
        self.events
            .iter()
            .filter(|event| event.data != "[DONE]")
            .map(Event::chunk)
            .collect()
    }

    /// The content deltas concatenated.
    pub fn text(&self) -> String {
        self.chunks()
            .iter()
            .filter_map(|chunk| {
                chunk["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect()
    }

    /// The first choice's tool call assembled from its deltas, as a message's `tool_calls[0]`.
    pub fn tool_call(&self) -> Value {
        let mut call = json!({"function": {"arguments": ""}});
        for chunk in self.chunks() {
            let Some(delta) = chunk["choices"][0]["delta"]["tool_calls"].get(0) else {
                continue;
            };
            assert_eq!(delta["index"], 0, "one call, index 0: {chunk}");
            for field in ["id", "type"] {
                if let Some(value) = delta.get(field) {
                    call[field] = value.clone();
                }
            }
            if let Some(name) = delta["function"].get("name") {
                call["function"]["name"] = name.clone();
            }
            let fragment = delta["function"]["arguments"].as_str().unwrap_or_default();
            let so_far = call["function"]["arguments"].as_str().unwrap().to_owned();
            call["function"]["arguments"] = Value::String(so_far + fragment);
        }
        call
    }
}

/// Reads a streamed answer to its end, noting when each event arrived.
pub async fn read_events(mut response: reqwest::Response) -> Streamed {
    let mut buffer = String::new();
    let mut events = Vec::new();
    let cut = loop {
        match response.chunk().await {
            Ok(Some(bytes)) => {
                let at = Instant::now();
                buffer.push_str(std::str::from_utf8(&bytes).expect("UTF-8 events"));
                while let Some(end) = buffer.find("\n\n") {
                    let event: String = buffer.drain(..end + 2).collect();
                    let data = event
                        .trim_end()
                        .strip_prefix("data: ")
                        .unwrap_or_else(|| panic!("an event is one `data: ` line: {event:?}"));
                    assert!(!data.contains('\n'), "one line per event: {event:?}");
                    events.push(Event {
                        data: data.to_owned(),
                        at,
                    });
                }
            }
            Ok(None) => break false,
            Err(_) => break true,
        }
    };
    Streamed {
        events,
        cut,
        rest: buffer,
    }
}

/// A one-message chat request body that asks for a stream.
pub fn stream_body(content: &str) -> Value {
    let mut body = chat_body(content);
    body["stream"] = json!(true);
    body
}
