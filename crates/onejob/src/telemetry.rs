//! Prometheus metrics: what onejob counts and measures, recorded through the `metrics`
//! facade and rendered at `/metrics`.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `onejob_jobs_submitted_total` | counter | `outcome`: created, replayed, key_conflict |
//! | `onejob_attempts_started_total` | counter | `provider`, `hedge` |
//! | `onejob_attempts_ended_total` | counter | `provider`, `outcome`: won, discarded, failed, cancelled, unknown |
//! | `onejob_races_lost_total` | counter | |
//! | `onejob_attempts_resent_total` | counter | `provider` |
//! | `onejob_retention_deleted_total` | counter | `what`: jobs, attempts, events |
//! | `onejob_writes_dropped_total` | counter | `what`: the write nobody waited for (`replayed event`) |
//! | `onejob_attempts_unknown` | gauge | (cluster-wide, read from the database at scrape time) |
//! | `onejob_dispatch_latency_seconds` | histogram | (accepted → provider called, first attempts) |
//! | `onejob_provider_latency_seconds` | histogram | `provider` (sent → answered or task finished) |
//!
//! Every metric is described (its `# HELP` line) in [`describe`]. The counters and
//! histograms count what this process did, so they add up over nodes with `sum()`.
//! `onejob_attempts_unknown` is different: every node reads the same cluster-wide count from
//! the shared database, so it must be aggregated with `max()`, never `sum()`.

use std::{sync::OnceLock, time::Duration};

use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Latency buckets, in seconds: 1 ms to 5 min.
const BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the Prometheus recorder (once per process) and returns its handle.
pub fn install() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &BUCKETS)
            .expect("the buckets are not empty");
        match builder.install_recorder() {
            Ok(handle) => {
                describe();
                handle
            }
            Err(error) => {
                // Another recorder owns the process (an embedding application): keep serving
                // an empty page rather than failing start-up.
                tracing::warn!(%error, "metrics recorder not installed");
                PrometheusBuilder::new().build_recorder().handle()
            }
        }
    })
}

/// Gives every metric its `# HELP` text (and unit), on the installed recorder.
fn describe() {
    describe_counter!(
        "onejob_jobs_submitted_total",
        "Submissions answered by this node, by outcome: created, replayed (the key already \
         named the same intent), key_conflict (the key names another intent)"
    );
    describe_counter!(
        "onejob_attempts_started_total",
        "Attempts this node's worker sent to a provider, by provider and whether a hedge"
    );
    describe_counter!(
        "onejob_attempts_ended_total",
        "Attempts this node's worker saw end, by provider and outcome: won, discarded (lost \
         the race), failed, cancelled, unknown"
    );
    describe_counter!(
        "onejob_races_lost_total",
        "Late results discarded because another attempt of the job had already won"
    );
    describe_counter!(
        "onejob_attempts_resent_total",
        "Unknown attempts the reconciler re-sent under their same upstream idempotency key"
    );
    describe_counter!(
        "onejob_retention_deleted_total",
        "Rows deleted by retention on this node, by table: jobs, attempts, events"
    );
    describe_counter!(
        "onejob_writes_dropped_total",
        "Writes nobody waited for (replayed events) that failed and were dropped, by what \
         they were; each failure is also logged"
    );
    describe_gauge!(
        "onejob_attempts_unknown",
        "Attempts whose outcome is unknown, in the whole cluster (read from the shared \
         database at scrape time): every node reports the same value, aggregate with max(), \
         not sum()"
    );
    describe_histogram!(
        "onejob_dispatch_latency_seconds",
        Unit::Seconds,
        "Time from a job's acceptance to its first attempt being sent to a provider"
    );
    describe_histogram!(
        "onejob_provider_latency_seconds",
        Unit::Seconds,
        "Time a provider took to answer (or to finish its task), by provider"
    );
}

/// A submission was answered.
pub fn submitted(outcome: &'static str) {
    counter!("onejob_jobs_submitted_total", "outcome" => outcome).increment(1);
}

/// An attempt started.
pub fn attempt_started(provider: &str, hedge: bool) {
    counter!(
        "onejob_attempts_started_total",
        "provider" => provider.to_owned(),
        "hedge" => if hedge { "true" } else { "false" }
    )
    .increment(1);
}

/// An attempt ended (or became unknown).
pub fn attempt_ended(provider: &str, outcome: &'static str) {
    counter!("onejob_attempts_ended_total", "provider" => provider.to_owned(), "outcome" => outcome)
        .increment(1);
    if outcome == "discarded" {
        counter!("onejob_races_lost_total").increment(1);
    }
}

/// Rows a retention batch deleted.
pub fn retention_deleted(jobs: u64, attempts: u64, events: u64) {
    for (what, n) in [("jobs", jobs), ("attempts", attempts), ("events", events)] {
        if n > 0 {
            counter!("onejob_retention_deleted_total", "what" => what).increment(n);
        }
    }
}

/// Writes nobody waited for failed and were dropped.
pub fn writes_dropped(what: &'static str, count: u64) {
    counter!("onejob_writes_dropped_total", "what" => what).increment(count);
}

/// The reconciler re-sent an unknown attempt under its same upstream key.
pub fn attempt_resent(provider: &str) {
    counter!("onejob_attempts_resent_total", "provider" => provider.to_owned()).increment(1);
}

/// The time from a job's acceptance to its first attempt being sent.
pub fn dispatch_latency(latency: Duration) {
    histogram!("onejob_dispatch_latency_seconds").record(latency.as_secs_f64());
}

/// The time a provider took to answer (or to finish its task).
pub fn provider_latency(provider: &str, latency: Duration) {
    histogram!("onejob_provider_latency_seconds", "provider" => provider.to_owned())
        .record(latency.as_secs_f64());
}

/// Sets the unknown-attempts gauge.
pub fn unknown_attempts(count: u64) {
    gauge!("onejob_attempts_unknown").set(count as f64);
}
