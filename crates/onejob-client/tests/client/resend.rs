//! The client's own retries, against a stub server: a `503` (with `Retry-After: 0`) is
//! resent with the same idempotency key until the job is created; a `503` beyond the retry
//! budget, and an unreachable server, come back as errors that say so.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::post,
};
use onejob_client::{Client, Error, RetryPolicy};
use serde_json::json;

const JOB_ID: &str = "01a22a98-4599-75a0-b1cb-7cdbcd0f53a7";

/// What the stub saw: each request's `Idempotency-Key` and `Authorization` headers.
#[derive(Default)]
struct Seen {
    keys: Vec<String>,
    authorizations: Vec<String>,
}

struct Stub {
    seen: Mutex<Seen>,
    /// How many submissions are answered 503 before one is created.
    unavailable: usize,
}

async fn submit(State(stub): State<Arc<Stub>>, headers: HeaderMap) -> Response {
    let text = |name| {
        headers
            .get(name)
            .map(|v: &header::HeaderValue| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    let count = {
        let mut seen = stub.seen.lock().unwrap();
        seen.keys
            .push(text(header::HeaderName::from_static("idempotency-key")));
        seen.authorizations.push(text(header::AUTHORIZATION));
        seen.keys.len()
    };
    if count <= stub.unavailable {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [
                (header::RETRY_AFTER, "0"),
                (header::CONTENT_TYPE, "application/problem+json"),
            ],
            json!({
                "type": "https://onejob.dev/problems/unavailable", "status": 503,
                "title": "Service temporarily unavailable", "detail": "the database is unavailable"
            })
            .to_string(),
        )
            .into_response();
    }
    (
        StatusCode::CREATED,
        [
            (header::LOCATION, format!("/v1/jobs/{JOB_ID}")),
            (header::RETRY_AFTER, "1".to_owned()),
        ],
        axum::Json(json!({
            "id": JOB_ID, "kind": "chat.completion", "state": "pending",
            "created_at": "2026-11-30T03:55:52.09Z", "updated_at": "2026-11-30T03:55:52.09Z",
            "attempts": 0, "poll_after_ms": 500
        })),
    )
        .into_response()
}

async fn spawn_stub(unavailable: usize) -> (SocketAddr, Arc<Stub>) {
    let stub = Arc::new(Stub {
        seen: Mutex::default(),
        unavailable,
    });
    let app = Router::new()
        .route("/v1/jobs", post(submit))
        .with_state(stub.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, stub)
}

fn client(addr: SocketAddr, retries: u32) -> Client {
    Client::builder(&format!("http://{addr}"), "oj_stub")
        .retry_policy(
            RetryPolicy::default()
                .max_retries(retries)
                .initial_backoff(Duration::from_millis(10)),
        )
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_503_is_resent_with_the_same_key_until_the_job_is_created() {
    let (addr, stub) = spawn_stub(2).await;
    let submission = client(addr, 3)
        .submit(
            "order-42:caption",
            "chat.completion",
            &json!({"prompt": "fox"}),
        )
        .await
        .unwrap();
    assert_eq!(submission.job.id.to_string(), JOB_ID);
    assert!(!submission.replayed);
    let seen = stub.seen.lock().unwrap();
    assert_eq!(
        seen.keys,
        ["order-42:caption", "order-42:caption", "order-42:caption"],
        "three tries, one key"
    );
    assert!(seen.authorizations.iter().all(|a| a == "Bearer oj_stub"));
}

#[tokio::test]
async fn a_503_beyond_the_retry_budget_is_an_unavailable_problem() {
    let (addr, stub) = spawn_stub(usize::MAX).await;
    let error = client(addr, 1)
        .submit("k", "chat.completion", &json!({"prompt": "fox"}))
        .await
        .unwrap_err();
    assert_eq!(error.status(), Some(503));
    assert_eq!(error.problem_slug(), Some("unavailable"));
    assert!(error.is_unavailable());
    assert_eq!(
        stub.seen.lock().unwrap().keys.len(),
        2,
        "one try, one resend"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_a_transport_error_after_the_resends() {
    // Bind and drop a listener: the port is then (almost certainly) closed.
    let addr = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let error = client(addr, 2)
        .submit("k", "chat.completion", &json!({"prompt": "fox"}))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::Transport { endpoint, .. } if endpoint == "POST /v1/jobs"),
        "{error:?}"
    );
    assert!(error.is_unavailable());
}
