//! onejob's bundled fake provider: a real HTTP server on a loopback port that tests,
//! benchmarks and the demo use in place of real AI and task APIs.
//!
//! It speaks these upstream shapes:
//!
//! * [`chat`]: an OpenAI-compatible `POST /v1/chat/completions`, answered as one JSON
//!   completion or, for `"stream": true`, as server-sent `chat.completion.chunk` events
//!   (tool calls included);
//! * [`endpoints`]: OpenAI's `POST /v1/embeddings`, `/v1/responses` and
//!   `/v1/images/generations`, and Anthropic's `POST /v1/messages` (streams included);
//! * [`tasks`]: an asynchronous task API (`POST /v1/tasks` → task id, status by id, cancel,
//!   and lookup by `Idempotency-Key`).
//!
//! What each request does is scripted by [`Rule`]s (latency, hangs before or after the
//! acknowledgement, failures, missing artifacts, drifted keys, malformed output, HTTP
//! statuses, streams that break mid-way), added in-process with [`FakeServer::add_rule`]
//! or over HTTP through the [`control`] endpoints under `/_fake`. Every submit that reaches
//! the server is counted as a side effect in [`Submissions`], keyed by the [`input_hash`]
//! of its input and with its whole request body, so a test can prove that nothing ran
//! twice and see exactly what was sent.
//!
//! Module map: [`behaviour`] (rules and what they script), [`submissions`] (the side-effect
//! log), `completion` (one chat answer in its JSON and streamed forms), [`task`] (one
//! task's timeline and result), [`tool_loop`] (answering as a model in an agent's tool
//! loop, on every conversation endpoint), [`idempotency`] (the upstream idempotency headers),
//! [`error`] (the JSON error answers), `state` (the shared state behind every handler) and
//! [`server`] (binding and serving).

pub mod behaviour;
pub mod chat;
mod completion;
pub mod control;
pub mod endpoints;
pub mod error;
pub mod idempotency;
pub mod server;
mod state;
pub mod submissions;
pub mod task;
pub mod tasks;
pub mod tool_loop;

pub use behaviour::{Behaviour, Outcome, Rule, RuleError};
pub use error::FakeError;
pub use server::FakeServer;
pub use submissions::{SubmissionRecord, Submissions, input_hash};
pub use task::TaskStatus;
