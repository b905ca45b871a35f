//! `onejob-chaos-check HISTORY.jsonl…`: the offline history checker. Prints each history's
//! counts and every violation of DESIGN §2 it finds; exits 1 if there is any.

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context;
use onejob_chaos::{checker, history};

fn main() -> anyhow::Result<ExitCode> {
    let paths: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    anyhow::ensure!(
        !paths.is_empty(),
        "usage: onejob-chaos-check HISTORY.jsonl…"
    );
    let mut clean = true;
    for path in &paths {
        let records =
            history::read_history(path).with_context(|| format!("reading {}", path.display()))?;
        let report = checker::check(&records);
        println!(
            "{}: {} records; {}",
            path.display(),
            records.len(),
            serde_json::to_string(&report.stats)?
        );
        for violation in &report.violations {
            println!("  VIOLATION [{}] {}", violation.rule, violation.detail);
        }
        println!("  {} violation(s)", report.violations.len());
        clean &= report.is_clean();
    }
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
