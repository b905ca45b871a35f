//! `onejob submit --kind K --key KEY [params.json | -] [--wait]`: submit a job under an
//! idempotency key (params from a file or standard input), print it, and optionally wait
//! for its outcome.

use std::{
    io::{IsTerminal, Read},
    path::PathBuf,
    time::Duration,
};

use anyhow::{Context, bail};
use onejob_client::WaitOptions;
use serde_json::Value;

use super::{
    display,
    exit::{self, EXIT_CODES, Exit},
    remote::{RemoteArgs, parse_duration},
};

/// Arguments of `onejob submit`.
#[derive(Debug, clap::Args)]
#[command(after_help = EXIT_CODES)]
pub struct SubmitArgs {
    /// The job's kind (`chat.completion`, `image.generate`, …).
    #[arg(long)]
    kind: String,
    /// The idempotency key naming this business action (`order-42:caption`): submitting the
    /// same action again with the same key answers the same job.
    #[arg(long, visible_alias = "idempotency-key")]
    key: String,
    /// A JSON file with the params, or `-` for standard input (the default when standard
    /// input is not a terminal).
    params: Option<PathBuf>,
    /// Wait for the job to finish; the exit code then says how it ended.
    #[arg(long)]
    wait: bool,
    /// With --wait: give up after this long (`30s`, `10m`).
    #[arg(long, value_parser = parse_duration, default_value = "10m")]
    timeout: Duration,
    #[command(flatten)]
    remote: RemoteArgs,
}

/// Runs `onejob submit`.
pub async fn run(args: SubmitArgs) -> anyhow::Result<std::process::ExitCode> {
    let remote = args.remote.clone();
    exit::finish(&remote, submit(args).await)
}

async fn submit(args: SubmitArgs) -> anyhow::Result<Exit> {
    let params = read_params(args.params.as_deref())?;
    let client = args.remote.client()?;
    let submission = client.submit(&args.key, &args.kind, &params).await?;
    if !args.wait {
        if args.remote.json {
            if submission.replayed {
                eprintln!(
                    "onejob: replayed: this key already named job {}",
                    submission.job.id
                );
            }
            println!("{}", serde_json::to_string_pretty(&submission.job)?);
        } else {
            print!(
                "{}",
                display::job_block(&submission.job, Some(submission.replayed))
            );
        }
        return Ok(Exit::Success);
    }
    if !args.remote.json {
        let how = if submission.replayed {
            "replayed"
        } else {
            "created"
        };
        eprintln!("onejob: {how} job {}; waiting for it", submission.job.id);
    }
    let options = WaitOptions::default().timeout(args.timeout);
    let job = client.wait(submission.job.id, &options).await?;
    if args.remote.json {
        println!("{}", serde_json::to_string_pretty(&job)?);
    } else {
        print!("{}", display::job_block(&job, Some(submission.replayed)));
    }
    Ok(Exit::of_state(job.state))
}

/// The params document from `path`, or standard input for `-` or no path.
fn read_params(path: Option<&std::path::Path>) -> anyhow::Result<Value> {
    let (text, source) = match path {
        Some(path) if path.as_os_str() != "-" => (
            std::fs::read_to_string(path)
                .with_context(|| format!("reading params from {}", path.display()))?,
            path.display().to_string(),
        ),
        _ => {
            if path.is_none() && std::io::stdin().is_terminal() {
                bail!("give the params as a JSON file, or `-` to read them from standard input");
            }
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading params from standard input")?;
            (text, "standard input".to_owned())
        }
    };
    serde_json::from_str(&text).with_context(|| format!("the params in {source} are not JSON"))
}
