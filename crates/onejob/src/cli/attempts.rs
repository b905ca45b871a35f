//! `onejob attempts resolve ID --outcome …`: an operator's out-of-band resolution of an
//! unknown attempt, through the HTTP API (`POST /v1/attempts/{id}/resolve`).

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context;
use clap::Subcommand;
use serde_json::{Value, json};

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
pub struct ResolveArgs {
    /// The attempt id.
    attempt: String,
    /// What happened upstream.
    #[arg(long, value_enum)]
    outcome: Outcome,
    /// A JSON file with the result (for `--outcome succeeded`).
    #[arg(long)]
    result: Option<PathBuf>,
    /// Why, for the event log.
    #[arg(long)]
    reason: Option<String>,
    /// onejob's URL.
    #[arg(long, env = "ONEJOB_URL", default_value = "http://127.0.0.1:8080")]
    url: String,
    /// An operator API key.
    #[arg(long, env = "ONEJOB_API_KEY", hide_env_values = true)]
    key: String,
}

/// Runs `onejob attempts …`.
pub async fn run(command: AttemptsCommand) -> anyhow::Result<ExitCode> {
    let AttemptsCommand::Resolve(args) = command;
    let mut body = json!({
        "outcome": match args.outcome {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
        }
    });
    if let Some(path) = &args.result {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        body["result"] = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
    }
    if let Some(reason) = &args.reason {
        body["reason"] = json!(reason);
    }
    let url = format!(
        "{}/v1/attempts/{}/resolve",
        args.url.trim_end_matches('/'),
        args.attempt
    );
    let response = crate::provider::http_client()
        .post(&url)
        .bearer_auth(&args.key)
        .json(&body)
        .send()
        .await
        .with_context(|| format!("calling {url}"))?;
    let status = response.status();
    let answer: Value = response.json().await.unwrap_or(Value::Null);
    println!("{}", serde_json::to_string_pretty(&answer)?);
    Ok(if status.is_success() {
        ExitCode::SUCCESS
    } else {
        eprintln!("onejob: {status}");
        ExitCode::FAILURE
    })
}
