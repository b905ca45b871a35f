//! Configuration: the TOML file of docs/design.md §8, `ONEJOB_*` environment overrides, and
//! the built-in demo configuration used when no file is given.
//!
//! Loading has two steps. The file is first parsed alone with `toml`, so a syntax or type
//! error names its line and key; then the `ONEJOB_*` environment variables
//! (`ONEJOB_LISTEN`, `ONEJOB_DATABASE`, `ONEJOB_WORKER__CONCURRENCY`, …) are laid over the
//! parsed table ([`env`]) and the result is deserialized again. [`crate::kind::Kinds`] then
//! checks it as a whole into what the service runs with.

pub mod discovery;
mod env;
mod gateway;
mod http;
mod kind;
mod provider;
mod retention;
mod worker;

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

pub use gateway::GatewayConfig;
pub use http::{DEFAULT_KEY_CACHE_TTL, HttpConfig};
pub use kind::{ContractCase, KindConfig, SchemaSource};
pub use provider::{Adapter, DEFAULT_CONNECT_TIMEOUT, ProviderConfig, StructuredOutput};
pub use retention::RetentionConfig;
pub use worker::WorkerConfig;

/// The built-in configuration: SQLite file, the bundled fake provider, the demo kinds.
pub const DEMO_CONFIG: &str = include_str!("demo.toml");

/// The database used when none is configured.
pub const DEFAULT_DATABASE: &str = "sqlite://onejob.db";

/// The address served when none is configured.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// The largest request body accepted by default (1 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// The deepest params nesting accepted by default.
pub const DEFAULT_MAX_PARAMS_DEPTH: usize = 32;

/// Top-level keys that `ONEJOB_*` variables may set (tables use `__`, as in
/// `ONEJOB_WORKER__CONCURRENCY`). Other `ONEJOB_*` variables are ignored.
const ENV_KEYS: [&str; 7] = [
    "listen",
    "http",
    "database",
    "max_body_bytes",
    "max_params_depth",
    "worker",
    "log_format",
];

/// Why a configuration could not be used. Every message names the file, key or line.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for onejob's configuration (line and key in the message).
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line, column and the offending key.
        message: String,
    },
    /// An `ONEJOB_*` variable has a value of the wrong type.
    #[error("environment override: {0}")]
    Env(String),
    /// A value is well-formed but unusable.
    #[error("config key `{key}`: {message}")]
    Invalid {
        /// Dotted path of the key (`kind[image.generate].providers[1]`).
        key: String,
        /// What is wrong and how to fix it.
        message: String,
    },
}

impl ConfigError {
    /// Builds an [`ConfigError::Invalid`].
    pub fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// onejob's configuration, as written in `onejob.toml`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address the HTTP API listens on.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Database URL: `sqlite://file.db` or `postgres://user@host:5432/db`.
    #[serde(default = "default_database")]
    pub database: String,
    /// Largest request body accepted, in bytes (larger ones get 413).
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// Deepest nesting of objects and arrays accepted in a job's params.
    #[serde(default = "default_max_params_depth")]
    pub max_params_depth: usize,
    /// `text` (default) or `json` log lines.
    #[serde(default)]
    pub log_format: LogFormat,
    /// The upstream providers.
    #[serde(default, rename = "provider")]
    pub providers: Vec<ProviderConfig>,
    /// The job kinds.
    #[serde(default, rename = "kind")]
    pub kinds: Vec<KindConfig>,
    /// Worker settings.
    #[serde(default)]
    pub worker: WorkerConfig,
    /// HTTP server bounds (slow clients).
    #[serde(default)]
    pub http: HttpConfig,
    /// The OpenAI-compatible gateway.
    #[serde(default)]
    pub gateway: GatewayConfig,
    /// How long finished jobs are kept (off by default).
    #[serde(default)]
    pub retention: RetentionConfig,
    /// Directory relative paths (schemas, templates) are resolved against.
    #[serde(skip)]
    pub base_dir: PathBuf,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

fn default_listen() -> SocketAddr {
    DEFAULT_LISTEN.parse().expect("valid default address")
}

fn default_database() -> String {
    DEFAULT_DATABASE.to_owned()
}

fn default_max_body_bytes() -> usize {
    DEFAULT_MAX_BODY_BYTES
}

fn default_max_params_depth() -> usize {
    DEFAULT_MAX_PARAMS_DEPTH
}

impl Config {
    /// Loads the file at `path` with environment overrides, or the demo configuration
    /// (with environment overrides) when `path` is `None`.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let (text, source, base_dir) = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                let base = path
                    .parent()
                    .map(Path::to_owned)
                    .unwrap_or_else(|| PathBuf::from("."));
                (text, path.to_owned(), base)
            }
            None => (
                DEMO_CONFIG.to_owned(),
                PathBuf::from("<built-in demo configuration>"),
                PathBuf::from("."),
            ),
        };
        Self::from_toml(&text, &source, base_dir, std::env::vars())
    }

    /// Parses configuration text, then applies overrides from `env` (`ONEJOB_*` pairs).
    pub fn from_toml(
        text: &str,
        source: &Path,
        base_dir: PathBuf,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        // First alone, for errors that carry the line and the key.
        let parse_error = |e: toml::de::Error| ConfigError::Parse {
            path: source.to_owned(),
            message: e.to_string(),
        };
        let from_file = toml::from_str::<Config>(text).map_err(parse_error)?;
        let overrides = env::overrides(env, &ENV_KEYS);
        let mut config = if overrides.is_empty() {
            from_file
        } else {
            let mut table = toml::from_str::<toml::Table>(text).map_err(parse_error)?;
            let names = env::overlay(&mut table, &overrides);
            toml::Value::Table(table)
                .try_into::<Config>()
                .map_err(|e| {
                    ConfigError::Env(format!(
                        "{} (overrides set: {})",
                        e.message(),
                        names.join(", ")
                    ))
                })?
        };
        config.base_dir = base_dir;
        Ok(config)
    }
}

#[cfg(test)]
pub(crate) mod tests;
