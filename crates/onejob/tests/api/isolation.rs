//! Isolation: a principal sees only its own jobs; everything else is the same 404 as a
//! job that does not exist.

use serde_json::Value;

use crate::helpers::{
    Backend, Fakes, TestApp, TestDatabase, chat, citus_tests, create_key, json,
    postgres_and_sqlite_tests,
};

postgres_and_sqlite_tests!(
    foreign_jobs_look_exactly_like_missing_ones,
    attempts_writes_and_resolutions_of_foreign_jobs_look_like_missing_ones,
    attempt_listings_are_scoped_to_the_caller_or_the_operators_tenant,
);

// The invariants of intake and isolation hold on a Citus cluster too.
citus_tests!(
    foreign_jobs_look_exactly_like_missing_ones,
    attempts_writes_and_resolutions_of_foreign_jobs_look_like_missing_ones,
    attempt_listings_are_scoped_to_the_caller_or_the_operators_tenant,
);

async fn foreign_jobs_look_exactly_like_missing_ones(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let (_, job) = json(
        app.submit("private-key", &chat("secret plan"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let id = job["id"].as_str().unwrap();
    let missing = uuid::Uuid::now_v7();

    let same_tenant_other_user = create_key(&*app.store, "acme", "bob", false).await;
    let other_tenant_same_user = create_key(&*app.store, "globex", "alice", false).await;
    let other_tenant_operator = create_key(&*app.store, "globex", "root", true).await;

    for token in [
        &same_tenant_other_user,
        &other_tenant_same_user,
        &other_tenant_operator,
    ] {
        for (foreign, absent) in [
            (format!("/v1/jobs/{id}"), format!("/v1/jobs/{missing}")),
            (
                format!("/v1/jobs/{id}/events"),
                format!("/v1/jobs/{missing}/events"),
            ),
        ] {
            let (status_f, body_f) = json(app.get_as(token, &foreign).send().await.unwrap()).await;
            let (status_m, body_m) = json(app.get_as(token, &absent).send().await.unwrap()).await;
            assert_eq!(status_f, 404, "{foreign}: {body_f}");
            assert_eq!(
                (status_f, &body_f),
                (status_m, &body_m),
                "indistinguishable from missing"
            );
        }
        let (status, body): (u16, Value) = json(
            app.get_as(token, "/v1/jobs?idempotency_key=private-key")
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 404, "{body}");
        assert!(!body.to_string().contains(id));
    }
    // The owner still sees it.
    assert_eq!(
        app.get(&format!("/v1/jobs/{id}"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}

async fn attempt_listings_are_scoped_to_the_caller_or_the_operators_tenant(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |_| {}).await;
    let bob = create_key(&*app.store, "acme", "bob", false).await;
    let acme_ops = create_key(&*app.store, "acme", "ops", true).await;
    let globex_ops = create_key(&*app.store, "globex", "ops", true).await;
    let alices = app.create("a", &chat("alice's")).await;
    let (_, bobs) = json(
        app.submit_as(&bob, "b", &chat("bob's"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    app.wait_job(
        alices["id"].as_str().unwrap(),
        std::time::Duration::from_secs(15),
        |j| j["state"] == "succeeded",
    )
    .await;
    for _ in 0..300 {
        let (_, bobs_job) = json(
            app.get_as(&bob, &format!("/v1/jobs/{}", bobs["id"].as_str().unwrap()))
                .send()
                .await
                .unwrap(),
        )
        .await;
        if bobs_job["state"] == "succeeded" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let jobs_seen = |body: &Value| -> Vec<String> {
        body["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["job_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let (_, own) = json(
        app.get("/v1/attempts?state=succeeded")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(jobs_seen(&own), [alices["id"].as_str().unwrap()]);
    let (_, tenant) = json(app.get_as(&acme_ops, "/v1/attempts").send().await.unwrap()).await;
    assert_eq!(jobs_seen(&tenant).len(), 2);
    let (_, other) = json(
        app.get_as(&globex_ops, "/v1/attempts")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(jobs_seen(&other).is_empty());
}

/// The probes beyond reading a job: its attempts, cancel, retry, and resolving its attempt
/// (as a normal key of the owner's tenant, and as another tenant's operator) answer exactly
/// what a missing id answers, and change nothing.
async fn attempts_writes_and_resolutions_of_foreign_jobs_look_like_missing_ones(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |_| {}).await;
    let job = app.create("private", &chat("secret plan")).await;
    let id = job["id"].as_str().unwrap().to_owned();
    app.wait_job(&id, std::time::Duration::from_secs(15), |j| {
        j["state"] == "succeeded"
    })
    .await;
    let attempt = app.attempts(&id).await[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let missing = uuid::Uuid::now_v7();

    let same_tenant_other_user = create_key(&*app.store, "acme", "bob", false).await;
    let other_tenant_operator = create_key(&*app.store, "globex", "root", true).await;
    let send = |token: &str, method: reqwest::Method, path: String| {
        let request = app
            .client
            .request(method, app.url(&path))
            .bearer_auth(token);
        async move {
            json(
                request
                    .json(&serde_json::json!({"outcome": "failed"}))
                    .send()
                    .await
                    .unwrap(),
            )
            .await
        }
    };
    for token in [&same_tenant_other_user, &other_tenant_operator] {
        for (method, foreign, absent) in [
            (
                reqwest::Method::GET,
                format!("/v1/jobs/{id}/attempts"),
                format!("/v1/jobs/{missing}/attempts"),
            ),
            (
                reqwest::Method::POST,
                format!("/v1/jobs/{id}/cancel"),
                format!("/v1/jobs/{missing}/cancel"),
            ),
            (
                reqwest::Method::POST,
                format!("/v1/jobs/{id}/retry"),
                format!("/v1/jobs/{missing}/retry"),
            ),
            (
                reqwest::Method::POST,
                format!("/v1/attempts/{attempt}/resolve"),
                format!("/v1/attempts/{missing}/resolve"),
            ),
        ] {
            let (status_f, body_f) = send(token, method.clone(), foreign.clone()).await;
            let (status_m, body_m) = send(token, method, absent).await;
            assert!(
                matches!(status_f, 403 | 404),
                "{foreign}: {status_f} {body_f}"
            );
            assert_eq!(
                (status_f, &body_f),
                (status_m, &body_m),
                "{foreign} is indistinguishable from a missing id"
            );
            assert!(!body_f.to_string().contains(&id), "{body_f}");
        }
    }
    // Nothing changed: still succeeded, one attempt, no cancel or resolution logged.
    assert_eq!(app.job(&id).await["state"], "succeeded");
    let events = app.events(&id).await;
    assert!(
        events.iter().all(|e| e["kind"] != "cancelled"
            && e["kind"] != "recovered"
            && e["kind"] != "attempt_resolved"),
        "{events:?}"
    );
    // A normal key is refused the operator endpoint whatever the attempt (403, not 404).
    let (status, problem) = send(
        &same_tenant_other_user,
        reqwest::Method::POST,
        format!("/v1/attempts/{attempt}/resolve"),
    )
    .await;
    assert_eq!(
        (status, problem["type"].as_str()),
        (403, Some("https://onejob.dev/problems/forbidden"))
    );
}
