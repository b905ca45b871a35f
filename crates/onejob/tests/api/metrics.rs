//! `/metrics`: Prometheus counters, gauges and histograms after real traffic.

use std::time::Duration;

use crate::helpers::{Backend, Fakes, TestApp, TestDatabase, backend_tests, chat};

backend_tests!(metrics_count_submissions_attempts_and_latencies);

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
}
