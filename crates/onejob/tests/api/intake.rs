//! Intake: one job per intent, whatever the clients do with retries and double clicks.

use std::collections::HashSet;

use futures::future::join_all;
use serde_json::{Value, json};

use crate::helpers::{
    Backend, TestApp, TestDatabase, chat, citus_tests, create_key, json, postgres_and_sqlite_tests,
};

postgres_and_sqlite_tests!(
    double_click_of_fifty_makes_one_job,
    double_click_across_two_instances_makes_one_job,
    replay_returns_the_job_and_changes_nothing,
    changed_params_are_refused_and_the_job_is_untouched,
    another_kind_under_the_same_key_is_refused,
    the_same_key_of_another_user_or_tenant_is_another_job,
    a_pending_job_has_poll_hints_and_no_result_field,
    intent_fields_decide_what_is_a_replay,
    quoted_and_bare_keys_name_the_same_job,
    a_job_is_found_by_its_key,
    a_refused_request_does_not_burn_its_key,
    listing_filters_and_pages_the_callers_own_jobs,
);

// The invariants of intake and isolation hold on a Citus cluster too.
citus_tests!(
    double_click_of_fifty_makes_one_job,
    double_click_across_two_instances_makes_one_job,
    replay_returns_the_job_and_changes_nothing,
    changed_params_are_refused_and_the_job_is_untouched,
    another_kind_under_the_same_key_is_refused,
    the_same_key_of_another_user_or_tenant_is_another_job,
    a_pending_job_has_poll_hints_and_no_result_field,
    intent_fields_decide_what_is_a_replay,
    quoted_and_bare_keys_name_the_same_job,
    a_job_is_found_by_its_key,
    a_refused_request_does_not_burn_its_key,
    listing_filters_and_pages_the_callers_own_jobs,
);

