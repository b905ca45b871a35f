//! `[[provider]]` tables: the upstream endpoints and which adapter speaks to them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Which adapter talks to a provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Adapter {
    /// An OpenAI-compatible `/chat/completions` endpoint.
    OpenaiChat,
    /// A configurable submit / status / cancel task API.
    AsyncTask,
    /// Anthropic's Messages API, `POST {base_url}/messages` with `x-api-key` and
    /// `anthropic-version`.
    AnthropicMessages,
    /// The bundled fake provider (started in-process when it has no `base_url`).
    Fake,
}

/// How an `openai-chat` provider is asked for JSON matching the kind's output schema.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StructuredOutput {
    /// OpenAI's `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`.
    #[default]
    JsonSchema,
    /// `{"type": "json_object", "schema": …}`, as llama-cpp-python's server takes it.
    JsonObject,
    /// No `response_format`; the output is still validated against the schema.
    None,
}

/// A `[[provider]]` table as written. Which keys are required depends on the adapter.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// The name kinds refer to.
    pub name: String,
    /// The adapter.
    pub adapter: Adapter,
    /// Base URL (`openai-chat`, `fake`).
    #[serde(default)]
    pub base_url: Option<String>,
    /// Model name sent upstream (`openai-chat`).
    #[serde(default)]
    pub model: Option<String>,
    /// Name of the environment variable holding the upstream API key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Header carrying a stable per-job idempotency key upstream.
    #[serde(default)]
    pub idempotency_header: Option<String>,
    /// `async-task`: where params are POSTed; answers with a task id.
    #[serde(default)]
    pub submit_url: Option<String>,
    /// `async-task`: GET a task's status (`{task_id}` is replaced).
    #[serde(default)]
    pub status_url: Option<String>,
    /// `async-task`: POST to cancel a task (optional).
    #[serde(default)]
    pub cancel_url: Option<String>,
    /// `async-task`: GET the task submitted under a forwarded idempotency key (`{key}` is
    /// replaced; the answer's task id is read at `task_id_pointer`, `404` means the upstream
    /// never received that key). Needs `idempotency_header`. Optional: it lets the reconciler
    /// prove what happened to an attempt whose worker died before the task id came back.
    #[serde(default)]
    pub lookup_url: Option<String>,
    /// `async-task`: JSON Pointer to the task id in the submit answer.
    #[serde(default)]
    pub task_id_pointer: Option<String>,
    /// `async-task`: JSON Pointer to the status in the status answer.
    #[serde(default)]
    pub status_pointer: Option<String>,
    /// `async-task`: JSON Pointer to the result in the status answer.
    #[serde(default)]
    pub result_pointer: Option<String>,
    /// `async-task`: status values meaning success.
    #[serde(default)]
    pub succeeded: Vec<String>,
    /// `async-task`: status values meaning failure.
    #[serde(default)]
    pub failed: Vec<String>,
    /// The model's context window in tokens, checked by `onejob verify`.
    #[serde(default)]
    pub context_limit: Option<u32>,
    /// `openai-chat`: how to ask for schema-shaped JSON (`json_schema`, `json_object`,
    /// `none`).
    #[serde(default)]
    pub structured_output: StructuredOutput,
    /// `openai-chat`: the most tokens an answer may have (`max_tokens`); counted with the
    /// prompt against `context_limit` by `onejob verify`.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// `openai-chat`: a local Hugging Face `tokenizer.json` that `onejob verify` counts the
    /// prompt with when the upstream has no tokenize endpoint and the model is not one
    /// tiktoken knows.
    #[serde(default)]
    pub tokenizer: Option<std::path::PathBuf>,
    /// How long establishing a connection (TCP and TLS) may take. A connection that is not
    /// up in time never carried the request, so the attempt definitely failed and fails over.
    /// Default 5 s, and at most half of the shortest `attempt_timeout` of the kinds using
    /// this provider (so a blackholed provider fails over instead of ending unknown).
    #[serde(default, with = "humantime_serde")]
    pub connect_timeout: Option<Duration>,
    /// How long one status, cancel, lookup or tokenize call may take (default 10 s). A
    /// submit is bounded by the attempt's deadline instead.
    #[serde(default = "default_request_timeout", with = "humantime_serde")]
    pub request_timeout: Duration,
    /// The largest answer body read from this provider, in bytes (default 8 MiB). A larger
    /// one is a definite failure of the attempt, never read into memory whole.
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: u64,
}

/// The default connect timeout of a provider.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

