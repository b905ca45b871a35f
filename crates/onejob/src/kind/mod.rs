//! Kinds, compiled: a job type's schemas as ready validators, its intent fields, its
//! providers and limits. Built once from the configuration; looked up per request.

use std::{collections::HashMap, path::Path, sync::Arc, time::Duration};

use onejob_domain::{Fingerprint, ParamsLimits};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::config::{Config, ConfigError, ContractCase, KindConfig, SchemaSource};

pub use onejob_domain::FieldError;

/// Whether `output` carries anything at all: a number, `true`, or a non-blank string,
/// somewhere. Without an output schema to say what a real artifact looks like, this is what
/// keeps `null`, `false`, `""`, `[]`, `{}` (and nests of them) from counting as a success.
pub fn has_artifact(output: &Value) -> bool {
    match output {
        Value::Null | Value::Bool(false) => false,
        Value::Bool(true) | Value::Number(_) => true,
        Value::String(text) => !text.trim().is_empty(),
        Value::Array(items) => items.iter().any(has_artifact),
        Value::Object(map) => map.values().any(has_artifact),
    }
}

/// A compiled JSON Schema with its source kept for hashing and display.
#[derive(Clone)]
pub struct Schema {
    source: Value,
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schema")
            .field("source", &self.source)
            .finish()
    }
}

impl Schema {
    /// Compiles a schema; the error says why it is not a valid JSON Schema. `format` is
    /// validated (`"format": "uri"` means a URI), not only annotated.
    pub fn compile(source: Value) -> Result<Self, String> {
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(&source)
            .map_err(|e| e.to_string())?;
        Ok(Self { source, validator })
    }

    /// The schema document.
    pub fn source(&self) -> &Value {
        &self.source
    }

    /// Every violation of the schema by `instance`, sorted by path.
    pub fn check(&self, instance: &Value) -> Result<(), Vec<FieldError>> {
        let mut errors: Vec<FieldError> = self
            .validator
            .iter_errors(instance)
            .map(|e| FieldError {
                path: match e.instance_path().as_str() {
                    "" => "/".to_owned(),
                    p => p.to_owned(),
                },
                message: e.masked().to_string(),
            })
            .collect();
        if errors.is_empty() {
            return Ok(());
        }
        errors.sort_by(|a, b| a.path.cmp(&b.path));
        errors.dedup();
        Err(errors)
    }
}

/// A job kind, ready to validate and fingerprint submissions.
#[derive(Debug, Clone)]
pub struct Kind {
    /// Its name.
    pub name: String,
    /// The params schema (without one, params must be a JSON object).
    pub params_schema: Option<Schema>,
    /// The output schema a provider's answer must pass.
    pub output_schema: Option<Schema>,
    /// The prompt template's text, if the kind has one.
    pub template: Option<String>,
    /// Intent-bearing params; `None` means all.
    pub intent_fields: Option<Vec<String>>,
    /// Temperature for jobs whose params set none.
    pub temperature: Option<f64>,
    /// Providers in failover order.
    pub providers: Vec<String>,
    /// The model names it serves at its gateway endpoint (empty: not a gateway kind). A
    /// gateway kind's params are the endpoint's request (an OpenAI chat request, …), its
    /// result the winning upstream's answer there (a `chat.completion`, …).
    pub openai_models: Vec<String>,
    /// The gateway endpoint it serves (meaningful for a gateway kind only).
    pub endpoint: crate::gateway::Endpoint,
    /// Deadline of one attempt.
    pub attempt_timeout: Duration,
    /// A streamed attempt's longest gap between chunks.
    pub stream_idle_timeout: Duration,
    /// A streamed attempt's longest life.
    pub stream_max: Duration,
    /// Most attempts per job.
    pub max_attempts: u32,
    /// Base wait before the attempt after a definite failure.
    pub retry_backoff: Duration,
    /// Hedge after this long (opt-in).
    pub hedge_after: Option<Duration>,
    /// Settle unknown attempts as failed after this long (opt-in).
    pub settle_unknown_after: Option<Duration>,
    /// Contract cases for `onejob verify`.
    pub contract: Vec<ContractCase>,
}

