//! The paged reads that used to answer everything at once: a job's event log (it grows with
//! every replay of its key) and the verification runs (operator keys only). Pages continue
//! exactly where the previous one ended, the cursor is `null` on the last page, and bad
//! paging parameters are `400` problems.

use std::time::Duration;

use onejob_fake::{Behaviour, Outcome, Rule};
use reqwest::Response;
use serde_json::Value;

use crate::helpers::{
    Backend, Fakes, TestApp, TestDatabase, chat, create_key, postgres_and_sqlite_tests,
};

postgres_and_sqlite_tests!(
    the_event_log_is_read_in_pages_without_gaps_or_duplicates,
    bad_event_paging_parameters_are_400_problems,
    certificates_are_for_operator_keys_only,
    certificates_are_paged_newest_first_with_validity_decided_over_all_runs,
);

const WITHIN: Duration = Duration::from_secs(15);

/// The status, content type and JSON body of an answer.
async fn answer(response: Response) -> (u16, String, Value) {
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (
        status,
        content_type,
        response.json().await.unwrap_or_default(),
    )
}

/// `GET path` as `token`, asserting a 200.
async fn page(app: &TestApp, token: &str, path: &str) -> Value {
    let (status, _, body) = answer(app.get_as(token, path).send().await.unwrap()).await;
    assert_eq!(status, 200, "{path}: {body}");
    body
}

fn ids(page: &Value, list: &str) -> Vec<Value> {
    page[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].clone())
        .collect()
}

