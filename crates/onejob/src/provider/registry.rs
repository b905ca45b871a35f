//! [`Providers`]: every configured provider by name, built once at start-up. Bundled fake
//! servers started for `fake` providers without a `base_url` live as long as it does.
//!
//! Each provider gets an HTTP client of its own, whose connect timeout stays below the
//! `attempt_timeout` of every kind that uses it: a connection that never comes up must fail
//! the attempt (definitely, so it fails over) before its deadline would make it unknown.

use std::{collections::HashMap, sync::Arc, time::Duration};

#[cfg(feature = "fake")]
use onejob_fake::FakeServer;

#[cfg(feature = "fake")]
use super::fake;
use super::{Provider, async_task::AsyncTask, model_api::ModelApi};
use crate::{
    certification::ProviderHashes,
    config::{Adapter, Config, ConfigError, DEFAULT_CONNECT_TIMEOUT, ProviderConfig},
};

/// The configured providers.
#[derive(Debug, Clone, Default)]
pub struct Providers {
    by_name: HashMap<String, Arc<dyn Provider>>,
    hashes: ProviderHashes,
    #[cfg(feature = "fake")]
    fakes: Vec<Arc<FakeServer>>,
}

impl Providers {
    /// Builds every `[[provider]]`, starting in-process fake servers where needed.
    pub async fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let mut providers = Providers::default();
        for (index, raw) in config.providers.iter().enumerate() {
            let invalid =
                |message: String| ConfigError::invalid(format!("provider[{}]", raw.name), message);
            if raw.name.is_empty() {
                return Err(ConfigError::invalid(
                    format!("provider[{index}].name"),
                    "a provider needs a name",
                ));
            }
            raw.check_pointers()?;
            let http = super::provider_client(connect_timeout(config, raw)?);
            let adapter: Arc<dyn Provider> = match raw.adapter {
                Adapter::OpenaiChat | Adapter::AnthropicMessages => {
                    Arc::new(ModelApi::new(raw, http.clone()).map_err(invalid)?)
                }
                Adapter::AsyncTask => Arc::new(AsyncTask::new(raw, http.clone()).map_err(invalid)?),
                #[cfg(not(feature = "fake"))]
                Adapter::Fake => return Err(invalid(without_fake())),
                #[cfg(feature = "fake")]
                Adapter::Fake => {
                    let base_url = match &raw.base_url {
                        Some(url) => url.clone(),
                        None => {
                            let server = FakeServer::spawn(([127, 0, 0, 1], 0).into())
                                .await
                                .map_err(|e| {
                                    invalid(format!("cannot start the bundled fake: {e}"))
                                })?;
                            let url = server.base_url();
                            tracing::info!(provider = %raw.name, %url, "bundled fake provider started");
                            providers.fakes.push(Arc::new(server));
                            url
                        }
                    };
                    Arc::new(fake::adapter(raw, &base_url, http.clone()).map_err(invalid)?)
                }
            };
            providers.hashes.insert(&raw.name, raw.settings_hash());
            if providers
                .by_name
                .insert(raw.name.clone(), adapter)
                .is_some()
            {
                return Err(ConfigError::invalid(
                    format!("provider[{index}].name"),
                    format!("provider {:?} is declared twice", raw.name),
                ));
            }
        }
        Ok(providers)
    }

    /// The provider with this name.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Provider>> {
        self.by_name.get(name)
    }

    /// Each provider's settings hash (what certificates are checked against).
    pub fn hashes(&self) -> &ProviderHashes {
        &self.hashes
    }

    /// The fake servers started in-process, in configuration order.
    #[cfg(feature = "fake")]
    pub fn bundled_fakes(&self) -> &[Arc<FakeServer>] {
        &self.fakes
    }
}

/// Why a `fake` provider cannot run in a build without the `fake` feature.
#[cfg(not(feature = "fake"))]
pub(crate) fn without_fake() -> String {
    "adapter \"fake\" is the bundled fake provider, and this onejob was built without it \
     (cargo feature `fake`): use adapter \"openai-chat\" or \"async-task\", or build onejob \
     with its default features (the demo and a `onejob serve` without a config need it too)"
        .to_owned()
}

/// The connect timeout of `provider`: its `connect_timeout`, which must be shorter than the
/// `attempt_timeout` of every kind using it; without one, the default, capped at half the
/// shortest of those attempt timeouts.
fn connect_timeout(config: &Config, provider: &ProviderConfig) -> Result<Duration, ConfigError> {
    let shortest = config
        .kinds
        .iter()
        .filter(|kind| kind.providers.contains(&provider.name))
        .map(|kind| (kind.name.as_str(), kind.attempt_timeout))
        .min_by_key(|(_, timeout)| *timeout);
    match (provider.connect_timeout, shortest) {
        (Some(explicit), Some((kind, attempt))) if explicit >= attempt => {
            Err(ConfigError::invalid(
                format!("provider[{}].connect_timeout", provider.name),
                format!(
                    "{explicit:?} is not shorter than the attempt_timeout ({attempt:?}) of kind \
                     {kind:?}: a provider that never accepts the connection would end its \
                     attempts unknown instead of failing over; choose a shorter connect_timeout"
                ),
            ))
        }
        (Some(explicit), _) => Ok(explicit),
        (None, Some((_, attempt))) => Ok(DEFAULT_CONNECT_TIMEOUT.min(attempt / 2)),
        (None, None) => Ok(DEFAULT_CONNECT_TIMEOUT),
    }
}

/// The upstream API key named by `api_key_env`, if any; an error if the variable is unset.
pub(super) fn api_key(config: &ProviderConfig) -> Result<Option<String>, String> {
    match &config.api_key_env {
        None => Ok(None),
        Some(var) => std::env::var(var)
            .map(Some)
            .map_err(|_| format!("api_key_env names {var}, which is not set")),
    }
}
