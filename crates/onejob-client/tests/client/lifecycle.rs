//! A job's life through the client: cancel (and its repeat), retry refused with a typed
//! `409` problem, attempts and events of a finished job, operator resolution of an unknown
//! attempt, certificates, and `401` for a bad API key.

use std::time::Duration;

use onejob_client::{
    AttemptState, Error, EventKind, JobState, Resolution, ResolveVerdict, WaitOptions,
};
use onejob_fake::{Behaviour, FakeServer, Rule};
use serde_json::json;

use crate::server::{Backend, Server};

fn expect_problem(error: Error, status: u16, slug: &str) {
    assert_eq!(error.status(), Some(status), "{error:?}");
    assert_eq!(error.problem_slug(), Some(slug), "{error:?}");
    let Error::Problem { title, detail, .. } = &error else {
        panic!("expected a problem, got {error:?}");
    };
    assert!(!title.is_empty() && !detail.is_empty(), "{error:?}");
}

#[tokio::test]
async fn cancel_answers_the_cancelled_job_again_and_retry_is_a_409_problem() {
    let server = Server::idle(Backend::Sqlite).await;
    let client = server.client();
    let job = client
        .submit("cancel-me", "chat.completion", &json!({"prompt": "x"}))
        .await
        .unwrap()
        .job;
    let cancelled = client.cancel(job.id).await.unwrap();
    assert_eq!(cancelled.state, JobState::Cancelled);
    assert!(cancelled.poll_after_ms.is_none());
    let again = client.cancel(job.id).await.unwrap();
    assert_eq!((again.id, again.state), (job.id, JobState::Cancelled));
    let error = client.retry(job.id).await.unwrap_err();
    expect_problem(error, 409, "invalid-state");
    let missing = client.job(uuid::Uuid::now_v7()).await.unwrap_err();
    expect_problem(missing, 404, "not-found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_succeeded_job_has_its_attempt_and_events_and_cannot_be_cancelled() {
    let server = Server::running(Backend::Sqlite).await;
    let client = server.client();
    let id = client
        .submit(
            "events",
            "chat.completion",
            &json!({"prompt": "Describe a red fox."}),
        )
        .await
        .unwrap()
        .job
        .id;
    let job = client
        .wait(id, &WaitOptions::default().timeout(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(job.state, JobState::Succeeded);
    client
        .submit(
            "events",
            "chat.completion",
            &json!({"prompt": "Describe a red fox."}),
        )
        .await
        .unwrap();

    let attempts = client.attempts(id).await.unwrap();
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    let attempt = &attempts[0];
    assert_eq!((attempt.job_id, attempt.number), (id, 1));
    assert_eq!(attempt.state, AttemptState::Succeeded);
    assert_eq!(attempt.provider, "fake");
    assert!(!attempt.hedge && attempt.finished_at.is_some());
    assert_eq!(job.completed_by, Some(attempt.id));

    let kinds: Vec<EventKind> = client
        .events(id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    for expected in [
        EventKind::Created,
        EventKind::AttemptStarted,
        EventKind::Won,
        EventKind::Replayed,
    ] {
        assert!(kinds.contains(&expected), "{expected} in {kinds:?}");
    }
    let listed = client
        .list_attempts(Some(AttemptState::Succeeded))
        .await
        .unwrap();
    assert!(listed.iter().any(|a| a.id == attempt.id), "{listed:?}");
    assert!(
        client
            .list_attempts(Some(AttemptState::Unknown))
            .await
            .unwrap()
            .is_empty()
    );

    let error = client.cancel(id).await.unwrap_err();
    expect_problem(error, 409, "invalid-state");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_resolves_an_unknown_attempt_and_others_are_forbidden() {
    let fake = FakeServer::spawn(([127, 0, 0, 1], 0).into()).await.unwrap();
    fake.add_rule(Rule {
        matches: Some("stuck".into()),
        times: None,
        behaviour: Behaviour {
            hang_before_ack: true,
            hang_after_ack: true,
            ..Default::default()
        },
    });
    let server = Server::start(Backend::Sqlite, true, |config| {
        for provider in &mut config.providers {
            provider.base_url = Some(fake.base_url());
        }
        config.kinds[0].attempt_timeout = Duration::from_millis(300);
    })
    .await;
    let client = server.client();
    let id = client
        .submit("stuck", "chat.completion", &json!({"prompt": "stuck"}))
        .await
        .unwrap()
        .job
        .id;
    let mut polls = 0;
    let unknown = loop {
        polls += 1;
        assert!(polls < 600, "the attempt never became unknown");
        let unknown = client
            .list_attempts(Some(AttemptState::Unknown))
            .await
            .unwrap();
        if let Some(attempt) = unknown.into_iter().next() {
            break attempt;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(unknown.job_id, id);
    assert_eq!(client.job(id).await.unwrap().state, JobState::Unknown);

    let error = client
        .resolve_attempt(unknown.id, &Resolution::failed())
        .await
        .unwrap_err();
    expect_problem(error, 403, "forbidden");

    let operator = server.client_as(&server.key("ops", true).await);
    let resolved = operator
        .resolve_attempt(
            unknown.id,
            &Resolution::failed().reason("the vendor says it never ran"),
        )
        .await
        .unwrap();
    assert_eq!(resolved.outcome, ResolveVerdict::Recorded);
    assert_eq!(resolved.attempt.unwrap().state, AttemptState::Failed);
    assert_eq!(resolved.job.unwrap().id, id);
    let error = operator
        .resolve_attempt(unknown.id, &Resolution::cancelled())
        .await
        .unwrap_err();
    expect_problem(error, 409, "invalid-state");
}

#[tokio::test]
async fn certificates_list_verification_runs_with_their_validity() {
    let server = Server::idle(Backend::Sqlite).await;
    let client = server.client_as(&server.key("ops", true).await);
    assert!(client.certificates().await.unwrap().is_empty());
    let kind = server
        .app
        .jobs
        .kinds()
        .get("chat.completion")
        .unwrap()
        .clone();
    let provider = server.app.providers.get("fake-backup").unwrap().clone();
    let (report, _) = server
        .app
        .jobs
        .verify(&kind, "fake-backup", &*provider, Default::default())
        .await
        .unwrap();
    assert!(report.passed);
    let certificates = client.certificates().await.unwrap();
    assert_eq!(certificates.len(), 1, "{certificates:?}");
    let certificate = &certificates[0];
    assert_eq!(
        (certificate.provider.as_str(), certificate.kind.as_str()),
        ("fake-backup", "chat.completion")
    );
    assert!(certificate.passed && certificate.valid);
    let page = client.certificates_page(None, Some(1)).await.unwrap();
    assert_eq!(page.certificates, certificates);
    assert_eq!(page.next_before, None, "the last page");

    // Certificates describe the deployment's providers: operator keys only.
    let error = server.client().certificates().await.unwrap_err();
    expect_problem(error, 403, "forbidden");
}

#[tokio::test]
async fn a_bad_api_key_is_a_401_problem() {
    let server = Server::idle(Backend::Sqlite).await;
    let client = server.client_as("oj_0000000000000000_nope");
    let error = client
        .submit("k", "chat.completion", &json!({"prompt": "x"}))
        .await
        .unwrap_err();
    expect_problem(error, 401, "unauthorized");
    let error = client.job(uuid::Uuid::now_v7()).await.unwrap_err();
    assert_eq!(error.status(), Some(401));
}
