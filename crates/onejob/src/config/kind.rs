//! `[[kind]]` tables: a job type's schemas, template, intent fields, providers and limits.

use std::{path::PathBuf, time::Duration};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A JSON Schema given as a file path (relative to the config file) or inline.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum SchemaSource {
    /// A path to a JSON file.
    Path(PathBuf),
    /// The schema itself, as a TOML table.
    Inline(Value),
}

/// One contract case for `onejob verify`: a real input and what its output must contain.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ContractCase {
    /// A short name shown in reports.
    pub name: String,
    /// The params sent (they must pass the kind's params schema).
    pub params: Value,
    /// Substrings the output must contain, beyond the schema and the exact top-level keys.
    #[serde(default)]
    pub must_contain: Vec<String>,
}

/// A `[[kind]]` table as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindConfig {
    /// The kind's name (`image.generate`).
    pub name: String,
    /// JSON Schema the params must pass; without one, any JSON object is accepted.
    #[serde(default)]
    pub params_schema: Option<SchemaSource>,
    /// JSON Schema a provider's output must pass to count as a real artifact.
    #[serde(default)]
    pub output_schema: Option<SchemaSource>,
    /// A minijinja prompt template over the params (a file path).
    #[serde(default)]
    pub template: Option<PathBuf>,
    /// The top-level params that carry intent; by default all of them.
    #[serde(default)]
    pub fingerprint: Option<Vec<String>>,
    /// Sampling temperature for jobs whose params set none (`openai-chat`). `onejob verify`
    /// always runs at 0; set 0 here too if jobs should behave as verified.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Provider names in failover order.
    #[serde(default)]
    pub providers: Vec<String>,
    /// Model names this kind serves at `POST /v1/chat/completions` (the OpenAI-compatible
    /// gateway): a call naming one is a job of this kind whose params are the request body.
    /// Its providers must be `openai-chat` ones, each sending its own upstream `model`.
    #[serde(default)]
    pub openai_models: Vec<String>,
    /// Model names this kind serves at `POST /v1/embeddings` (its providers: `openai-chat`
    /// ones whose upstream exposes `/embeddings`).
    #[serde(default)]
    pub embedding_models: Vec<String>,
    /// Model names this kind serves at `POST /v1/responses` (OpenAI's Responses API,
    /// stateless; its providers: `openai-chat` ones whose upstream exposes `/responses`).
    #[serde(default)]
    pub responses_models: Vec<String>,
    /// Model names this kind serves at `POST /v1/images/generations` (its providers:
    /// `openai-chat` ones whose upstream exposes `/images/generations`).
    #[serde(default)]
    pub image_models: Vec<String>,
    /// Model names this kind serves at Anthropic's `POST /v1/messages` (its providers:
    /// `anthropic-messages` ones).
    #[serde(default)]
    pub anthropic_models: Vec<String>,
    /// How long one attempt may take before its outcome is unknown (an attempt streamed to
    /// a gateway caller is bounded by `stream_idle_timeout` and `stream_max` instead).
    #[serde(default = "default_attempt_timeout", with = "humantime_serde")]
    pub attempt_timeout: Duration,
    /// A streamed attempt's longest silence: no chunk for this long (the first one
    /// included) ends it, its outcome unknown.
    #[serde(default = "default_stream_idle_timeout", with = "humantime_serde")]
    pub stream_idle_timeout: Duration,
    /// A streamed attempt's longest life, however steadily it produces.
    #[serde(default = "default_stream_max", with = "humantime_serde")]
    pub stream_max: Duration,
    /// Most attempts per job (retries and failover included).
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// Wait before the attempt after a definite failure; doubles with each attempt (cap 1m).
    #[serde(default = "default_retry_backoff", with = "humantime_serde")]
    pub retry_backoff: Duration,
    /// Start a hedged attempt on the next provider after this long (opt-in).
    #[serde(default, with = "humantime_serde")]
    pub hedge_after: Option<Duration>,
    /// Turn a still-unknown attempt into failed after this long (opt-in).
    #[serde(default, with = "humantime_serde")]
    pub settle_unknown_after: Option<Duration>,
    /// Contract cases run by `onejob verify`.
    #[serde(default)]
    pub contract: Vec<ContractCase>,
}

impl KindConfig {
    /// The gateway endpoints this kind lists models for, with those models (a gateway kind
    /// lists them for exactly one).
    pub fn served(&self) -> Vec<(crate::gateway::Endpoint, &[String])> {
        use crate::gateway::Endpoint;
        [
            (Endpoint::Chat, &self.openai_models),
            (Endpoint::Embeddings, &self.embedding_models),
            (Endpoint::Responses, &self.responses_models),
            (Endpoint::Images, &self.image_models),
            (Endpoint::Messages, &self.anthropic_models),
        ]
        .into_iter()
        .filter(|(_, models)| !models.is_empty())
        .map(|(endpoint, models)| (endpoint, models.as_slice()))
        .collect()
    }
}

fn default_attempt_timeout() -> Duration {
    Duration::from_secs(30)
}

fn default_stream_idle_timeout() -> Duration {
    Duration::from_secs(30)
}

fn default_stream_max() -> Duration {
    Duration::from_secs(30 * 60)
}

fn default_retry_backoff() -> Duration {
    Duration::from_secs(1)
}

fn default_max_attempts() -> u32 {
    3
}
