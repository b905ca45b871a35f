//! The `onejob-fake` binary: runs the fake provider on a fixed address until Ctrl-C or
//! SIGTERM, optionally with rules given on the command line.
//!
//! ```text
//! onejob-fake --listen 127.0.0.1:9001 --rule '{"matches": "fox", "run_ms": 2000}'
//! ```

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use onejob_fake::{FakeServer, Rule};
use tracing_subscriber::EnvFilter;

/// The fake provider: an OpenAI-compatible chat endpoint and an async task API with scripted
/// latency, hangs, failures and a side-effect counter (GET /_fake/submissions).
#[derive(Debug, Parser)]
#[command(name = "onejob-fake", version)]
struct Args {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:9001", env = "ONEJOB_FAKE_LISTEN")]
    listen: SocketAddr,
    /// A rule as JSON (repeatable; tried in order), e.g. '{"outcome": "fail", "times": 1}'.
    #[arg(long = "rule", value_parser = parse_rule)]
    rules: Vec<Rule>,
}

fn parse_rule(text: &str) -> Result<Rule, String> {
    Rule::from_json_str(text).map_err(|error| error.to_string())
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let server = match FakeServer::spawn(args.listen).await {
        Ok(server) => server,
        Err(error) => {
            eprintln!("onejob-fake: cannot listen on {}: {error}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    for rule in args.rules {
        server.add_rule(rule);
    }
    println!("onejob-fake listening on {}", server.base_url());
    if let Err(error) = stop_signal().await {
        eprintln!("onejob-fake: cannot wait for a stop signal: {error}");
        return ExitCode::FAILURE;
    }
    drop(server);
    ExitCode::SUCCESS
}

/// Completes on Ctrl-C, or on SIGTERM where there is one.
async fn stop_signal() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            interrupted = tokio::signal::ctrl_c() => interrupted,
            _ = terminate.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await
    }
}
