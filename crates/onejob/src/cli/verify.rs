//! `onejob verify --provider P --kind K`: run the kind's contract against the provider and
//! record the run as a certificate. Exits 0 when it passed, 1 when it did not.

use std::process::ExitCode;

use anyhow::Context;

use super::{Chosen, ConfigArgs};
use crate::{app::App, verify};

/// Arguments of `onejob verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub(super) config: ConfigArgs,
    /// Override the database URL (where the certificate is recorded).
    #[arg(long)]
    pub(super) database: Option<String>,
    /// The provider to verify.
    #[arg(long)]
    provider: String,
    /// The kind whose contract cases to run.
    #[arg(long)]
    kind: String,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `onejob verify`.
pub async fn run(args: VerifyArgs, chosen: Chosen) -> anyhow::Result<ExitCode> {
    let config = chosen.config;
    let limits = verify::Limits::of(&config, &args.provider);
    let app = App::open(config).await?;
    let kind = app
        .jobs
        .kinds()
        .get(&args.kind)
        .cloned()
        .with_context(|| format!("no kind {:?} in the configuration", args.kind))?;
    let provider = app
        .providers
        .get(&args.provider)
        .cloned()
        .with_context(|| format!("no provider {:?} in the configuration", args.provider))?;
    let (report, record) = app
        .jobs
        .verify(&kind, &args.provider, &*provider, limits)
        .await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report, &record.id.to_string());
    }
    Ok(if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_report(report: &verify::VerifyReport, id: &str) {
    println!(
        "verify {} against the contract of {} ({} cases)",
        report.provider,
        report.kind,
        report.cases.len()
    );
    for case in &report.cases {
        let tokens = match (&case.prompt_tokens, &case.tokenizer) {
            (Some(n), Some(t)) => format!(", {n} prompt tokens by {t}"),
            _ => String::new(),
        };
        let verdict = if case.passed { "pass" } else { "FAIL" };
        println!(
            "  {verdict}  {} ({}{tokens})",
            case.name,
            super::display::duration(std::time::Duration::from_millis(case.latency_ms))
        );
        for problem in &case.problems {
            println!("        - {problem}");
        }
        if let (false, Some(output)) = (case.passed, &case.output) {
            let text: String = output.to_string().chars().take(300).collect();
            println!("        output: {text}");
        }
    }
    if report.cases.is_empty() {
        println!("  the kind has no [[kind.contract]] cases: nothing to certify");
    }
    if let Some(lookup) = &report.lookup {
        let verdict = if lookup.passed { "pass" } else { "FAIL" };
        println!("  {verdict}  lookup by idempotency key");
        for problem in &lookup.problems {
            println!("        - {problem}");
        }
    }
    if let Some(idempotency) = &report.idempotency {
        let verdict = if idempotency.deduplicated {
            "deduplicates"
        } else {
            "does not deduplicate"
        };
        println!(
            "  {} {verdict} by {}: {}",
            report.provider, idempotency.header, idempotency.evidence
        );
    }
    if report.passed {
        println!(
            "certified: {} may take failover and hedged attempts of {} (certificate {id})",
            report.provider, report.kind
        );
    } else {
        println!(
            "not certified: failover and hedging will not go to {} for {} (run {id})",
            report.provider, report.kind
        );
    }
}