fn default_request_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_max_response_bytes() -> u64 {
    8 * 1024 * 1024
}

impl ProviderConfig {
    /// SHA-256 (hex) of the settings that shape what the provider is sent and how its
    /// answers are read: the adapter, its URLs and JSON Pointers, status values, model,
    /// structured-output form, `max_tokens` and `lookup_url` (where set). Not the name, the API key variable, the
    /// idempotency header or the context limit. A certificate holds only while this is
    /// unchanged.
    pub fn settings_hash(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut settings = serde_json::json!({
            "adapter": self.adapter,
            "base_url": self.base_url,
            "model": self.model,
            "submit_url": self.submit_url,
            "status_url": self.status_url,
            "cancel_url": self.cancel_url,
            "task_id_pointer": self.task_id_pointer,
            "status_pointer": self.status_pointer,
            "result_pointer": self.result_pointer,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "structured_output": self.structured_output,
            "max_tokens": self.max_tokens,
        });
        // Only where set, so that adding the key voids no certificate made without it.
        if let Some(lookup_url) = &self.lookup_url {
            settings["lookup_url"] = serde_json::json!(lookup_url);
        }
        hex::encode(Sha256::digest(onejob_domain::fingerprint::canonical_bytes(
            &settings,
        )))
    }

    /// Refuses a `*_pointer` that is not a JSON Pointer (RFC 6901): `""` or `/`-separated
    /// tokens with `~` only as `~0` or `~1`. `serde_json` finds nothing at such a string, so
    /// every answer would look incomplete and the typo would surface as an upstream fault.
    pub fn check_pointers(&self) -> Result<(), super::ConfigError> {
        let pointers = [
            ("task_id_pointer", &self.task_id_pointer),
            ("status_pointer", &self.status_pointer),
            ("result_pointer", &self.result_pointer),
        ];
        for (key, pointer) in pointers {
            if let Some(pointer) = pointer
                && let Err(problem) = json_pointer(pointer)
            {
                return Err(super::ConfigError::invalid(
                    format!("provider[{}].{key}", self.name),
                    format!("{key} = {pointer:?} is not a JSON Pointer (RFC 6901): {problem}"),
                ));
            }
        }
        Ok(())
    }

    /// A provider with this name and adapter and every optional key unset.
    pub fn new(name: impl Into<String>, adapter: Adapter) -> Self {
        Self {
            name: name.into(),
            adapter,
            base_url: None,
            model: None,
            api_key_env: None,
            idempotency_header: None,
            submit_url: None,
            status_url: None,
            cancel_url: None,
            task_id_pointer: None,
            status_pointer: None,
            result_pointer: None,
            succeeded: Vec::new(),
            failed: Vec::new(),
            context_limit: None,
            structured_output: StructuredOutput::default(),
            max_tokens: None,
            tokenizer: None,
            lookup_url: None,
            connect_timeout: None,
            request_timeout: default_request_timeout(),
            max_response_bytes: default_max_response_bytes(),
        }
    }
}

/// Checks `pointer` against RFC 6901, saying what is wrong and how to write it instead.
fn json_pointer(pointer: &str) -> Result<(), String> {
    if !pointer.is_empty() && !pointer.starts_with('/') {
        // `status`, `data.status` and `$.data.status` all mean `/data/status` here.
        let path = pointer.trim_start_matches('$').trim_start_matches('.');
        return Err(format!(
            "it must start with \"/\" (or be \"\" for the whole answer); write {:?}",
            format!("/{}", path.replace('.', "/"))
        ));
    }
    let mut rest = pointer;
    while let Some(at) = rest.find('~') {
        rest = &rest[at + 1..];
        if !(rest.starts_with('0') || rest.starts_with('1')) {
            return Err(
                "a \"~\" must be followed by 0 (a literal \"~\") or 1 (a literal \"/\")".into(),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod pointer_tests {
    use super::json_pointer;

    #[test]
    fn rfc_6901_pointers_pass_and_others_say_how_to_write_them() {
        for good in ["", "/", "/status", "/data/0/id", "/a~0b/c~1d"] {
            assert_eq!(json_pointer(good), Ok(()), "{good}");
        }
        let said = json_pointer("status").unwrap_err();
        assert!(said.contains("write \"/status\""), "{said}");
        let said = json_pointer("$.data.status").unwrap_err();
        assert!(said.contains("write \"/data/status\""), "{said}");
        assert!(json_pointer("/a~2").unwrap_err().contains("~"));
        assert!(json_pointer("/a~").is_err());
    }
}
