//! `/metrics`: Prometheus counters, gauges and histograms after real traffic, each family
//! with its `# HELP`.

use std::{collections::BTreeSet, time::Duration};

use crate::helpers::{Backend, Fakes, TestApp, TestDatabase, chat, postgres_and_sqlite_tests};

postgres_and_sqlite_tests!(metrics_count_submissions_attempts_and_latencies);

async fn metrics_count_submissions_attempts_and_latencies(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |_| {}).await;
    let job = app.create("metered", &chat("metered")).await;
    app.wait_job(job["id"].as_str().unwrap(), Duration::from_secs(15), |j| {
        j["state"] == "succeeded"
    })
    .await;
    assert_eq!(
        app.submit("metered", &chat("metered"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        app.submit("metered", &chat("changed"))
            .send()
            .await
            .unwrap()
            .status(),
        422
    );

    let response = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200, "no key needed");
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = response.text().await.unwrap();
    for needle in [
        "onejob_jobs_submitted_total{outcome=\"created\"}",
        "onejob_jobs_submitted_total{outcome=\"replayed\"}",
        "onejob_jobs_submitted_total{outcome=\"key_conflict\"}",
        "onejob_attempts_started_total{provider=\"fake\",hedge=\"false\"}",
        "onejob_attempts_ended_total{provider=\"fake\",outcome=\"won\"}",
        "onejob_attempts_unknown ",
        "onejob_dispatch_latency_seconds_bucket",
        "onejob_provider_latency_seconds_bucket{provider=\"fake\"",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
    assert_every_family_is_described(&text);
}

/// Every `onejob_` metric family on the page has a `# TYPE` and a `# HELP` line, and every
/// sample belongs to a declared family.
pub(crate) fn assert_every_family_is_described(text: &str) {
    let declared = |prefix: &str| -> BTreeSet<&str> {
        text.lines()
            .filter_map(|line| line.strip_prefix(prefix))
            .filter_map(|rest| rest.split_whitespace().next())
            .filter(|name| name.starts_with("onejob_"))
            .collect()
    };
    let (types, helps) = (declared("# TYPE "), declared("# HELP "));
    assert!(!types.is_empty(), "no onejob_ metrics in:\n{text}");
    let undescribed: Vec<_> = types.difference(&helps).collect();
    assert!(
        undescribed.is_empty(),
        "no # HELP for {undescribed:?} in:\n{text}"
    );
    for line in text.lines().filter(|l| l.starts_with("onejob_")) {
        let name = line.split(['{', ' ']).next().unwrap();
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix).filter(|f| types.contains(f)))
            .unwrap_or(name);
        assert!(types.contains(family), "{name} has no # TYPE in:\n{text}");
    }
}
