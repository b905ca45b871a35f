//! [`ClientBuilder`]: a [`Client`]'s settings (timeouts, retry policy, user agent) before it
//! is built.

use std::time::Duration;

use reqwest::header::HeaderValue;

use crate::{Client, Error, RetryPolicy};

/// Settings for a [`Client`]; start from [`Client::builder`].
///
/// ```
/// use std::time::Duration;
/// use onejob_client::{Client, RetryPolicy};
///
/// let client = Client::builder("http://127.0.0.1:8080", "oj_…")
///     .timeout(Duration::from_secs(10))
///     .retry_policy(RetryPolicy::default().max_retries(5))
///     .build()?;
/// # let _ = client;
/// # Ok::<(), onejob_client::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    base_url: String,
    api_key: String,
    timeout: Duration,
    connect_timeout: Duration,
    retry: RetryPolicy,
    user_agent: String,
}

impl ClientBuilder {
    pub(crate) fn new(base_url: &str, api_key: &str) -> Self {
        ClientBuilder {
            base_url: base_url.to_owned(),
            api_key: api_key.to_owned(),
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            retry: RetryPolicy::default(),
            user_agent: concat!("onejob-client/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }

    /// The longest one request may take, answer included (default 30 s). A request that
    /// times out is retried where that is safe (see [`RetryPolicy`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The longest connecting may take (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How requests are retried (default [`RetryPolicy::default`]).
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// The `User-Agent` sent (default `onejob-client/<version>`).
    pub fn user_agent(mut self, user_agent: impl Into<String>) -> Self {
        self.user_agent = user_agent.into();
        self
    }

    /// Checks the base URL and API key and builds the client.
    pub fn build(self) -> Result<Client, Error> {
        let bad_url = |reason: &str| Error::InvalidBaseUrl {
            url: self.base_url.clone(),
            reason: reason.to_owned(),
        };
        let parsed = reqwest::Url::parse(&self.base_url).map_err(|e| bad_url(&e.to_string()))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(bad_url("the scheme must be http or https"));
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(bad_url("a base URL has no query or fragment"));
        }
        let mut authorization = HeaderValue::from_str(&format!("Bearer {}", self.api_key))
            .map_err(|_| Error::InvalidApiKey)?;
        authorization.set_sensitive(true);
        // reqwest is built without a TLS crypto provider; install ring's process-wide (a
        // provider installed before, by the application, is kept).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .user_agent(self.user_agent)
            .timeout(self.timeout)
            .connect_timeout(self.connect_timeout)
            .build()
            .map_err(Error::Build)?;
        Ok(Client {
            http,
            base_url: parsed.as_str().trim_end_matches('/').to_owned(),
            authorization,
            retry: self.retry,
        })
    }
}
