//! Providers: the upstreams attempts are sent to, behind one [`Provider`] trait.
//!
//! Adapters: [`model_api`] (`openai-chat`, an OpenAI-compatible API, and `anthropic-messages`,
//! Anthropic's Messages API), [`async_task`] (a
//! configurable submit / status / cancel task API) and [`fake`] (the bundled fake provider,
//! started in-process when it has no `base_url`). [`Providers`] builds them from the
//! configuration.
//!
//! Errors say whether the upstream may have done the work ([`ProviderError::is_definite`]):
//! a definite failure lets the job fail over, an ambiguous one makes the attempt `unknown`.
//!
//! Every call to an upstream is bounded: connecting by the provider's `connect_timeout`,
//! status, cancel and lookup calls by its `request_timeout`, a submit by the attempt's
//! deadline (the caller's), and every answer body by its `max_response_bytes`
//! ([`answer`]).

pub mod answer;
pub mod async_task;
mod error;
pub mod fake;
pub mod model_api;
mod registry;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::oneshot;
use uuid::Uuid;

pub use error::{ProviderError, UpstreamApi};
pub use registry::Providers;

use crate::kind::Kind;

/// The HTTP client the CLI uses: rustls with the `ring` crypto provider, installed
/// process-wide first (one provider for sqlx and reqwest; see STACK.md).
pub fn http_client() -> reqwest::Client {
    client_builder()
        .build()
        .expect("an HTTP client with default settings builds")
}

/// The HTTP client of one provider: [`http_client`]'s settings with its connect timeout.
pub fn provider_client(connect_timeout: std::time::Duration) -> reqwest::Client {
    client_builder()
        .connect_timeout(connect_timeout)
        .build()
        .expect("an HTTP client with a connect timeout builds")
}

fn client_builder() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().user_agent(concat!("onejob/", env!("CARGO_PKG_VERSION")))
}

/// What a provider is asked to do for one attempt.
#[derive(Debug)]
pub struct AttemptRequest<'a> {
    /// The job.
    pub job_id: Uuid,
    /// The attempt.
    pub attempt_id: Uuid,
    /// The job's kind (schemas, template).
    pub kind: &'a Kind,
    /// The job's params.
    pub params: &'a Value,
    /// A gateway job's request as the caller sent it, forwarded as it is (see
    /// `crate::gateway::request`); `None` sends a request built from `params`.
    pub request_body: Option<&'a str>,
    /// The key forwarded upstream where the provider has an `idempotency_header`: stable
    /// per job and provider (see `worker::plan::upstream_key`).
    pub idempotency_key: String,
    /// A temperature that overrides the params' (`onejob verify` runs at 0).
    pub temperature: Option<f64>,
}

/// The upstream's answer to a submit.
#[derive(Debug, Clone, PartialEq)]
pub enum Submitted {
    /// A synchronous API answered with the output.
    Output {
        /// The output (still to be validated).
        output: Value,
        /// The upstream's own id of this answer (a chat completion's `id`), where it gives
        /// one: the same id for a second send under one idempotency key proves the upstream
        /// answered from its cache instead of running the request again.
        receipt: Option<String>,
        /// The upstream's id of the request (its `x-request-id`), where it sent one: the
        /// gateway passes it on to the caller the answer was made for.
        request_id: Option<String>,
    },
    /// An asynchronous API accepted the work under a task id; poll [`Provider::status`].
    Accepted {
        /// The provider's id for the task.
        task_id: String,
    },
}

/// What an asynchronous task is doing.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskStatus {
    /// Not finished yet.
    Running,
    /// Finished with this output (still to be validated).
    Succeeded(Value),
    /// Finished without a result (failed or cancelled upstream).
    Failed(String),
}

/// A token count and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenCount {
    /// Tokens in the text.
    pub tokens: usize,
    /// The tokenizer used (`upstream /tokenize`, `tiktoken o200k_base`, …).
    pub tokenizer: String,
}

/// Fired by synchronous adapters once the request has been handed to the connection: the
/// upstream has it, so the attempt is `running` rather than `starting`.
pub type Sent = oneshot::Sender<()>;

/// An upstream endpoint with an adapter.
#[async_trait]
pub trait Provider: Send + Sync + std::fmt::Debug {
    /// The configured name.
    fn name(&self) -> &str;

    /// Sends the attempt upstream. Synchronous adapters fire `sent` once the request is out
    /// and answer with the output; asynchronous ones answer with the task id.
    async fn submit(
        &self,
        request: &AttemptRequest<'_>,
        sent: Option<Sent>,
    ) -> Result<Submitted, ProviderError>;

    /// Sends the attempt upstream asking for a stream (a gateway job with a caller reading
    /// it live), relaying every `chat.completion.chunk` to `sink` as it comes, and answers
    /// the completion they add up to. Adapters that cannot stream answer `Unsupported`, and
    /// the caller sends an ordinary [`Provider::submit`].
    async fn submit_streaming(
        &self,
        request: &AttemptRequest<'_>,
        sent: Option<Sent>,
        sink: &crate::gateway::streams::StreamSink,
    ) -> Result<Submitted, ProviderError> {
        let _ = (request, sent, sink);
        Err(ProviderError::Unsupported("streaming"))
    }

    /// The status of an accepted task, where the upstream can report it.
    async fn status(&self, task_id: &str) -> Result<TaskStatus, ProviderError> {
        let _ = task_id;
        Err(ProviderError::Unsupported("status"))
    }

    /// Asks the upstream to cancel a task, where it can.
    async fn cancel(&self, task_id: &str) -> Result<(), ProviderError> {
        let _ = task_id;
        Err(ProviderError::Unsupported("cancel"))
    }

    /// Counts `text` with the provider's own tokenizer, where it has one reachable
    /// (`Ok(None)`: no tokenizer known for it).
    async fn count_tokens(&self, text: &str) -> Result<Option<TokenCount>, ProviderError> {
        let _ = text;
        Ok(None)
    }

    /// The task the upstream holds under a forwarded idempotency key, for an attempt of
    /// `kind`, where it can say: `Ok(None)` means the upstream never received that key.
    async fn task_by_idempotency_key(
        &self,
        kind: &Kind,
        key: &str,
    ) -> Result<Option<String>, ProviderError> {
        let _ = (kind, key);
        Err(ProviderError::Unsupported("lookup by idempotency key"))
    }

    /// Whether [`Provider::submit`] and [`Provider::submit_streaming`] fire their [`Sent`]
    /// for a request of `kind` when its body is handed to the connection, and never before:
    /// then an attempt stopped while the notice is unfired was not sent (the upstream has at
    /// most a head without its body). `false` (the default) for an adapter that does not
    /// tell: its attempts stopped in flight may have been sent.
    fn reports_sent(&self, kind: &crate::kind::Kind) -> bool {
        let _ = kind;
        false
    }

    /// The header that forwards an attempt's idempotency key upstream, if configured.
    fn idempotency_header(&self) -> Option<&str> {
        None
    }
}