impl Kind {
    /// Whether the kind is served at the OpenAI-compatible gateway.
    pub fn is_gateway(&self) -> bool {
        !self.openai_models.is_empty()
    }

    /// Checks params against the kind's schema (or, without one, that they are an object;
    /// for a gateway kind, its endpoint's request).
    pub fn check_params(&self, params: &Value) -> Result<(), Vec<FieldError>> {
        match &self.params_schema {
            Some(schema) => schema.check(params),
            None if self.is_gateway() => self.endpoint.check_request(params),
            None if params.is_object() => Ok(()),
            None => Err(vec![FieldError {
                path: "/".into(),
                message: "params must be a JSON object".into(),
            }]),
        }
    }

    /// Checks that a provider's output is a real result: storable (no U+0000, nesting within
    /// 64 levels), present, and passing the kind's output schema. A "success" that fails this
    /// is a failed attempt, never a result.
    pub fn check_output(&self, output: &Value) -> Result<(), Vec<FieldError>> {
        const OUTPUT_LIMITS: ParamsLimits = ParamsLimits { max_depth: 64 };
        if let Err(error) = OUTPUT_LIMITS.check_answer(output) {
            return Err(vec![FieldError {
                path: error.path().to_owned(),
                message: error.to_string(),
            }]);
        }
        match &self.output_schema {
            Some(schema) => schema.check(output),
            None if self.is_gateway() => self.endpoint.check_answer(output),
            None if !has_artifact(output) => Err(vec![FieldError {
                path: "/".into(),
                message: "the provider returned no artifact (an empty or blank output such as \
                          null, false, \"\", [] or {}); give the kind an output_schema to say \
                          what a real one looks like"
                    .into(),
            }]),
            None => Ok(()),
        }
    }

    /// The wait before attempt number `next` (2, 3, …) after a definite failure:
    /// `retry_backoff` doubled per attempt already made, at most one minute.
    pub fn backoff(&self, next: i32) -> Duration {
        let doublings = u32::try_from(next.saturating_sub(2)).unwrap_or(0).min(16);
        (self.retry_backoff * 2u32.pow(doublings)).min(Duration::from_secs(60))
    }

    /// The fingerprint of `params` under this kind.
    pub fn fingerprint(&self, params: &Value) -> Fingerprint {
        Fingerprint::of(&self.name, params, self.intent_fields.as_deref())
    }

    /// SHA-256 (hex) of the prompt template text; of the empty string without one.
    pub fn template_hash(&self) -> String {
        hex::encode(Sha256::digest(
            self.template.as_deref().unwrap_or_default().as_bytes(),
        ))
    }

    /// SHA-256 (hex) of the canonical output schema; of `null` without one.
    pub fn schema_hash(&self) -> String {
        let schema = self
            .output_schema
            .as_ref()
            .map(Schema::source)
            .unwrap_or(&Value::Null);
        hex::encode(Sha256::digest(onejob_domain::fingerprint::canonical_bytes(
            schema,
        )))
    }
}

/// All kinds of a configuration, by name.
#[derive(Debug, Default, Clone)]
pub struct Kinds {
    by_name: HashMap<String, Arc<Kind>>,
}

impl Kinds {
    /// Compiles every `[[kind]]` of `config`, checking names, schemas, templates and provider
    /// references. Errors name the offending key.
    pub fn compile(config: &Config) -> Result<Self, ConfigError> {
        let mut by_name = HashMap::new();
        let mut models: HashMap<String, &str> = HashMap::new();
        for (index, raw) in config.kinds.iter().enumerate() {
            let kind = compile_kind(raw, index, config)?;
            for model in &kind.openai_models {
                if let Some(other) = models.insert(model.clone(), &raw.name) {
                    return Err(ConfigError::invalid(
                        format!("kind[{}].{}", raw.name, kind.endpoint.config_key()),
                        format!("model {model:?} is already served by kind {other:?}"),
                    ));
                }
            }
            if by_name.insert(kind.name.clone(), Arc::new(kind)).is_some() {
                return Err(ConfigError::invalid(
                    format!("kind[{index}].name"),
                    format!("kind {:?} is declared twice", raw.name),
                ));
            }
        }
        Ok(Self { by_name })
    }

