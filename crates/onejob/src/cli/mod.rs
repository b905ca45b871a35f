//! The `onejob` command line (DESIGN §7): `serve`, `worker`, `migrate`, `keys create`,
//! `verify`, and the client commands `submit`, `status`, `watch`, `jobs list` and
//! `attempts resolve` (over onejob-client; their exit codes are in [`exit`]).
//!
//! Each subcommand lives in its own file; this one parses arguments, sets up logging and
//! dispatches. Errors leave through `anyhow` here, at the binary's edge, and nowhere else.

mod attempts;
mod demo;
mod display;
pub mod exit;
mod jobs;
mod keys;
mod migrate;
mod openapi;
mod remote;
mod serve;
mod status;
mod submit;
mod verify;
mod watch;
mod worker;

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};

use crate::config::LogFormat;

/// One user intent, one job.
#[derive(Debug, Parser)]
#[command(name = "onejob", version, about, long_about = None)]
pub struct Cli {
    /// Log line format.
    #[arg(long, global = true, value_enum, env = "ONEJOB_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Play the guarantees: everything embedded, four short scenes, then the dashboard.
    Demo(demo::DemoArgs),
    /// Run the HTTP API (SQLite file, fake provider and demo kinds when given no config).
    Serve(serve::ServeArgs),
    /// Run a worker only (no API): claims due jobs and runs their attempts.
    Worker(worker::WorkerArgs),
    /// Apply the database schema migrations and exit.
    Migrate(DatabaseArgs),
    /// Manage API keys.
    #[command(subcommand)]
    Keys(keys::KeysCommand),
    /// Print the OpenAPI document of the HTTP API.
    Openapi,
    /// Run a kind's contract against a provider and record a certificate.
    Verify(verify::VerifyArgs),
    /// Operate on attempts (resolve an unknown one).
    #[command(subcommand)]
    Attempts(attempts::AttemptsCommand),
    /// Submit a job under an idempotency key (params from a file or standard input).
    Submit(submit::SubmitArgs),
    /// Show a job.
    Status(status::StatusArgs),
    /// Follow a job's state and attempts until it is finished.
    Watch(watch::WatchArgs),
    /// Your jobs.
    #[command(subcommand)]
    Jobs(jobs::JobsCommand),
}

/// Where the database is, for commands that need only that.
#[derive(Debug, clap::Args)]
pub struct DatabaseArgs {
    /// Database URL (`sqlite://onejob.db`, `postgres://user@host:5432/db`).
    #[arg(long, env = "ONEJOB_DATABASE", default_value = crate::config::DEFAULT_DATABASE)]
    pub database: String,
}

/// Optional config file shared by subcommands that read one.
#[derive(Debug, clap::Args)]
pub struct ConfigArgs {
    /// The onejob.toml to use; without it the built-in demo configuration is used.
    #[arg(long, short, env = "ONEJOB_CONFIG")]
    pub config: Option<PathBuf>,
}

/// Parses the command line and runs it; the exit code says whether it succeeded.
pub fn run() -> anyhow::Result<ExitCode> {
    // Usage errors exit 1 (not clap's 2, which `submit --wait` and `watch` use for a
    // failed job; see `exit::EXIT_CODES`).
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return Ok(if error.use_stderr() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            });
        }
    };
    // The demo tells its own story on stdout; its logs stay quiet unless asked for.
    let default_filter = match cli.command {
        Command::Demo(_) => "warn",
        _ => "info,sqlx=warn",
    };
    init_logging(cli.log_format.unwrap_or_default(), default_filter);
    crate::fault::init_from_env()?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let done = |r: anyhow::Result<()>| r.map(|()| ExitCode::SUCCESS);
        match cli.command {
            Command::Demo(args) => done(demo::run(args).await),
            Command::Serve(args) => done(serve::run(args).await),
            Command::Worker(args) => done(worker::run(args).await),
            Command::Migrate(args) => done(migrate::run(args).await),
            Command::Keys(command) => done(keys::run(command).await),
            Command::Openapi => done(openapi::run()),
            Command::Verify(args) => verify::run(args).await,
            Command::Attempts(command) => attempts::run(command).await,
            Command::Submit(args) => submit::run(args).await,
            Command::Status(args) => status::run(args).await,
            Command::Watch(args) => watch::run(args).await,
            Command::Jobs(command) => jobs::run(command).await,
        }
    })
}

fn init_logging(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
