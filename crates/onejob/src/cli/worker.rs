//! `onejob worker`: a worker without the API, so API nodes and worker nodes scale apart
//! (several of either on one PostgreSQL).

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
}

/// Runs `onejob worker` until Ctrl-C or SIGTERM.
pub async fn run(_args: WorkerArgs, chosen: Chosen) -> anyhow::Result<()> {
    let app = App::open(chosen.config).await?;
    let worker = app.spawn_worker();
    shutdown_signal().await;
    worker.shutdown().await;
    Ok(())
}
