//! `onejob watch ID`: follow a job's state and attempts until it is finished, then exit
//! with its outcome.
//!
//! On a terminal the view is redrawn in place (ANSI: cursor up, clear below); otherwise one
//! plain line is printed per change (`running    attempts: #1 fake running`), and with
//! `--json` one JSON object per change (`{"job": …, "attempts": […]}`).

use std::{
    io::{IsTerminal, Write},
    time::Duration,
};

use onejob_client::{Attempt, Job};
use serde_json::json;
use tokio::time::Instant;
use uuid::Uuid;

use super::{
    display,
    exit::{self, EXIT_CODES, Exit},
    remote::{RemoteArgs, parse_duration},
};

/// The longest pause between two looks, whatever the server advises.
const MAX_INTERVAL: Duration = Duration::from_secs(5);

/// Arguments of `onejob watch`.
#[derive(Debug, clap::Args)]
#[command(after_help = EXIT_CODES)]
pub struct WatchArgs {
    /// The job id.
    id: Uuid,
    /// Give up after this long (`30s`, `10m`).
    #[arg(long, value_parser = parse_duration, default_value = "1h")]
    timeout: Duration,
    #[command(flatten)]
    remote: RemoteArgs,
}

/// How changes are shown.
enum Output {
    /// Redraw a compact view in place; `lines` is how many the last frame drew.
    Live { lines: usize, started: Instant },
    /// One plain line per change.
    Lines,
    /// One JSON object per change.
    Json,
}

/// Runs `onejob watch`.
pub async fn run(args: WatchArgs) -> anyhow::Result<std::process::ExitCode> {
    exit::finish(&args.remote, watch(&args).await)
}

async fn watch(args: &WatchArgs) -> anyhow::Result<Exit> {
    let client = args.remote.client()?;
    let mut output = if args.remote.json {
        Output::Json
    } else if std::io::stdout().is_terminal() {
        Output::Live {
            lines: 0,
            started: Instant::now(),
        }
    } else {
        Output::Lines
    };
    let deadline = Instant::now() + args.timeout;
    let mut last = None;
    loop {
        let poll = client.poll(args.id).await?;
        let attempts = client.attempts(args.id).await?;
        let seen = (
            poll.job.state,
            poll.job.attempts,
            attempts
                .iter()
                .map(|a| (a.number, a.state))
                .collect::<Vec<_>>(),
        );
        let changed = last.as_ref() != Some(&seen);
        last = Some(seen);
        output.show(&poll.job, &attempts, changed)?;
        if poll.job.is_finished() {
            output.finish(&poll.job);
            return Ok(Exit::of_state(poll.job.state));
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            eprintln!(
                "onejob: job {} is still {} after {}; it goes on",
                poll.job.id,
                poll.job.state,
                display::duration(args.timeout)
            );
            return Ok(Exit::StillRunning);
        }
        let pause = poll
            .advice()
            .unwrap_or(Duration::from_secs(1))
            .min(MAX_INTERVAL)
            .min(remaining);
        tokio::time::sleep(pause).await;
    }
}

impl Output {
    /// Shows the job and its attempts (a live view redraws on every look).
    fn show(&mut self, job: &Job, attempts: &[Attempt], changed: bool) -> anyhow::Result<()> {
        let mut stdout = std::io::stdout().lock();
        match self {
            Output::Json if changed => {
                writeln!(stdout, "{}", json!({ "job": job, "attempts": attempts }))?;
            }
            Output::Lines if changed => {
                writeln!(
                    stdout,
                    "{:<10} attempts: {}",
                    job.state.as_str(),
                    display::attempts_phrase(attempts)
                )?;
            }
            Output::Live { lines, started } => {
                let frame = live_frame(job, attempts, started.elapsed());
                if *lines > 0 {
                    write!(stdout, "\x1b[{lines}A\x1b[J")?;
                }
                write!(stdout, "{frame}")?;
                *lines = frame.lines().count();
            }
            Output::Json | Output::Lines => {}
        }
        stdout.flush()?;
        Ok(())
    }

    /// Prints the finished job's result or error (text outputs only).
    fn finish(&self, job: &Job) {
        if matches!(self, Output::Json) {
            return;
        }
        if let Some(result) = &job.result {
            println!("result     {}", display::compact(result));
        }
        if let Some(error) = &job.error {
            println!("error      {}", display::compact(error));
        }
    }
}

/// The live view: the job on one line, then one line per attempt.
fn live_frame(job: &Job, attempts: &[Attempt], elapsed: Duration) -> String {
    let mut frame = format!(
        "job {}  {}  \x1b[1m{}\x1b[0m  ({})\n",
        job.id,
        job.kind,
        job.state,
        display::duration(elapsed)
    );
    for attempt in attempts {
        let task = attempt
            .task_id
            .as_deref()
            .map(|t| format!("  task {t}"))
            .unwrap_or_default();
        frame.push_str(&format!("  {}{task}\n", display::attempt_phrase(attempt)));
    }
    frame
}
