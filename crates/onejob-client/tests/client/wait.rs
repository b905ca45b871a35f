//! Waiting: `wait` polls as the server advises until the job is finished and reports each
//! change; `poll` exposes the advice; a job that does not finish in time is `WaitTimedOut`.

use std::time::Duration;

use onejob_client::{Error, JobState, WaitOptions};
use serde_json::json;

use crate::server::{Backend, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_returns_the_succeeded_job_and_reports_each_change() {
    let server = Server::running(Backend::Sqlite).await;
    let client = server.client();
    let submitted = client
        .submit(
            "wait:fox",
            "chat.completion",
            &json!({"prompt": "Describe a red fox."}),
        )
        .await
        .unwrap()
        .job;
    let mut seen = Vec::new();
    let job = client
        .wait_with(
            submitted.id,
            &WaitOptions::default().timeout(Duration::from_secs(60)),
            |job| seen.push(job.state),
        )
        .await
        .unwrap();
    assert_eq!(job.state, JobState::Succeeded);
    assert_eq!(
        job.result,
        Some(json!({"text": "fake answer: Describe a red fox."}))
    );
    assert!(job.completed_by.is_some() && job.poll_after_ms.is_none());
    assert_eq!(seen.last(), Some(&JobState::Succeeded), "{seen:?}");
    assert_eq!(
        seen.iter().filter(|s| **s == JobState::Succeeded).count(),
        1,
        "the finished job is reported once: {seen:?}"
    );
    // A finished job is answered at once, without polling advice.
    let poll = client.poll(job.id).await.unwrap();
    assert_eq!(poll.advice(), None);
    assert_eq!(poll.retry_after, None);
}

#[tokio::test]
async fn poll_reads_the_servers_advice_from_poll_after_ms_and_retry_after() {
    let server = Server::idle(Backend::Sqlite).await;
    let client = server.client();
    let job = client
        .submit("advice", "chat.completion", &json!({"prompt": "x"}))
        .await
        .unwrap()
        .job;
    let poll = client.poll(job.id).await.unwrap();
    assert_eq!(poll.job.state, JobState::Pending);
    assert_eq!(poll.retry_after, Some(Duration::from_secs(1)));
    assert_eq!(
        poll.advice(),
        Some(Duration::from_millis(500)),
        "poll_after_ms is the finer advice"
    );
}

#[tokio::test]
async fn a_job_that_does_not_finish_in_time_is_wait_timed_out_with_its_last_state() {
    let server = Server::idle(Backend::Sqlite).await;
    let client = server.client();
    let job = client
        .submit("never-runs", "chat.completion", &json!({"prompt": "x"}))
        .await
        .unwrap()
        .job;
    let error = client
        .wait(
            job.id,
            &WaitOptions::default().timeout(Duration::from_millis(200)),
        )
        .await
        .unwrap_err();
    let Error::WaitTimedOut { job: last, .. } = error else {
        panic!("expected WaitTimedOut, got {error:?}");
    };
    assert_eq!(last.id, job.id);
    assert_eq!(last.state, JobState::Pending);
}
