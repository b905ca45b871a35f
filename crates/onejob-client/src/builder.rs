//! [`ClientBuilder`]: a [`Client`]'s settings (timeouts, retry policy, user agent, or one's
//! own `reqwest::Client`) before it is built, and the TLS setup of the HTTP client it builds
//! (rustls with the `ring` provider, passed to reqwest explicitly: nothing process-wide).

use std::{sync::Arc, time::Duration};

use reqwest::header::HeaderValue;
use rustls_platform_verifier::BuilderVerifierExt;

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
    http: Option<reqwest::Client>,
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
            http: None,
        }
    }

    /// The longest one request may take, answer included (default 30 s). A request that
    /// times out is retried where that is safe (see [`RetryPolicy`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The longest connecting may take (default 10 s; not for a client given to
    /// [`ClientBuilder::http_client`], whose own setting holds).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How requests are retried (default [`RetryPolicy::default`]).
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// The `User-Agent` sent (default `onejob-client/<version>`; not for a client given to
    /// [`ClientBuilder::http_client`], whose own setting holds).
    pub fn user_agent(mut self, user_agent: impl Into<String>) -> Self {
        self.user_agent = user_agent.into();
        self
    }

    /// Sends every request with this `reqwest::Client` instead of one built here: for its
    /// proxy, TLS roots or connection pool shared with the rest of the application. Its own
    /// connect timeout, user agent and TLS settings hold; [`ClientBuilder::timeout`] and the
    /// [`RetryPolicy`] still apply to every request.
    ///
    /// ```
    /// use onejob_client::Client;
    ///
    /// // The application's own choices, its rustls crypto provider among them.
    /// let _ = rustls::crypto::ring::default_provider().install_default();
    /// let shared = reqwest::Client::builder().build()?;
    /// let client = Client::builder("http://127.0.0.1:8080", "oj_…")
    ///     .http_client(shared)
    ///     .build()?;
    /// # let _ = client;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn http_client(mut self, client: reqwest::Client) -> Self {
        self.http = Some(client);
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
        let http = match self.http {
            Some(http) => http,
            None => reqwest::Client::builder()
                .tls_backend_preconfigured(tls_config()?)
                .user_agent(self.user_agent)
                .connect_timeout(self.connect_timeout)
                .build()
                .map_err(Error::Build)?,
        };
        Ok(Client {
            http,
            timeout: self.timeout,
            base_url: parsed.as_str().trim_end_matches('/').to_owned(),
            authorization,
            retry: self.retry,
        })
    }
}

/// The TLS settings of a built client: rustls with `ring`'s crypto given to it directly (no
/// process-wide default is read or installed, so the application keeps its own choice),
/// the platform's certificate verifier, and ALPN offering HTTP/2 and HTTP/1.1.
fn tls_config() -> Result<rustls::ClientConfig, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(Error::Tls)?
        .with_platform_verifier()
        .map_err(Error::Tls)?
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
