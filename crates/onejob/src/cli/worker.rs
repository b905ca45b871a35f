//! `onejob worker`: a worker without the API, so API nodes and worker nodes scale apart
//! (several of either on one PostgreSQL). With `--listen` (or `[worker] listen`) it serves
//! `/metrics`, `/healthz` and `/readyz` for the scraper and the orchestrator.

use std::net::SocketAddr;

use anyhow::Context;

use super::{Chosen, ConfigArgs, serve::shutdown_signal};
use crate::app::App;

/// Arguments of `onejob worker`.
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub(super) config: ConfigArgs,
    /// Override the database URL (without a config file, needs `--demo`).
    #[arg(long)]
    pub(super) database: Option<String>,
    /// Serve `/metrics`, `/healthz` and `/readyz` on this address (overrides
    /// `[worker] listen`).
    #[arg(long)]
    listen: Option<SocketAddr>,
}

/// Runs `onejob worker` until Ctrl-C or SIGTERM.
pub async fn run(args: WorkerArgs, chosen: Chosen) -> anyhow::Result<()> {
    let listen = args.listen.or(chosen.config.worker.listen);
    let app = App::open(chosen.config).await?;
    let probes = match listen {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            let addr = listener.local_addr().context("reading the bound address")?;
            tracing::info!(%addr, "worker serving /metrics, /healthz and /readyz");
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let app = app.clone();
            let task = tokio::spawn(async move {
                app.serve_probes(listener, async {
                    let _ = stopped.await;
                })
                .await
            });
            Some((stop, task))
        }
        None => None,
    };
    let worker = app.spawn_worker();
    shutdown_signal().await;
    worker.shutdown().await;
    if let Some((stop, task)) = probes {
        let _ = stop.send(());
        task.await.context("the probe server panicked")??;
    }
    Ok(())
}
