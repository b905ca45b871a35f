//! What every command that talks to a onejob server shares: where it is (`--url`), the API
//! key (`--api-key`), `--json`, and the client built from them.

use std::time::Duration;

use anyhow::Context;
use onejob_client::Client;

/// Where the server is and how to talk to it.
#[derive(Debug, Clone, clap::Args)]
pub struct RemoteArgs {
    /// onejob's URL.
    #[arg(long, env = "ONEJOB_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// The API key (from `onejob keys create`, or the one `onejob serve` prints).
    #[arg(long = "api-key", env = "ONEJOB_API_KEY", hide_env_values = true)]
    pub api_key: String,
    /// Print machine-readable JSON (the API's shapes) instead of text.
    #[arg(long)]
    pub json: bool,
}

impl RemoteArgs {
    /// A client for the server.
    pub fn client(&self) -> anyhow::Result<Client> {
        Client::new(&self.url, &self.api_key).context("setting up the onejob client")
    }
}

/// Parses a duration argument (`30s`, `10m`, `1h 30m`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime_serde::re::humantime::parse_duration(text).map_err(|e| e.to_string())
}
