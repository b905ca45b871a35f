//! `onejob worker`: a worker without the API, so API nodes and worker nodes scale apart
//! (several of either on one PostgreSQL).

use super::{ConfigArgs, serve::shutdown_signal};
use crate::{app::App, config::Config};

/// Arguments of `onejob worker`.
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Override the database URL.
    #[arg(long)]
    database: Option<String>,
}

/// Runs `onejob worker` until Ctrl-C or SIGTERM.
pub async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let mut config = Config::load(args.config.config.as_deref())?;
    if let Some(database) = args.database {
        config.database = database;
    }
    let app = App::open(config).await?;
    let worker = app.spawn_worker();
    shutdown_signal().await;
    worker.shutdown().await;
    Ok(())
}
