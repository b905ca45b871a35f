//! Prometheus metrics: what onejob counts and measures, recorded through the `metrics`
//! facade and rendered at `/metrics`.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `onejob_jobs_submitted_total` | counter | `outcome`: created, replayed, key_conflict |
//! | `onejob_attempts_started_total` | counter | `provider`, `hedge` |
//! | `onejob_attempts_ended_total` | counter | `provider`, `outcome`: won, discarded, failed, cancelled, unknown |
//! | `onejob_races_lost_total` | counter | |
//! | `onejob_attempts_unknown` | gauge | (read from the database at scrape time) |
//! | `onejob_dispatch_latency_seconds` | histogram | (accepted → provider called, first attempts) |
//! | `onejob_provider_latency_seconds` | histogram | `provider` (sent → answered or task finished) |

use std::{sync::OnceLock, time::Duration};

use metrics::{counter, gauge, histogram};
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
            Ok(handle) => handle,
            Err(error) => {
                // Another recorder owns the process (an embedding application): keep serving
                // an empty page rather than failing start-up.
                tracing::warn!(%error, "metrics recorder not installed");
                PrometheusBuilder::new().build_recorder().handle()
            }
        }
    })
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
