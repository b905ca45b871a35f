//! The `fake` adapter: the bundled fake provider (`onejob-fake`), spoken to in the shape
//! each kind needs.
//!
//! A `fake` provider with a `base_url` talks to that server; without one, onejob starts a
//! fake server in-process on a loopback port (see [`super::Providers`]). Ordinary kinds
//! reach its task API — the `async-task` adapter with the fake's endpoints filled in,
//! sending `{"kind", "params"}` so the fake can shape a plausible default output, and with
//! lookup by idempotency key where a key is forwarded. Gateway kinds (`openai_models`) reach
//! its OpenAI-compatible chat endpoint through the `openai-chat` adapter (model `fake`),
//! streaming included.

use async_trait::async_trait;

use super::{
    AttemptRequest, Provider, ProviderError, Sent, Submitted, TaskStatus, TokenCount,
    async_task::{AsyncTask, SubmitBody, TaskApi},
    model_api::ModelApi,
};
use crate::{config::ProviderConfig, gateway::streams::StreamSink};

/// The bundled fake, as a task API and as a chat API.
#[derive(Debug)]
pub struct Fake {
    tasks: AsyncTask,
    chat: ModelApi,
}

/// Builds the adapter for a fake server at `base_url` (`http://127.0.0.1:PORT`).
pub fn adapter(
    config: &ProviderConfig,
    base_url: &str,
    http: reqwest::Client,
) -> Result<Fake, String> {
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
    let tasks = AsyncTask::with_api(config, api, SubmitBody::KindAndParams, http.clone())?;
    let mut chat = config.clone();
    chat.base_url = Some(format!("{base}/v1"));
    chat.model = Some(config.model.clone().unwrap_or_else(|| "fake".into()));
    let chat = ModelApi::new(&chat, http)?;
    Ok(Fake { tasks, chat })
}

#[async_trait]
impl Provider for Fake {
    fn name(&self) -> &str {
        self.tasks.name()
    }

    async fn submit(
        &self,
        request: &AttemptRequest<'_>,
        sent: Option<Sent>,
    ) -> Result<Submitted, ProviderError> {
        if request.kind.is_gateway() {
            self.chat.submit(request, sent).await
        } else {
            self.tasks.submit(request, sent).await
        }
    }

    async fn submit_streaming(
        &self,
        request: &AttemptRequest<'_>,
        sent: Option<Sent>,
        sink: &StreamSink,
    ) -> Result<Submitted, ProviderError> {
        self.chat.submit_streaming(request, sent, sink).await
    }

    async fn status(&self, task_id: &str) -> Result<TaskStatus, ProviderError> {
        self.tasks.status(task_id).await
    }

    async fn cancel(&self, task_id: &str) -> Result<(), ProviderError> {
        self.tasks.cancel(task_id).await
    }

    async fn count_tokens(&self, text: &str) -> Result<Option<TokenCount>, ProviderError> {
        self.tasks.count_tokens(text).await
    }

    /// Only the task API can be asked: a gateway kind's attempts go to the chat endpoint,
    /// where "no task under this key" would prove nothing.
    async fn task_by_idempotency_key(
        &self,
        kind: &crate::kind::Kind,
        key: &str,
    ) -> Result<Option<String>, ProviderError> {
        if kind.is_gateway() {
            return Err(ProviderError::Unsupported("lookup by idempotency key"));
        }
        self.tasks.task_by_idempotency_key(kind, key).await
    }

    /// As the adapter a request of `kind` goes to: the chat API's tells, the task API's not.
    fn reports_sent(&self, kind: &crate::kind::Kind) -> bool {
        if kind.is_gateway() {
            self.chat.reports_sent(kind)
        } else {
            self.tasks.reports_sent(kind)
        }
    }

    fn idempotency_header(&self) -> Option<&str> {
        self.tasks.idempotency_header()
    }
}