async fn double_click_of_fifty_makes_one_job(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let body = chat("Describe a red fox.");
    let responses =
        join_all((0..50).map(|_| app.submit("settlement:42:close", &body).send())).await;

    let mut ids = HashSet::new();
    let (mut created, mut replayed) = (0, 0);
    for response in responses {
        let response = response.expect("request");
        match response.status().as_u16() {
            201 => created += 1,
            200 => {
                assert_eq!(response.headers()["idempotent-replayed"], "true");
                replayed += 1;
            }
            other => panic!("unexpected status {other}: {:?}", response.text().await),
        }
        let body: Value = response.json().await.unwrap();
        ids.insert(body["id"].as_str().unwrap().to_owned());
    }
    assert_eq!((created, replayed), (1, 49));
    assert_eq!(ids.len(), 1, "every submission answers the same job");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM jobs").await, 1);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_events WHERE kind = 'created'")
            .await,
        1
    );
    // A replay is answered before its event is written (on PostgreSQL the event is queued
    // and committed without waiting for the WAL flush), so the log catches up shortly after.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let logged = db
            .scalar("SELECT COUNT(*) FROM job_events WHERE kind = 'replayed'")
            .await;
        if logged == 49 || std::time::Instant::now() > deadline {
            assert_eq!(logged, 49, "one replayed event per replay");
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

async fn double_click_across_two_instances_makes_one_job(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let first = TestApp::spawn(&db).await;
    let second = TestApp::spawn(&db).await; // its own pool, its own server
    let token_on_second = first.token.clone(); // keys live in the shared database
    let body = chat("Close settlement 42.");
    let requests = (0..40).map(|i| {
        if i % 2 == 0 {
            first.submit("settlement:42:close", &body).send()
        } else {
            second
                .submit_as(&token_on_second, "settlement:42:close", &body)
                .send()
        }
    });
    let mut ids = HashSet::new();
    let mut created = 0;
    for response in join_all(requests).await {
        let (status, body) = json(response.unwrap()).await;
        assert!(status == 200 || status == 201, "{status} {body}");
        created += usize::from(status == 201);
        ids.insert(body["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(ids.len(), 1);
    assert_eq!(created, 1);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM jobs").await, 1);
}

async fn replay_returns_the_job_and_changes_nothing(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let body = chat("hello");
    let (status, first) = json(app.submit("k-1", &body).send().await.unwrap()).await;
    assert_eq!(status, 201);
    let response = app.submit("k-1", &body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("location").is_none());
    let (_, second) = json(response).await;
    assert_eq!(first, second, "a replay answers exactly the stored job");
    assert_eq!(db.scalar("SELECT MAX(version) FROM jobs").await, 0);
}

async fn changed_params_are_refused_and_the_job_is_untouched(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let original =
        json!({"kind": "chat.completion", "params": {"prompt": "a fox", "temperature": 0.2}});
    let (_, job) = json(app.submit("k", &original).send().await.unwrap()).await;

    // One more space inside the prompt is a different intent.
    let changed = json!({"kind": "chat.completion", "params": {"prompt": "a  fox", "temperature": 0.2, "system": "be brief"}});
    let response = app.submit("k", &changed).send().await.unwrap();
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let (status, problem) = json(response).await;
    assert_eq!(status, 422);
    assert_eq!(problem["type"], "https://onejob.dev/problems/key-reused");
    assert_eq!(problem["changed"], json!(["/prompt", "/system"]));
    assert_eq!(problem["job_id"], job["id"]);
    let text = problem.to_string();
    assert!(
        !text.contains("a  fox") && !text.contains("be brief"),
        "a conflict names paths, never values: {text}"
    );

    let (_, after) = json(
        app.get(&format!("/v1/jobs/{}", job["id"].as_str().unwrap()))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(after, job, "the stored job is untouched");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM jobs").await, 1);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_events WHERE kind = 'key_conflict'")
            .await,
        1
    );
    // The original intent still replays.
    let response = app.submit("k", &original).send().await.unwrap();
    assert_eq!(response.status(), 200);
}

async fn another_kind_under_the_same_key_is_refused(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let (status, _) = json(app.submit("k", &chat("a fox")).send().await.unwrap()).await;
    assert_eq!(status, 201);
    let image = json!({"kind": "image.generate", "params": {"prompt": "a fox"}});
    let (status, problem) = json(app.submit("k", &image).send().await.unwrap()).await;
    assert_eq!(status, 422);
    assert_eq!(problem["type"], "https://onejob.dev/problems/key-reused");
    assert_eq!(problem["kind_changed"], true);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM jobs").await, 1);
}

async fn the_same_key_of_another_user_or_tenant_is_another_job(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let bob = create_key(&*app.store, "acme", "bob", false).await;
    let other_tenant = create_key(&*app.store, "globex", "alice", false).await;
    let body = chat("a fox");
    let mut ids = HashSet::new();
    for token in [&app.token, &bob, &other_tenant] {
        let (status, job) = json(
            app.submit_as(token, "shared-key", &body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 201, "{job}");
        ids.insert(job["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(ids.len(), 3);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM jobs").await, 3);
}

async fn a_pending_job_has_poll_hints_and_no_result_field(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let (_, job) = json(app.submit("k", &chat("a fox")).send().await.unwrap()).await;
    let response = app
        .get(&format!("/v1/jobs/{}", job["id"].as_str().unwrap()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry_after >= 1);
    let (_, view) = json(response).await;
    assert_eq!(view["state"], "pending");
    assert!(view["poll_after_ms"].as_u64().unwrap() > 0);
    let object = view.as_object().unwrap();
    for absent in ["result", "error", "completed_by"] {
        assert!(
            !object.contains_key(absent),
            "{absent} must be absent: {view}"
        );
    }
    assert_eq!(view["attempts"], 0);
    assert_eq!(view["kind"], "chat.completion");
}

async fn intent_fields_decide_what_is_a_replay(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    // image.generate lists prompt, aspect_ratio, n and reference_image as its intent.
    let first =
        json!({"kind": "image.generate", "params": {"prompt": "a fox", "n": 1, "trace_tag": "a"}});
    let tag_changed =
        json!({"kind": "image.generate", "params": {"n": 1, "prompt": "a fox", "trace_tag": "b"}});
    let n_changed =
        json!({"kind": "image.generate", "params": {"prompt": "a fox", "n": 2, "trace_tag": "a"}});
    assert_eq!(
        app.submit("img", &first).send().await.unwrap().status(),
        201
    );
    assert_eq!(
        app.submit("img", &tag_changed)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let (status, problem) = json(app.submit("img", &n_changed).send().await.unwrap()).await;
    assert_eq!(status, 422);
    assert_eq!(problem["changed"], json!(["/n"]));
}

async fn quoted_and_bare_keys_name_the_same_job(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let body = chat("a fox");
    assert_eq!(
        app.submit("order-7", &body).send().await.unwrap().status(),
        201
    );
    let response = app.submit("\"order-7\"", &body).send().await.unwrap();
    assert_eq!(
        response.status(),
        200,
        "the structured-field form is the same key"
    );
}

async fn a_job_is_found_by_its_key(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let (_, job) = json(
        app.submit("find:me/1", &chat("a fox"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let (status, found) = json(
        app.client
            .get(app.url("/v1/jobs"))
            .query(&[("idempotency_key", "find:me/1")])
            .bearer_auth(&app.token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(found["id"], job["id"]);
    let (status, problem) = json(
        app.get("/v1/jobs?idempotency_key=nope")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(problem["type"], "https://onejob.dev/problems/not-found");
    // Beside a key, the listing's parameters mean nothing, but a malformed one is refused
    // (found by schemathesis: `state=__main__` beside a key was answered 200).
    let (status, problem) = json(
        app.get("/v1/jobs?idempotency_key=find:me/1&state=__main__")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{problem}");
    assert_eq!(
        problem["type"],
        "https://onejob.dev/problems/invalid-request"
    );
}

async fn a_refused_request_does_not_burn_its_key(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let refused = [
        json!({"kind": "chat.completion", "params": {"prompt": ""}}),
        json!({"kind": "no.such.kind", "params": {}}),
        json!({"kind": "chat.completion", "params": {"prompt": "x", "temperature": 9007199254740993u64}}),
    ];
    for body in &refused {
        let status = app.submit("precious", body).send().await.unwrap().status();
        assert_eq!(status, 400, "{body}");
    }
    assert_eq!(db.scalar("SELECT COUNT(*) FROM jobs").await, 0);
    let (status, _) = json(app.submit("precious", &chat("a fox")).send().await.unwrap()).await;
    assert_eq!(status, 201, "the key is still free after refused requests");
}

async fn listing_filters_and_pages_the_callers_own_jobs(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let bob = create_key(&*app.store, "acme", "bob", false).await;
    let mut mine = Vec::new();
    for i in 0..5 {
        let job = app
            .create(&format!("list-{i}"), &chat(&format!("p{i}")))
            .await;
        mine.push(job["id"].as_str().unwrap().to_owned());
    }
    let image = json!({"kind": "image.generate", "params": {"prompt": "a fox"}});
    app.create("list-image", &image).await;
    let (status, _) = json(
        app.submit_as(&bob, "bobs", &chat("bob"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201);

    let (status, page) = json(
        app.get("/v1/jobs?kind=chat.completion&limit=3")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let ids: Vec<&str> = page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [&mine[4], &mine[3], &mine[2]], "newest first");
    let next = page["next_before"].as_str().unwrap();
    let (_, rest) = json(
        app.get(&format!(
            "/v1/jobs?kind=chat.completion&limit=3&before={next}"
        ))
        .send()
        .await
        .unwrap(),
    )
    .await;
    let ids: Vec<&str> = rest["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [&mine[1], &mine[0]]);
    assert!(rest["next_before"].is_null());
    let (_, all) = json(app.get("/v1/jobs?state=pending").send().await.unwrap()).await;
    assert_eq!(
        all["jobs"].as_array().unwrap().len(),
        6,
        "bob's job is not listed"
    );
    let (_, none) = json(app.get("/v1/jobs?state=succeeded").send().await.unwrap()).await;
    assert!(none["jobs"].as_array().unwrap().is_empty());
    for bad in [
        "/v1/jobs?state=done",
        "/v1/jobs?limit=0",
        "/v1/jobs?limit=501",
        "/v1/jobs?before=x",
        "/v1/jobs?colour=red",
    ] {
        let (status, problem) = json(app.get(bad).send().await.unwrap()).await;
        assert_eq!(status, 400, "{bad}: {problem}");
        assert_eq!(
            problem["type"],
            "https://onejob.dev/problems/invalid-request"
        );
    }
}
