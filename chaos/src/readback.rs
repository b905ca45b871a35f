//! The end of a run: waiting for jobs to settle, then reading every job back through the
//! API (view, attempts, events, and the whole listing) and every side effect from the fake
//! providers, into the history.

use std::time::Duration;

use onejob_fake::FakeServer;
use serde_json::Value;

use crate::history::{History, Record};

/// An unrecorded API client for the read-back.
pub struct Reader {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Reader {
    /// Reads from the node at `base` with API key `token`.
    pub fn new(base: &str, token: &str) -> Reader {
        Reader {
            http: crate::client::http_client(Duration::from_secs(30)),
            base: base.to_owned(),
            token: token.to_owned(),
        }
    }

    /// `GET path` as JSON, retrying transient failures for a while; `None` on a 404.
    pub async fn get(&self, path: &str) -> Option<Value> {
        for _ in 0..100 {
            let sent = self
                .http
                .get(format!("{}{path}", self.base))
                .bearer_auth(&self.token)
                .send()
                .await;
            if let Ok(response) = sent {
                match response.status().as_u16() {
                    200 => return Some(response.json().await.expect("JSON")),
                    404 => return None,
                    503 => {}
                    status => panic!(
                        "GET {path}: {status} {}",
                        response.text().await.unwrap_or_default()
                    ),
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("GET {path} kept failing");
    }

    /// The job under `key`, if any.
    pub async fn job_by_key(&self, key: &str) -> Option<Value> {
        let path = format!("/v1/jobs?idempotency_key={}", urlencode(key));
        self.get(&path).await
    }

    /// Waits until every job under `keys` is in a terminal state (succeeded, failed,
    /// cancelled) or `within` passes; returns the keys still open.
    pub async fn wait_settled(&self, keys: &[String], within: Duration) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + within;
        let mut open: Vec<String> = keys.to_vec();
        loop {
            let mut still = Vec::new();
            for key in &open {
                let settled = self.job_by_key(key).await.is_some_and(|job| {
                    matches!(
                        job["state"].as_str(),
                        Some("succeeded" | "failed" | "cancelled")
                    )
                });
                if !settled {
                    still.push(key.clone());
                }
            }
            open = still;
            if open.is_empty() || tokio::time::Instant::now() >= deadline {
                return open;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The job's whole event log, oldest first, following `next_after` page by page (the
    /// log is paged; a storm's replays make it long).
    pub async fn events(&self, id: &str) -> Vec<Value> {
        let mut events = Vec::new();
        let mut path = format!("/v1/jobs/{id}/events?limit=500");
        loop {
            let page = self.get(&path).await.expect("events");
            events.extend(page["events"].as_array().cloned().unwrap_or_default());
            match page["next_after"].as_i64() {
                Some(after) => path = format!("/v1/jobs/{id}/events?limit=500&after={after}"),
                None => return events,
            }
        }
    }

    /// Writes a [`Record::Job`] for each key that names a job, then the [`Record::Listing`].
    pub async fn record_jobs(&self, history: &History, keys: &[String]) {
        for key in keys {
            let Some(job) = self.job_by_key(key).await else {
                continue;
            };
            let id = job["id"].as_str().expect("job id").to_owned();
            let attempts = self
                .get(&format!("/v1/jobs/{id}/attempts"))
                .await
                .expect("attempts");
            let events = self.events(&id).await;
            history.write(&Record::Job {
                key: key.clone(),
                job,
                attempts: attempts["attempts"].as_array().cloned().unwrap_or_default(),
                events,
            });
        }
        let mut job_ids = Vec::new();
        let mut path = "/v1/jobs?limit=500".to_owned();
        loop {
            let page = self.get(&path).await.expect("job listing");
            for job in page["jobs"].as_array().into_iter().flatten() {
                job_ids.push(job["id"].as_str().unwrap_or_default().to_owned());
            }
            match page["next_before"].as_str() {
                Some(before) => path = format!("/v1/jobs?limit=500&before={before}"),
                None => break,
            }
        }
        history.write(&Record::Listing { job_ids });
    }
}

/// Writes a [`Record::SideEffect`] for every submit `fake` received, with its outcome as a
/// task status document (`status`, and `result` once succeeded): for a task, its status
/// document; for a chat completion sent under an idempotency key, the answer the fake cached
/// for that key (asked for again under the key, which the fake counts as an idempotent
/// replay, not a side effect), its content parsed as the output onejob reads from it, and
/// the whole completion beside (a gateway job's result).
/// `provider` is the configured name of the provider that talks to `fake`.
pub async fn record_side_effects(history: &History, provider: &str, fake: &FakeServer) {
    let http = crate::client::http_client(Duration::from_secs(30));
    for request in fake.submissions().requests {
        let task = match (&request.task_id, &request.idempotency_key) {
            (Some(task_id), _) => {
                let url = format!("{}/v1/tasks/{task_id}", fake.base_url());
                match http.get(url).send().await {
                    Ok(response) => response.json().await.ok(),
                    Err(_) => None,
                }
            }
            (None, Some(key)) if request.endpoint == "chat" => {
                cached_chat_answer(&http, fake, key, &request.input).await
            }
            (None, _) => None,
        };
        history.write(&Record::SideEffect {
            provider: provider.to_owned(),
            input_hash: request.input_hash,
            input: request.input,
            idempotency_key: request.idempotency_key,
            task_id: request.task_id,
            task,
        });
    }
}

/// The chat answer the fake cached under `key`, as a status document: `succeeded` with the
/// message content (parsed as JSON, as onejob reads a kind with an output schema) as
/// `result`, the answer's `id`, and the whole `chat.completion` as `answer` (what a gateway
/// job's result is made of), or `failed` with the error body. `None` when the fake
/// did not answer from its cache (then the read-back itself ran the request: nothing to
/// compare with).
async fn cached_chat_answer(
    http: &reqwest::Client,
    fake: &FakeServer,
    key: &str,
    messages: &Value,
) -> Option<Value> {
    let response = http
        .post(format!("{}/v1/chat/completions", fake.base_url()))
        .header("Idempotency-Key", key)
        .json(&serde_json::json!({"model": "chaos-readback", "messages": messages}))
        .send()
        .await
        .ok()?;
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    let ok = response.status().is_success();
    let body: Value = response.json().await.ok()?;
    if !replayed {
        return None;
    }
    if !ok {
        return Some(serde_json::json!({"status": "failed", "error": body}));
    }
    let content = body.pointer("/choices/0/message/content")?.as_str()?;
    let result = serde_json::from_str(content).unwrap_or_else(|_| Value::String(content.into()));
    Some(serde_json::json!({
        "status": "succeeded",
        "result": result,
        "answer_id": body["id"],
        "answer": body,
    }))
}

/// Percent-encodes a key for a query string (keys are visible ASCII).
fn urlencode(key: &str) -> String {
    url::form_urlencoded::byte_serialize(key.as_bytes()).collect()
}
