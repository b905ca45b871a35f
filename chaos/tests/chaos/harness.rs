//! What every scenario shares: where histories go, and the offline check at the end.

use std::{path::PathBuf, sync::Arc};

use onejob_chaos::{
    checker::{self, Report},
    history::{self, History},
};

/// The directory for histories and reports: `$ONEJOB_CHAOS_OUT`, else `chaos/out/`.
pub fn out_dir() -> PathBuf {
    let dir = std::env::var("ONEJOB_CHAOS_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("out"));
    std::fs::create_dir_all(&dir).expect("chaos output directory");
    dir
}

/// A fresh directory for scenario `name`'s node logs (`<out>/<name>-logs/`).
pub fn log_dir(name: &str) -> PathBuf {
    let dir = out_dir().join(format!("{name}-logs"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("log directory");
    dir
}

/// A fresh history for scenario `name`.
pub fn history(name: &str) -> Arc<History> {
    Arc::new(History::create(out_dir().join(format!("{name}.jsonl"))).expect("history file"))
}

/// Reads the history back from its file and checks it, as `onejob-chaos-check` would;
/// prints the figures and writes `<name>.report.json`. Panics on any violation.
pub fn check(history: &History) -> Report {
    let records = history::read_history(history.path()).expect("read the history back");
    let report = checker::check(&records);
    let path = history.path().with_extension("report.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&report).expect("report JSON"),
    )
    .expect("write the report");
    println!(
        "{}: {} records, {}",
        history.path().display(),
        records.len(),
        serde_json::to_string(&report.stats).expect("stats JSON")
    );
    for violation in report.violations.iter().take(50) {
        println!("VIOLATION [{}] {}", violation.rule, violation.detail);
    }
    assert!(
        report.is_clean(),
        "{} violation(s) of DESIGN §2 in {}",
        report.violations.len(),
        history.path().display()
    );
    report
}
