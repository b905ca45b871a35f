//! The `async-task` adapter: a configurable submit / status / cancel API (docs/design.md
//! §8).
//!
//! `POST submit_url` with the params as body answers a task id (at `task_id_pointer`);
//! `GET status_url` (`{task_id}` replaced) answers a status (at `status_pointer`) that is
//! running until it is one of `succeeded` (result at `result_pointer`) or `failed`;
//! `POST cancel_url` cancels where configured; `GET lookup_url` (`{key}` replaced) finds the
//! task submitted under a forwarded idempotency key, `404` meaning it never arrived. The
//! task id is returned to the worker the moment it is known, so it is stored before anything
//! else happens. Every call is bounded in time (`request_timeout`; a submit by the attempt's
//! deadline) and every answer in size (`max_response_bytes`).

use async_trait::async_trait;
use serde_json::Value;

use super::{AttemptRequest, Provider, ProviderError, Sent, Submitted, TaskStatus};
use crate::config::ProviderConfig;

/// Where and how to talk to one task API.
#[derive(Debug, Clone)]
pub struct TaskApi {
    /// Where submissions are POSTed.
    pub submit_url: String,
    /// Status URL with `{task_id}`.
    pub status_url: String,
    /// Cancel URL with `{task_id}`, if the API has one.
    pub cancel_url: Option<String>,
    /// Lookup URL with `{key}` for a task by idempotency key, if the API has one.
    pub lookup_url: Option<String>,
    /// JSON Pointer to the task id in the submit answer.
    pub task_id_pointer: String,
    /// JSON Pointer to the status in the status answer.
    pub status_pointer: String,
    /// JSON Pointer to the result in the status answer.
    pub result_pointer: String,
    /// Status values meaning success.
    pub succeeded: Vec<String>,
    /// Status values meaning failure.
    pub failed: Vec<String>,
}

/// How the submit body is built from the attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmitBody {
    /// The job's params, as docs/design.md §8 says.
    Params,
    /// `{"kind", "params"}` (the bundled fake uses the kind to shape its default output).
    KindAndParams,
}

/// An asynchronous task API.
#[derive(Debug)]
pub struct AsyncTask {
    name: String,
    api: TaskApi,
    body: SubmitBody,
    api_key: Option<String>,
    idempotency_header: Option<String>,
    request_timeout: std::time::Duration,
    max_response_bytes: u64,
    http: reqwest::Client,
}

impl AsyncTask {
    /// Builds the adapter from its `[[provider]]` table.
    pub fn new(config: &ProviderConfig, http: reqwest::Client) -> Result<Self, String> {
        let required = |value: &Option<String>, key: &str| {
            value
                .clone()
                .ok_or_else(|| format!("{key} is required for adapter async-task"))
        };
        let api = TaskApi {
            submit_url: required(&config.submit_url, "submit_url")?,
            status_url: required(&config.status_url, "status_url")?,
            cancel_url: config.cancel_url.clone(),
            lookup_url: config.lookup_url.clone(),
            task_id_pointer: required(&config.task_id_pointer, "task_id_pointer")?,
            status_pointer: required(&config.status_pointer, "status_pointer")?,
            result_pointer: required(&config.result_pointer, "result_pointer")?,
            succeeded: config.succeeded.clone(),
            failed: config.failed.clone(),
        };
        if api.succeeded.is_empty() {
            return Err("succeeded must list at least one status value".into());
        }
        if let Some(lookup_url) = &api.lookup_url {
            if !lookup_url.contains("{key}") {
                return Err("lookup_url must contain {key}".into());
            }
            if config.idempotency_header.is_none() {
                return Err("lookup_url needs idempotency_header: only a key that was \
                 forwarded upstream can be looked up there"
                    .into());
            }
        }
        Self::with_api(config, api, SubmitBody::Params, http)
    }

    /// Builds the adapter around an explicit API description.
    pub fn with_api(
        config: &ProviderConfig,
        api: TaskApi,
        body: SubmitBody,
        http: reqwest::Client,
    ) -> Result<Self, String> {
        if !api.status_url.contains("{task_id}") {
            return Err("status_url must contain {task_id}".into());
        }
        Ok(Self {
            name: config.name.clone(),
            api,
            body,
            api_key: super::registry::api_key(config)?,
            idempotency_header: config.idempotency_header.clone(),
            request_timeout: config.request_timeout,
            max_response_bytes: config.max_response_bytes,
            http,
        })
    }

    fn authorized(&self, call: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.api_key {
            Some(key) => call.bearer_auth(key),
            None => call,
        }
    }

    /// A status, cancel or lookup call, bounded by `request_timeout`.
    async fn call_json(&self, call: reqwest::RequestBuilder) -> Result<Value, ProviderError> {
        let call = self.authorized(call).timeout(self.request_timeout);
        super::answer::call_json(super::UpstreamApi::Tasks, call, self.max_response_bytes).await
    }

    fn task_url(template: &str, task_id: &str) -> String {
        template.replace("{task_id}", &url_escape(task_id))
    }
}