    /// Adds (or replaces) a kind.
    pub fn insert(&mut self, kind: Kind) {
        self.by_name.insert(kind.name.clone(), Arc::new(kind));
    }

    /// The kind with this name.
    pub fn get(&self, name: &str) -> Option<&Arc<Kind>> {
        self.by_name.get(name)
    }

    /// The gateway kind serving `model` (at whichever endpoint: a model name is served at one).
    pub fn by_model(&self, model: &str) -> Option<&Arc<Kind>> {
        self.by_name
            .values()
            .find(|kind| kind.openai_models.iter().any(|m| m == model))
    }

    /// Every model name the gateway serves, at every endpoint, sorted.
    pub fn models(&self) -> Vec<&str> {
        let mut models: Vec<&str> = self
            .by_name
            .values()
            .flat_map(|kind| kind.openai_models.iter().map(String::as_str))
            .collect();
        models.sort_unstable();
        models
    }

    /// Kind names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.by_name.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}

fn compile_kind(raw: &KindConfig, index: usize, config: &Config) -> Result<Kind, ConfigError> {
    let key = |field: &str| format!("kind[{}].{field}", raw.name);
    if raw.name.is_empty()
        || raw
            .name
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(ConfigError::invalid(
            format!("kind[{index}].name"),
            "a kind name is a non-empty word without spaces, like image.generate",
        ));
    }
    if raw.max_attempts == 0 {
        return Err(ConfigError::invalid(
            key("max_attempts"),
            "must be at least 1",
        ));
    }
    for (name, value) in [
        ("attempt_timeout", raw.attempt_timeout),
        ("stream_idle_timeout", raw.stream_idle_timeout),
        ("stream_max", raw.stream_max),
    ] {
        if value.is_zero() {
            return Err(ConfigError::invalid(key(name), "must be longer than 0s"));
        }
    }
    for (i, provider) in raw.providers.iter().enumerate() {
        if !config.providers.iter().any(|p| &p.name == provider) {
            return Err(ConfigError::invalid(
                key(&format!("providers[{i}]")),
                format!("{provider:?} is not a declared [[provider]] name"),
            ));
        }
    }
    if let Some(fields) = &raw.fingerprint
        && (fields.is_empty() || fields.iter().any(String::is_empty))
    {
        return Err(ConfigError::invalid(
            key("fingerprint"),
            "list at least one param name, or leave the key out to use all params",
        ));
    }
    let (endpoint, models) = match raw.served().as_slice() {
        [] => (crate::gateway::Endpoint::Chat, Vec::new()),
        [(endpoint, models)] => {
            check_gateway_kind(raw, *endpoint, models, config)?;
            (*endpoint, models.to_vec())
        }
        [(first, _), (second, _), ..] => {
            return Err(ConfigError::invalid(
                key(second.config_key()),
                format!(
                    "a gateway kind serves one endpoint: it lists {} already; declare another \
                     kind for {}",
                    first.config_key(),
                    second.path()
                ),
            ));
        }
    };
    let params_schema = raw
        .params_schema
        .as_ref()
        .map(|s| load_schema(s, &config.base_dir, &key("params_schema")))
        .transpose()?;
    let output_schema = raw
        .output_schema
        .as_ref()
        .map(|s| load_schema(s, &config.base_dir, &key("output_schema")))
        .transpose()?;
    let template = raw
        .template
        .as_ref()
        .map(|path| {
            let path = config.base_dir.join(path);
            std::fs::read_to_string(&path).map_err(|e| {
                ConfigError::invalid(
                    key("template"),
                    format!("cannot read {}: {e}", path.display()),
                )
            })
        })
        .transpose()?;
    Ok(Kind {
        name: raw.name.clone(),
        params_schema,
        output_schema,
        template,
        intent_fields: raw.fingerprint.clone(),
        temperature: raw.temperature,
        providers: raw.providers.clone(),
        openai_models: models,
        endpoint,
        attempt_timeout: raw.attempt_timeout,
        stream_idle_timeout: raw.stream_idle_timeout,
        stream_max: raw.stream_max,
        max_attempts: raw.max_attempts,
        retry_backoff: raw.retry_backoff,
        hedge_after: raw.hedge_after,
        settle_unknown_after: raw.settle_unknown_after,
        contract: raw.contract.clone(),
    })
}

