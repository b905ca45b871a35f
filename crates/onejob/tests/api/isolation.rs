//! Isolation: a principal sees only its own jobs; everything else is the same 404 as a
//! job that does not exist.

use serde_json::Value;

use crate::helpers::{Backend, TestApp, TestDatabase, backend_tests, chat, create_key, json};

backend_tests!(foreign_jobs_look_exactly_like_missing_ones);

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
