//! Bad input: each gets a clear problem+json with a stable type, never a 500, and nothing
//! is written.

use reqwest::{
    Method, RequestBuilder,
    header::{HeaderName, HeaderValue},
};
use serde_json::{Value, json};

use crate::helpers::{Backend, TestApp, TestDatabase, chat, postgres_and_sqlite_tests};

postgres_and_sqlite_tests!(
    bad_inputs_get_problems_and_write_nothing,
    body_limit_is_configurable
);

/// One row of the table: a name, how to build the request, what must come back.
struct Case {
    name: &'static str,
    request: Box<dyn Fn(&TestApp) -> RequestBuilder>,
    status: u16,
    problem: &'static str,
}

fn case(
    name: &'static str,
    status: u16,
    problem: &'static str,
    request: impl Fn(&TestApp) -> RequestBuilder + 'static,
) -> Case {
    Case {
        name,
        request: Box::new(request),
        status,
        problem,
    }
}

/// A POST /v1/jobs with a raw body and content type, and the default key.
fn raw_post(
    app: &TestApp,
    key: &str,
    content_type: &str,
    body: impl Into<reqwest::Body>,
) -> RequestBuilder {
    app.client
        .post(app.url("/v1/jobs"))
        .bearer_auth(&app.token)
        .header("Idempotency-Key", key)
        .header("Content-Type", content_type)
        .body(body)
}

fn nested(depth: usize) -> Value {
    (0..depth).fold(json!("leaf"), |inner, _| json!({ "x": inner }))
}

