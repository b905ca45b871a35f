//! `onejob status ID`: print a job as it is now (exit 0 whatever its state).

use uuid::Uuid;

use super::{
    display,
    exit::{self, EXIT_CODES, Exit},
    remote::RemoteArgs,
};

/// Arguments of `onejob status`.
#[derive(Debug, clap::Args)]
#[command(after_help = EXIT_CODES)]
pub struct StatusArgs {
    /// The job id.
    id: Uuid,
    #[command(flatten)]
    remote: RemoteArgs,
}

/// Runs `onejob status`.
pub async fn run(args: StatusArgs) -> anyhow::Result<std::process::ExitCode> {
    exit::finish(&args.remote, status(&args).await)
}

async fn status(args: &StatusArgs) -> anyhow::Result<Exit> {
    let job = args.remote.client()?.job(args.id).await?;
    if args.remote.json {
        println!("{}", serde_json::to_string_pretty(&job)?);
    } else {
        print!("{}", display::job_block(&job, None));
    }
    Ok(Exit::Success)
}
