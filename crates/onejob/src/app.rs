//! Start-up: from a [`Config`] to a migrated store, compiled kinds and a serving API.
//!
//! `onejob serve` and the black-box tests go through the same [`App::open`] and
//! [`App::serve`]; tests bind port 0 and read the address back.

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use onejob_domain::ParamsLimits;
use tokio::net::TcpListener;

use crate::{
    config::{Config, ConfigError},
    http::{self, AppState},
    jobs::Jobs,
    kind::Kinds,
    provider::Providers,
    store::{self, Store, StoreError, StoreOptions},
    worker::{self, WorkerContext, WorkerHandle, WorkerSettings},
};

/// Why onejob could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The database could not be opened or migrated.
    #[error("database {url}")]
    Store {
        /// The database URL, password redacted.
        url: String,
        /// Why.
        source: StoreError,
    },
    /// An administrative command was pointed at a database that is not onejob's: a SQLite
    /// file that does not exist, or a database without onejob's schema.
    #[error("database {url}: {reason}")]
    NotOnejob {
        /// The database URL, password redacted.
        url: String,
        /// What is missing, and what to do.
        reason: String,
    },
    /// The listen address could not be bound.
    #[error(
        "cannot listen on {addr}{hint}",
        hint = if source.kind() == std::io::ErrorKind::AddrInUse {
            " (another process listens there: stop it, or choose another address with \
             --listen or `listen` in the config)"
        } else {
            ""
        }
    )]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// A configured onejob: store open and migrated, kinds compiled.
#[derive(Clone)]
pub struct App {
    /// The configuration it was opened with.
    pub config: Config,
    /// The store.
    pub store: Arc<dyn Store>,
    /// The job use cases.
    pub jobs: Jobs,
    /// The providers (bundled fakes started).
    pub providers: Providers,
    /// What the gateway's callers and this process's worker share.
    pub hub: crate::worker::Hub,
}

impl App {
    /// Compiles the kinds, opens the database and applies migrations.
    pub async fn open(config: Config) -> Result<App, StartError> {
        let kinds = Kinds::compile(&config)?;
        crate::telemetry::install();
        let providers = Providers::from_config(&config).await?;
        let options = StoreOptions {
            finished_after: config.retention.finished_after,
            ..StoreOptions::default()
        };
        let store = open_store_with(&config.database, &options).await?;
        let limits = ParamsLimits {
            max_depth: config.max_params_depth,
        };
        let hub = crate::worker::Hub::default();
        let jobs = Jobs::new(
            store.clone(),
            kinds,
            limits,
            providers.clone(),
            hub.watch.clone(),
        );
        Ok(App {
            config,
            store,
            jobs,
            providers,
            hub,
        })
    }

    /// Starts a worker loop with the configured `[worker]` settings.
    pub fn spawn_worker(&self) -> WorkerHandle {
        let settings = WorkerSettings {
            id: WorkerSettings::new_id(),
            concurrency: self.config.worker.concurrency,
            lease: self.config.worker.lease,
            poll_interval: self.config.worker.poll_interval,
            shutdown_grace: self.config.worker.shutdown_grace,
            retention: self.config.retention.finished_after.map(|finished_after| {
                crate::worker::retention::Retention {
                    finished_after,
                    every: self.config.retention.every(),
                    batch: self.config.retention.batch(),
                }
            }),
        };
        worker::spawn(WorkerContext::new(
            self.store.clone(),
            self.jobs.kinds().clone(),
            self.providers.clone(),
            settings,
            self.hub.clone(),
        ))
    }

