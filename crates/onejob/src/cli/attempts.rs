//! `onejob attempts resolve ID --outcome …`: an operator's out-of-band resolution of an
//! unknown attempt, through the HTTP API (`POST /v1/attempts/{id}/resolve`) with
//! onejob-client.

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context;
use clap::Subcommand;
use onejob_client::Resolution;
use uuid::Uuid;

use super::{
    exit::{self, EXIT_CODES, Exit},
    remote::RemoteArgs,
};

/// `onejob attempts …`
#[derive(Debug, Subcommand)]
pub enum AttemptsCommand {
    /// Resolve an unknown attempt (operator key required).
    Resolve(ResolveArgs),
}

/// The outcomes an operator can record.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Outcome {
    /// The upstream did the work; `--result` carries its output.
    Succeeded,
    /// The upstream did not do it.
    Failed,
    /// It was cancelled upstream.
    Cancelled,
}

/// Arguments of `onejob attempts resolve`.
#[derive(Debug, clap::Args)]
#[command(after_help = EXIT_CODES)]
pub struct ResolveArgs {
    /// The attempt id.
    attempt: Uuid,
    /// What happened upstream.
    #[arg(long, value_enum)]
    outcome: Outcome,
    /// A JSON file with the result (for `--outcome succeeded`).
    #[arg(long)]
    result: Option<PathBuf>,
    /// Why, for the event log.
    #[arg(long)]
    reason: Option<String>,
    /// Where onejob is, and an operator API key.
    #[command(flatten)]
    remote: RemoteArgs,
}

/// Runs `onejob attempts …`.
pub async fn run(command: AttemptsCommand) -> anyhow::Result<ExitCode> {
    let AttemptsCommand::Resolve(args) = command;
    exit::finish(&args.remote, resolve(&args).await)
}

async fn resolve(args: &ResolveArgs) -> anyhow::Result<Exit> {
    if args.result.is_some() && !matches!(args.outcome, Outcome::Succeeded) {
        anyhow::bail!("only --outcome succeeded carries a --result");
    }
    let mut resolution = match args.outcome {
        Outcome::Succeeded => {
            let Some(path) = &args.result else {
                anyhow::bail!("--outcome succeeded needs --result FILE with the attempt's result");
            };
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Resolution::succeeded(
                serde_json::from_str(&text)
                    .with_context(|| format!("{} is not JSON", path.display()))?,
            )
        }
        Outcome::Failed => Resolution::failed(),
        Outcome::Cancelled => Resolution::cancelled(),
    };
    if let Some(reason) = &args.reason {
        resolution = resolution.reason(reason.clone());
    }
    let resolved = args
        .remote
        .client()?
        .resolve_attempt(args.attempt, &resolution)
        .await?;
    if args.remote.json {
        println!("{}", serde_json::to_string_pretty(&resolved)?);
    } else {
        println!("attempt    {} ({})", args.attempt, resolved.outcome);
        if let Some(attempt) = &resolved.attempt {
            println!("state      {}", attempt.state);
        }
        if let Some(job) = &resolved.job {
            println!("job        {} is {}", job.id, job.state);
        }
    }
    Ok(Exit::Success)
}