/// A job with `replays` replays of its key: its log is `created` and one `replayed` per
/// replay (written just after each answer on PostgreSQL, so waited for).
async fn job_with_replays(app: &TestApp, replays: usize) -> String {
    let job = app.create("replayed-often", &chat("again")).await;
    let id = job["id"].as_str().unwrap().to_owned();
    for _ in 0..replays {
        let response = app.submit("replayed-often", &chat("again")).send().await;
        assert_eq!(response.unwrap().status(), 200);
    }
    let deadline = tokio::time::Instant::now() + WITHIN;
    while app.events(&id).await.len() < replays + 1 {
        assert!(tokio::time::Instant::now() < deadline, "replays logged");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    id
}

/// Reads the log in pages of `limit` (none: the default), checking each page's size and
/// cursor; returns the pages' event ids in order.
async fn read_in_pages(app: &TestApp, id: &str, limit: Option<usize>, total: usize) -> Vec<Value> {
    let size = limit.unwrap_or(100);
    let query = limit.map_or_else(String::new, |l| format!("limit={l}&"));
    let mut seen = Vec::new();
    let mut path = format!("/v1/jobs/{id}/events?{query}");
    loop {
        let body = page(app, &app.token, &path).await;
        assert_eq!(body["job_id"], id);
        let page_ids = ids(&body, "events");
        seen.extend(page_ids.iter().cloned());
        if seen.len() < total {
            assert_eq!(page_ids.len(), size, "a full page before the last: {path}");
            assert_eq!(
                body["next_after"],
                *page_ids.last().unwrap(),
                "next_after is the last event of the page"
            );
            path = format!("/v1/jobs/{id}/events?{query}after={}", body["next_after"]);
        } else {
            assert!(!page_ids.is_empty() && page_ids.len() <= size, "{path}");
            assert_eq!(body["next_after"], Value::Null, "the last page: {path}");
            return seen;
        }
    }
}

async fn the_event_log_is_read_in_pages_without_gaps_or_duplicates(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    // 121 events: more than the default page of 100.
    let id = job_with_replays(&app, 120).await;

    let whole = page(&app, &app.token, &format!("/v1/jobs/{id}/events?limit=500")).await;
    assert_eq!(whole["next_after"], Value::Null, "all 121 fit in 500");
    let all = ids(&whole, "events");
    assert_eq!(all.len(), 121);
    let numbers: Vec<i64> = all.iter().map(|v| v.as_i64().unwrap()).collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "oldest first");
    assert_eq!(whole["events"][0]["kind"], "created");

    // Pages of the default size, of 50 (a short last page), of 121 and 120 (the exact fit
    // ends with a null cursor, one fewer leaves exactly one event for a second page) and of
    // 1: together always the whole log, in order, each event once.
    for limit in [None, Some(50), Some(121), Some(120), Some(1)] {
        let paged = read_in_pages(&app, &id, limit, all.len()).await;
        assert_eq!(paged, all, "pages of {limit:?}");
    }

    // After the last event, and after an event of the middle.
    let last = numbers[120];
    let tail = page(
        &app,
        &app.token,
        &format!("/v1/jobs/{id}/events?after={last}"),
    )
    .await;
    assert_eq!(ids(&tail, "events"), Vec::<Value>::new());
    assert_eq!(tail["next_after"], Value::Null);
    let middle = numbers[59];
    let rest = page(
        &app,
        &app.token,
        &format!("/v1/jobs/{id}/events?after={middle}&limit=10"),
    )
    .await;
    assert_eq!(ids(&rest, "events"), all[60..70].to_vec());
    assert_eq!(rest["next_after"], all[69]);

    // Paging changes nothing about isolation: another principal's job is a 404.
    let bob = create_key(&*app.store, "acme", "bob", false).await;
    let (status, _, _) = answer(
        app.get_as(&bob, &format!("/v1/jobs/{id}/events?limit=5&after=1"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404);
}

async fn bad_event_paging_parameters_are_400_problems(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let job = app.create("k", &chat("hello")).await;
    let id = job["id"].as_str().unwrap();
    for query in [
        "limit=0",
        "limit=501",
        "limit=ten",
        "limit=-1",
        "after=abc",
        "after=1.5",
        "before=1",
    ] {
        let path = format!("/v1/jobs/{id}/events?{query}");
        let (status, content_type, problem) = answer(app.get(&path).send().await.unwrap()).await;
        assert_eq!(status, 400, "{query}: {problem}");
        assert_eq!(content_type, "application/problem+json", "{query}");
        assert_eq!(
            problem["type"], "https://onejob.dev/problems/invalid-request",
            "{query}"
        );
        assert_eq!(problem["status"], 400, "{query}");
    }
    // The edges of the range are fine.
    for query in ["limit=1", "limit=500", "after=0"] {
        page(&app, &app.token, &format!("/v1/jobs/{id}/events?{query}")).await;
    }
}

async fn certificates_are_for_operator_keys_only(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    for path in [
        "/v1/certificates",
        "/v1/certificates?limit=1",
        "/v1/certificates?limit=0",
    ] {
        let (status, content_type, problem) = answer(app.get(path).send().await.unwrap()).await;
        assert_eq!(status, 403, "{path}: {problem}");
        assert_eq!(content_type, "application/problem+json");
        assert_eq!(problem["type"], "https://onejob.dev/problems/forbidden");
    }
    let operator = create_key(&*app.store, "acme", "ops", true).await;
    let none = page(&app, &operator, "/v1/certificates").await;
    assert_eq!(ids(&none, "certificates"), Vec::<Value>::new());
    assert_eq!(none["next_before"], Value::Null);
    for query in ["limit=0", "limit=501", "limit=x", "before=x", "after=1"] {
        let path = format!("/v1/certificates?{query}");
        let (status, content_type, problem) =
            answer(app.get_as(&operator, &path).send().await.unwrap()).await;
        assert_eq!(status, 400, "{query}: {problem}");
        assert_eq!(content_type, "application/problem+json");
        assert_eq!(
            problem["type"],
            "https://onejob.dev/problems/invalid-request"
        );
    }
}

async fn certificates_are_paged_newest_first_with_validity_decided_over_all_runs(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    // Runs 1 and 2: fake-backup passes chat.completion, then image.generate.
    let app = TestApp::running(&db, &fakes, |_| {}).await;
    // Run 3: its chat output drifts; the failing run revokes run 1.
    fakes.backup.add_rule(Rule {
        matches: Some("Describe a red fox".into()),
        times: None,
        behaviour: Behaviour {
            outcome: Outcome::DriftedKeys,
            ..Default::default()
        },
    });
    assert!(!app.certify("fake-backup", "chat.completion").await);
    let operator = create_key(&*app.store, "acme", "ops", true).await;

    let all = page(&app, &operator, "/v1/certificates").await;
    assert_eq!(
        all["next_before"],
        Value::Null,
        "3 runs fit the default page"
    );
    let runs: Vec<(String, bool, bool)> = all["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_owned(),
                c["passed"].as_bool().unwrap(),
                c["valid"].as_bool().unwrap(),
            )
        })
        .collect();
    let expected = [
        ("chat.completion".to_owned(), false, false),
        ("image.generate".to_owned(), true, true),
        ("chat.completion".to_owned(), true, false),
    ];
    assert_eq!(runs, expected, "newest first");
    let every = ids(&all, "certificates");

    // One run per page: run 1 is alone on the last page, and still not valid (a run on an
    // earlier page revoked it); run 2, on the second page, is valid.
    let mut paged = Vec::new();
    let mut path = "/v1/certificates?limit=1".to_owned();
    loop {
        let body = page(&app, &operator, &path).await;
        let page_ids = ids(&body, "certificates");
        assert_eq!(page_ids.len(), 1, "{path}: {body}");
        let run = &body["certificates"][0];
        let n = paged.len();
        assert_eq!(
            (
                run["kind"].as_str().unwrap().to_owned(),
                run["passed"].as_bool().unwrap(),
                run["valid"].as_bool().unwrap()
            ),
            expected[n],
            "run on page {}",
            n + 1
        );
        paged.extend(page_ids);
        match body["next_before"].as_str() {
            Some(before) => {
                assert_eq!(body["next_before"], paged[n], "the last run of the page");
                path = format!("/v1/certificates?limit=1&before={before}");
            }
            None => break,
        }
    }
    assert_eq!(paged, every, "the pages are the whole list, each run once");

    // Pages of 2: a full one with a cursor, then the last one without.
    let first = page(&app, &operator, "/v1/certificates?limit=2").await;
    assert_eq!(ids(&first, "certificates"), every[..2].to_vec());
    assert_eq!(first["next_before"], every[1]);
    let before = every[1].as_str().unwrap();
    let second = page(
        &app,
        &operator,
        &format!("/v1/certificates?limit=2&before={before}"),
    )
    .await;
    assert_eq!(ids(&second, "certificates"), every[2..].to_vec());
    assert_eq!(second["next_before"], Value::Null);
    assert_eq!(second["certificates"][0]["valid"], false);
}