/// Percent-encodes everything but unreserved characters, for ids placed in a URL path.
fn url_escape(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[async_trait]
impl Provider for AsyncTask {
    fn name(&self) -> &str {
        &self.name
    }

    async fn submit(
        &self,
        request: &AttemptRequest<'_>,
        _sent: Option<Sent>,
    ) -> Result<Submitted, ProviderError> {
        let body = match self.body {
            SubmitBody::Params => request.params.clone(),
            SubmitBody::KindAndParams => {
                serde_json::json!({ "kind": request.kind.name, "params": request.params })
            }
        };
        let mut call = self
            .http
            .post(&self.api.submit_url)
            .json(&body)
            .timeout(request.kind.attempt_timeout);
        if let Some(header) = &self.idempotency_header {
            call = call.header(header.as_str(), &request.idempotency_key);
        }
        let call = self.authorized(call);
        let answer =
            super::answer::call_json(super::UpstreamApi::Tasks, call, self.max_response_bytes)
                .await?;
        let task_id = task_id_at(&answer, &self.api.task_id_pointer).ok_or_else(|| {
            // Accepted, but we cannot follow it: the work may run; say so.
            ProviderError::Ambiguous(format!(
                "the submit answer has no usable task id at task_id_pointer {:?} ({})",
                self.api.task_id_pointer,
                top_level_keys(&answer)
            ))
        })?;
        Ok(Submitted::Accepted { task_id })
    }

    async fn status(&self, task_id: &str) -> Result<TaskStatus, ProviderError> {
        let url = Self::task_url(&self.api.status_url, task_id);
        let answer = self.call_json(self.http.get(url)).await?;
        let status = match answer.pointer(&self.api.status_pointer) {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => {
                return Err(ProviderError::BadAnswer(format!(
                    "the status answer has nothing at status_pointer {:?} ({})",
                    self.api.status_pointer,
                    top_level_keys(&answer)
                )));
            }
        };
        if self.api.succeeded.contains(&status) {
            let result = answer
                .pointer(&self.api.result_pointer)
                .cloned()
                .unwrap_or(Value::Null);
            Ok(TaskStatus::Succeeded(result))
        } else if self.api.failed.contains(&status) {
            let detail: String = answer.to_string().chars().take(300).collect();
            Ok(TaskStatus::Failed(format!("status {status}: {detail}")))
        } else {
            Ok(TaskStatus::Running)
        }
    }

    async fn cancel(&self, task_id: &str) -> Result<(), ProviderError> {
        let Some(template) = &self.api.cancel_url else {
            return Err(ProviderError::Unsupported("cancel"));
        };
        self.call_json(self.http.post(Self::task_url(template, task_id)))
            .await
            .map(|_| ())
    }

    async fn task_by_idempotency_key(
        &self,
        _kind: &crate::kind::Kind,
        key: &str,
    ) -> Result<Option<String>, ProviderError> {
        // Only a key that was forwarded can be looked up: without `idempotency_header` the
        // upstream never saw one, and "no task under it" would prove nothing.
        let (Some(template), Some(_)) = (&self.api.lookup_url, &self.idempotency_header) else {
            return Err(ProviderError::Unsupported("lookup by idempotency key"));
        };
        let url = template.replace("{key}", &url_escape(key));
        match self.call_json(self.http.get(url)).await {
            Ok(answer) => task_id_at(&answer, &self.api.task_id_pointer)
                .map(Some)
                .ok_or_else(|| {
                    ProviderError::BadAnswer(format!(
                        "the lookup answer has no usable task id at task_id_pointer {:?} ({})",
                        self.api.task_id_pointer,
                        top_level_keys(&answer)
                    ))
                }),
            Err(ProviderError::Rejected { status: 404, .. }) => Ok(None),
            Err(other) => Err(other),
        }
    }

    fn idempotency_header(&self) -> Option<&str> {
        self.idempotency_header.as_deref()
    }
}

/// What an answer holds at its top level, for a message saying a pointer found nothing.
fn top_level_keys(answer: &Value) -> String {
    match answer {
        Value::Object(fields) if fields.is_empty() => "the answer is an empty object".into(),
        Value::Object(fields) => {
            let keys: Vec<&str> = fields.keys().take(20).map(String::as_str).collect();
            let more = if fields.len() > keys.len() {
                ", …"
            } else {
                ""
            };
            format!("its top-level keys: {}{more}", keys.join(", "))
        }
        Value::Array(items) => format!("the answer is an array of {}", items.len()),
        other => format!("the answer is {}", json_type(other)),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The task id at `pointer` in `answer`: a non-empty string (or a number) of visible
/// characters only, since it is stored and placed in URLs.
fn task_id_at(answer: &Value, pointer: &str) -> Option<String> {
    let id = match answer.pointer(pointer)? {
        Value::String(id) => id.clone(),
        Value::Number(id) => id.to_string(),
        _ => return None,
    };
    (!id.is_empty() && id.len() <= 1024 && !id.chars().any(char::is_control)).then_some(id)
}
