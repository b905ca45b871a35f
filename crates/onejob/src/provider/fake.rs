//! The `fake` adapter: the bundled fake provider (`onejob-fake`), spoken to as a task API.
//!
//! A `fake` provider with a `base_url` talks to that server; without one, onejob starts a
//! fake server in-process on a loopback port (see [`super::Providers`]). It is the
//! `async-task` adapter with the fake's endpoints filled in, sending `{"kind", "params"}` so
//! the fake can shape a plausible default output, and with lookup by idempotency key.

use super::async_task::{AsyncTask, SubmitBody, TaskApi};
use crate::config::ProviderConfig;

/// Builds the adapter for a fake server at `base_url` (`http://127.0.0.1:PORT`).
pub fn adapter(
    config: &ProviderConfig,
    base_url: &str,
    http: reqwest::Client,
) -> Result<AsyncTask, String> {
    let base = base_url.trim_end_matches('/');
    let api = TaskApi {
        submit_url: format!("{base}/v1/tasks"),
        status_url: format!("{base}/v1/tasks/{{task_id}}"),
        cancel_url: Some(format!("{base}/v1/tasks/{{task_id}}/cancel")),
        // Only a key that was forwarded can be looked up.
        lookup_url: config
            .idempotency_header
            .is_some()
            .then(|| format!("{base}/v1/tasks?idempotency_key={{key}}")),
        task_id_pointer: "/task_id".into(),
        status_pointer: "/status".into(),
        result_pointer: "/result".into(),
        succeeded: vec!["succeeded".into()],
        failed: vec!["failed".into(), "cancelled".into()],
    };
    AsyncTask::with_api(config, api, SubmitBody::KindAndParams, http)
}