/// A gateway kind passes the caller's request through: its providers must speak its
/// endpoint's API (Anthropic's for `anthropic_models`, OpenAI's for the others), and a
/// template or output schema (which would rewrite the request) has no place in it.
fn check_gateway_kind(
    raw: &KindConfig,
    endpoint: crate::gateway::Endpoint,
    models: &[String],
    config: &Config,
) -> Result<(), ConfigError> {
    use crate::config::Adapter;
    let key = |field: &str| format!("kind[{}].{field}", raw.name);
    if let Some(model) = models
        .iter()
        .find(|m| m.is_empty() || m.chars().any(|c| c.is_whitespace() || c.is_control()))
    {
        return Err(ConfigError::invalid(
            key(endpoint.config_key()),
            format!("{model:?} is not a model name (a non-empty word, like \"fast\")"),
        ));
    }
    if raw.template.is_some() {
        return Err(ConfigError::invalid(
            key("template"),
            "a gateway kind passes the caller's request through: remove the template",
        ));
    }
    if raw.output_schema.is_some() {
        return Err(ConfigError::invalid(
            key("output_schema"),
            "a gateway kind's result is the upstream's own answer, checked for a real one \
             (a message or tool calls, an embedding, an image): remove the output_schema \
             (callers ask for JSON in their request)",
        ));
    }
    for (i, name) in raw.providers.iter().enumerate() {
        let adapter = config
            .providers
            .iter()
            .find(|p| &p.name == name)
            .map(|p| p.adapter);
        let (fits, wanted) = match endpoint {
            crate::gateway::Endpoint::Messages => (
                matches!(adapter, Some(Adapter::AnthropicMessages | Adapter::Fake)),
                "anthropic-messages",
            ),
            // The seed's own case: image APIs that answer a task id to poll.
            crate::gateway::Endpoint::Images => (
                matches!(
                    adapter,
                    Some(Adapter::OpenaiChat | Adapter::AsyncTask | Adapter::Fake)
                ),
                "openai-chat, async-task",
            ),
            _ => (
                matches!(adapter, Some(Adapter::OpenaiChat | Adapter::Fake)),
                "openai-chat",
            ),
        };
        if !fits {
            return Err(ConfigError::invalid(
                key(&format!("providers[{i}]")),
                format!(
                    "{name:?} is not an {wanted} (or fake) provider; a gateway kind ({}) sends \
                     the caller's {} as it came, so every provider must take one",
                    endpoint.config_key(),
                    endpoint.request_name()
                ),
            ));
        }
    }
    Ok(())
}

fn load_schema(source: &SchemaSource, base: &Path, key: &str) -> Result<Schema, ConfigError> {
    let document = match source {
        SchemaSource::Inline(value) => value.clone(),
        SchemaSource::Path(path) => {
            let path = base.join(path);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                ConfigError::invalid(key, format!("cannot read {}: {e}", path.display()))
            })?;
            serde_json::from_str(&text).map_err(|e| {
                ConfigError::invalid(key, format!("{} is not JSON: {e}", path.display()))
            })?
        }
    };
    Schema::compile(document)
        .map_err(|e| ConfigError::invalid(key, format!("not a valid JSON Schema: {e}")))
}

#[cfg(test)]
mod tests;
