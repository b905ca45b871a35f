//! The `onejob` command line (docs/design.md §7): `serve`, `worker`, `migrate`, `keys`,
//! `verify`, `config check`, `completions`, and the client commands `submit`, `status`,
//! `watch`, `jobs list` and `attempts resolve` (over onejob-client; their exit codes are in
//! [`exit`]).
//!
//! Each subcommand lives in its own file; this one parses arguments, chooses the
//! configuration ([`configure`]), sets up logging (the config file's `log_format` unless
//! `--log-format` says otherwise) and dispatches. Errors leave through `anyhow` here, at the binary's edge, and nowhere else.

mod attempts;
mod check;
mod completions;
mod configure;
mod demo;
mod display;
pub mod exit;
mod jobs;
mod keys;
mod migrate;
mod open_files;
mod openapi;
mod remote;
mod serve;
mod status;
mod submit;
mod verify;
mod watch;
mod worker;

use std::{future::Future, io::IsTerminal, process::ExitCode};

use clap::{Parser, Subcommand};

use crate::config::LogFormat;

pub use configure::ConfigArgs;
use configure::{Chosen, Runner, choose};

/// One user intent, one job.
#[derive(Debug, Parser)]
#[command(name = "onejob", version, about, long_about = None)]
pub struct Cli {
    /// Log line format (overrides the config file's `log_format`).
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
    Migrate(configure::DatabaseArgs),
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
    /// Check a configuration without starting anything.
    #[command(subcommand)]
    Config(check::ConfigCommand),
    /// Print a shell completion script (bash, zsh or fish) on stdout.
    Completions(completions::CompletionsArgs),
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
    let flag = cli.log_format;
    // Logging starts once the config file (and its `log_format`) is known.
    let start =
        |file: Option<LogFormat>, filter: &str| -> anyhow::Result<tokio::runtime::Runtime> {
            init_logging(flag.or(file).unwrap_or_default(), filter);
            crate::fault::init_from_env()?;
            Ok(tokio::runtime::Runtime::new()?)
        };
    let with = |chosen: &Chosen| -> anyhow::Result<tokio::runtime::Runtime> {
        let runtime = start(Some(chosen.config.log_format), DEFAULT_FILTER)?;
        chosen.announce();
        open_files::raise(chosen.config.worker.concurrency);
        Ok(runtime)
    };
    let plain = || start(None, DEFAULT_FILTER);
    match cli.command {
        // The demo tells its own story on stdout; its logs stay quiet unless asked for.
        Command::Demo(args) => {
            let runtime = start(None, "warn")?;
            open_files::raise(crate::config::WorkerConfig::default().concurrency);
            done(runtime, demo::run(args))
        }
        Command::Serve(args) => {
            let chosen = choose(&args.config, args.database.as_deref(), Runner::Serve)?;
            done(with(&chosen)?, serve::run(args, chosen))
        }
        Command::Worker(args) => {
            let chosen = choose(&args.config, args.database.as_deref(), Runner::Worker)?;
            done(with(&chosen)?, worker::run(args, chosen))
        }
        Command::Verify(args) => {
            let chosen = choose(&args.config, args.database.as_deref(), Runner::Verify)?;
            with(&chosen)?.block_on(verify::run(args, chosen))
        }
        Command::Keys(command) => {
            let target = command.database().target()?;
            done(
                start(target.log_format, DEFAULT_FILTER)?,
                keys::run(command, target),
            )
        }
        Command::Migrate(args) => {
            let target = args.target()?;
            done(
                start(target.log_format, DEFAULT_FILTER)?,
                migrate::run(target),
            )
        }
        Command::Openapi => {
            openapi::run()?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Attempts(command) => plain()?.block_on(attempts::run(command)),
        Command::Submit(args) => plain()?.block_on(submit::run(args)),
        Command::Status(args) => plain()?.block_on(status::run(args)),
        Command::Watch(args) => plain()?.block_on(watch::run(args)),
        Command::Jobs(command) => plain()?.block_on(jobs::run(command)),
        // Its report is its output; logs only for what goes wrong.
        Command::Config(command) => start(None, "warn")?.block_on(check::run(command)),
        Command::Completions(args) => {
            completions::run(args);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// What the service's own logs show by default (`RUST_LOG` overrides it).
const DEFAULT_FILTER: &str = "info,sqlx=warn";

/// Runs a command that succeeds or fails with an error.
fn done(
    runtime: tokio::runtime::Runtime,
    command: impl Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<ExitCode> {
    runtime.block_on(command).map(|()| ExitCode::SUCCESS)
}

/// Logs to stderr in `format`, with colours only when stderr is a terminal (a file or a
/// pipe gets plain text).
fn init_logging(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
