//! `onejob jobs list [--state S] [--kind K] [--limit N] [--before ID]`: the caller's jobs,
//! newest first, one line each (or the API's page as JSON).

use clap::Subcommand;
use onejob_client::{JobFilter, JobState};
use uuid::Uuid;

use super::{
    display,
    exit::{self, EXIT_CODES, Exit},
    remote::RemoteArgs,
};

/// `onejob jobs …`
#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// List your jobs, newest first.
    List(ListArgs),
}

/// Arguments of `onejob jobs list`.
#[derive(Debug, clap::Args)]
#[command(after_help = EXIT_CODES)]
pub struct ListArgs {
    /// Only jobs in this state (pending, running, unknown, succeeded, failed, cancelled).
    #[arg(long)]
    state: Option<JobState>,
    /// Only jobs of this kind.
    #[arg(long)]
    kind: Option<String>,
    /// At most this many jobs (1-500; the server's default is 50).
    #[arg(long)]
    limit: Option<u32>,
    /// Only jobs older than this one (the `next_before` of the previous page).
    #[arg(long)]
    before: Option<Uuid>,
    #[command(flatten)]
    remote: RemoteArgs,
}

/// Runs `onejob jobs …`.
pub async fn run(command: JobsCommand) -> anyhow::Result<std::process::ExitCode> {
    let JobsCommand::List(args) = command;
    exit::finish(&args.remote, list(&args).await)
}

async fn list(args: &ListArgs) -> anyhow::Result<Exit> {
    let mut filter = JobFilter::new();
    if let Some(state) = args.state {
        filter = filter.state(state);
    }
    if let Some(kind) = &args.kind {
        filter = filter.kind(kind.clone());
    }
    if let Some(limit) = args.limit {
        filter = filter.limit(limit);
    }
    if let Some(before) = args.before {
        filter = filter.before(before);
    }
    let page = args.remote.client()?.list_jobs(&filter).await?;
    if args.remote.json {
        println!("{}", serde_json::to_string_pretty(&page)?);
        return Ok(Exit::Success);
    }
    for job in &page.jobs {
        println!(
            "{}  {:<9}  {:<20}  {} attempt(s)  {}",
            job.id,
            job.state.as_str(),
            job.kind,
            job.attempts,
            display::timestamp(job.created_at)
        );
    }
    if let Some(next) = page.next_before {
        eprintln!("onejob: more jobs: add --before {next}");
    }
    Ok(Exit::Success)
}