fn cases() -> Vec<Case> {
    vec![
        case("missing key", 400, "idempotency-key-missing", |app| {
            app.client
                .post(app.url("/v1/jobs"))
                .bearer_auth(&app.token)
                .json(&chat("x"))
        }),
        case("empty key", 400, "idempotency-key-invalid", |app| {
            app.submit("", &chat("x"))
        }),
        case(
            "key of 256 characters",
            400,
            "idempotency-key-invalid",
            |app| app.submit(&"k".repeat(256), &chat("x")),
        ),
        case("key with a space", 400, "idempotency-key-invalid", |app| {
            app.submit("a b", &chat("x"))
        }),
        case("key with a tab", 400, "idempotency-key-invalid", |app| {
            app.submit("a\tb", &chat("x"))
        }),
        case("non-ASCII key", 400, "idempotency-key-invalid", |app| {
            app.client
                .post(app.url("/v1/jobs"))
                .bearer_auth(&app.token)
                .header(
                    HeaderName::from_static("idempotency-key"),
                    HeaderValue::from_bytes("ключ".as_bytes()).unwrap(),
                )
                .json(&chat("x"))
        }),
        case("badly quoted key", 400, "idempotency-key-invalid", |app| {
            app.submit(r#""a\b""#, &chat("x"))
        }),
        case("two keys", 400, "idempotency-key-invalid", |app| {
            app.submit("one", &chat("x"))
                .header("Idempotency-Key", "two")
        }),
        case("broken JSON", 400, "invalid-json", |app| {
            raw_post(app, "k", "application/json", "{\"kind\": ")
        }),
        case("duplicate JSON keys", 400, "invalid-json", |app| {
            raw_post(
                app,
                "k",
                "application/json",
                r#"{"kind": "chat.completion", "params": {"prompt": "a", "prompt": "b"}}"#,
            )
        }),
        case("body is an array", 400, "invalid-request", |app| {
            app.submit("k", &json!([]))
        }),
        case("kind missing", 400, "invalid-request", |app| {
            app.submit("k", &json!({"params": {"prompt": "x"}}))
        }),
        case("params missing", 400, "invalid-request", |app| {
            app.submit("k", &json!({"kind": "chat.completion"}))
        }),
        case("kind not a string", 400, "invalid-request", |app| {
            app.submit("k", &json!({"kind": 7, "params": {}}))
        }),
        case("unknown top-level field", 400, "invalid-request", |app| {
            app.submit(
                "k",
                &json!({"kind": "chat.completion", "params": {"prompt": "x"}, "user": "eve"}),
            )
        }),
        case("text/plain body", 415, "unsupported-media-type", |app| {
            raw_post(app, "k", "text/plain", chat("x").to_string())
        }),
        case("no content type", 415, "unsupported-media-type", |app| {
            app.client
                .post(app.url("/v1/jobs"))
                .bearer_auth(&app.token)
                .header("Idempotency-Key", "k")
                .body(chat("x").to_string())
        }),
        case("body over 1 MiB", 413, "body-too-large", |app| {
            app.submit("k", &chat(&"x".repeat(1024 * 1024 + 1)))
        }),
        case("unknown kind", 400, "unknown-kind", |app| {
            app.submit("k", &json!({"kind": "video.generate", "params": {}}))
        }),
        case("prompt of the wrong type", 400, "params-invalid", |app| {
            app.submit(
                "k",
                &json!({"kind": "chat.completion", "params": {"prompt": 42}}),
            )
        }),
        case("required param missing", 400, "params-invalid", |app| {
            app.submit("k", &json!({"kind": "chat.completion", "params": {}}))
        }),
        case("param the schema forbids", 400, "params-invalid", |app| {
            app.submit(
                "k",
                &json!({"kind": "chat.completion", "params": {"prompt": "x", "seed": 1}}),
            )
        }),
        case("params not an object", 400, "params-invalid", |app| {
            app.submit("k", &json!({"kind": "chat.completion", "params": "x"}))
        }),
        case("params nested too deep", 400, "params-invalid", |app| {
            app.submit(
                "k",
                &json!({"kind": "chat.completion", "params": {"prompt": "x", "deep": nested(40)}}),
            )
        }),
        case("integer beyond 2^53", 400, "params-invalid", |app| {
            raw_post(
                app,
                "k",
                "application/json",
                r#"{"kind": "chat.completion", "params": {"prompt": "x", "temperature": 12345678901234567890}}"#,
            )
        }),
        case("NUL inside a string", 400, "params-invalid", |app| {
            app.submit(
                "k",
                &json!({"kind": "chat.completion", "params": {"prompt": "a\u{0}b"}}),
            )
        }),
        case("no Authorization", 401, "unauthorized", |app| {
            app.client
                .post(app.url("/v1/jobs"))
                .header("Idempotency-Key", "k")
                .json(&chat("x"))
        }),
        case("wrong API key", 401, "unauthorized", |app| {
            let mut forged = app.token.clone();
            let last = forged.pop().unwrap();
            forged.push(if last == '0' { '1' } else { '0' });
            app.submit_as(&forged, "k", &chat("x"))
        }),
        case("not a bearer token", 401, "unauthorized", |app| {
            app.client
                .post(app.url("/v1/jobs"))
                .header("Authorization", "Basic YWxpY2U6c2VjcmV0")
                .header("Idempotency-Key", "k")
                .json(&chat("x"))
        }),
        case("malformed job id", 400, "invalid-id", |app| {
            app.get("/v1/jobs/not-a-uuid")
        }),
        case("malformed job id in events", 400, "invalid-id", |app| {
            app.get("/v1/jobs/123/events")
        }),
        case(
            "listing with an unknown filter",
            400,
            "invalid-request",
            |app| app.get("/v1/jobs?colour=red"),
        ),
        case(
            "lookup with an empty key",
            400,
            "idempotency-key-invalid",
            |app| app.get("/v1/jobs?idempotency_key="),
        ),
        case("unknown endpoint", 404, "not-found", |app| {
            app.get("/v2/jobs")
        }),
        case("wrong method", 405, "method-not-allowed", |app| {
            app.client
                .request(Method::DELETE, app.url("/v1/jobs"))
                .bearer_auth(&app.token)
        }),
    ]
}

async fn bad_inputs_get_problems_and_write_nothing(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let mut app = TestApp::spawn(&db).await;
    // One connection per case: the server refuses a body over the limit without reading it
    // and closes that connection, and a pooled client that sent the next case on it before
    // seeing the close would fail with a broken pipe (seen under load).
    app.client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let cases = cases();
    assert!(cases.len() >= 20);
    for case in &cases {
        let response = (case.request)(&app).send().await.expect(case.name);
        let status = response.status().as_u16();
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        let www_authenticate = response.headers().get("www-authenticate").cloned();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        assert_eq!(status, case.status, "{}: {body}", case.name);
        assert_eq!(content_type, "application/problem+json", "{}", case.name);
        assert_eq!(
            body["type"],
            format!("https://onejob.dev/problems/{}", case.problem),
            "{}: {body}",
            case.name
        );
        assert_eq!(body["status"], case.status, "{}", case.name);
        assert!(
            body["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{}: a problem says what was wrong",
            case.name
        );
        if status == 401 {
            assert!(www_authenticate.is_some(), "{}", case.name);
        }
    }
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM jobs").await,
        0,
        "no half-written rows"
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM job_events").await, 0);
}

async fn body_limit_is_configurable(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn_with(&db, |config| config.max_body_bytes = 100).await;
    let (status, problem) = crate::helpers::json(
        app.submit("k", &chat(&"x".repeat(100)))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 413);
    assert_eq!(problem["limit_bytes"], 100);
    assert_eq!(
        app.submit("k", &chat("short"))
            .send()
            .await
            .unwrap()
            .status(),
        201
    );
}