    /// Binds the configured listen address.
    pub async fn bind(&self) -> Result<TcpListener, StartError> {
        let addr = self.config.listen;
        TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Bind { addr, source })
    }

    /// Serves the API on `listener` until `shutdown` completes, then drains requests.
    pub async fn serve(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let router = http::router(self.state());
        http::server::serve(listener, router, self.server_limits(), shutdown).await
    }

    /// Serves only `/metrics`, `/healthz` and `/readyz` on `listener` (a worker-only node's
    /// probes) until `shutdown` completes.
    pub async fn serve_probes(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let router = http::probes_router(self.state());
        http::server::serve(listener, router, self.server_limits(), shutdown).await
    }

    fn state(&self) -> Arc<AppState> {
        Arc::new(AppState {
            jobs: self.jobs.clone(),
            max_body_bytes: self.config.max_body_bytes,
            keys: crate::api_key::KeyRing::with_ttl(
                self.store.clone(),
                self.config.http.key_cache_ttl,
            ),
            request_timeout: self.config.http.request_timeout,
            gateway: crate::jobs::gateway::GatewayCalls::new(
                self.jobs.clone(),
                self.hub.clone(),
                self.config.gateway.allow_keyless,
                // Kept a second inside the request deadline, so the answer is ours, not a 408.
                self.config.gateway.wait.min(
                    self.config
                        .http
                        .request_timeout
                        .saturating_sub(Duration::from_secs(1)),
                ),
            ),
        })
    }

    fn server_limits(&self) -> http::server::ServerLimits {
        http::server::ServerLimits {
            header_read_timeout: self.config.http.header_read_timeout,
            drain: self.config.http.request_timeout,
        }
    }
}

/// Opens and migrates the database at `url`.
pub async fn open_store(url: &str) -> Result<Arc<dyn Store>, StartError> {
    open_store_with(url, &StoreOptions::default()).await
}

/// Opens the database at `url` with these settings, and migrates it.
pub async fn open_store_with(
    url: &str,
    options: &StoreOptions,
) -> Result<Arc<dyn Store>, StartError> {
    let wrap = |source| StartError::Store {
        url: store::redact(url),
        source,
    };
    let store = store::open(url, options).await.map_err(wrap)?;
    store.migrate().await.map_err(wrap)?;
    Ok(store)
}

/// Opens the database at `url` and migrates it (`onejob migrate`): what the migration did.
pub async fn migrate_store(url: &str) -> Result<store::Migrated, StartError> {
    let wrap = |source| StartError::Store {
        url: store::redact(url),
        source,
    };
    let store = store::open(url, &StoreOptions::default())
        .await
        .map_err(wrap)?;
    store.migrate().await.map_err(wrap)
}

/// Opens the database at `url` for a command that manages what is in it (`onejob keys …`):
/// it must exist and hold onejob's schema. Nothing is created or migrated, so a typo in the
/// URL is an error, not a new empty database whose keys no server reads.
pub async fn open_existing_store(url: &str) -> Result<Arc<dyn Store>, StartError> {
    let not_onejob = |reason: String| StartError::NotOnejob {
        url: store::redact(url),
        reason,
    };
    if url.starts_with("sqlite:") {
        let options: sqlx::sqlite::SqliteConnectOptions =
            url.parse().map_err(|e| StartError::Store {
                url: store::redact(url),
                source: StoreError::from(e),
            })?;
        let file = options.get_filename();
        if !file.exists() {
            return Err(not_onejob(format!(
                "no database file at {}: check the path, or create it by starting onejob on \
                 it (`onejob serve --database {url}` or `onejob migrate --database {url}`)",
                file.display(),
                url = store::redact(url),
            )));
        }
    }
    let store = store::open(url, &StoreOptions::default())
        .await
        .map_err(|source| StartError::Store {
            url: store::redact(url),
            source,
        })?;
    match store.api_keys().await {
        Ok(_) => {}
        Err(source) if source.is_retryable() => {
            return Err(StartError::Store {
                url: store::redact(url),
                source,
            });
        }
        Err(error) => {
            return Err(not_onejob(format!(
                "it holds no onejob schema ({}): check the URL, or create the schema with \
             `onejob migrate --database {}`",
                store::Chain(&error),
                store::redact(url),
            )));
        }
    }
    Ok(store)
}
