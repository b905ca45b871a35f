//! Which answers the client resends, against a real loopback HTTP server (axum) that plays
//! a script of answers before the real one: `408`, `429`, `502`, `503` and `504` are resent
//! with the same idempotency key, after the server's `Retry-After` when it sent one; `400`
//! and `422` are final; a job `retry` (not safe to repeat once it reached the server) is
//! resent after `429` but not after `502`. Also: a `reqwest::Client` of one's own is the one
//! that sends.

use std::{
    collections::VecDeque,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{
    Router,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::post,
};
use onejob_client::{Client, Error, RetryPolicy};
use serde_json::{Value, json};

const JOB_ID: &str = "01a22a98-4599-75a0-b1cb-7cdbcd0f53a7";

/// One scripted answer: a status and its `Retry-After`, if any.
type Scripted = (u16, Option<&'static str>);

/// What the stub saw of one request.
#[derive(Debug, Clone)]
struct Request {
    at: Instant,
    key: Option<String>,
    from: Option<String>,
}

struct Stub {
    script: Mutex<VecDeque<Scripted>>,
    seen: Mutex<Vec<Request>>,
}

impl Stub {
    fn seen(&self) -> Vec<Request> {
        self.seen.lock().unwrap().clone()
    }
}

fn job(state: &str) -> Value {
    json!({
        "id": JOB_ID, "kind": "chat.completion", "state": state,
        "created_at": "2026-11-30T03:55:52.09Z", "updated_at": "2026-11-30T03:55:52.09Z",
        "attempts": 1, "poll_after_ms": 500
    })
}

/// A problem document for `status`, as onejob (or, for 502 and 504, a proxy) would send.
fn problem(status: u16) -> Value {
    let slug = match status {
        400 => "params-invalid",
        408 => "request-timeout",
        422 => "key-reused",
        429 => "too-many-requests",
        503 => "unavailable",
        _ => "bad-gateway",
    };
    json!({
        "type": format!("https://onejob.dev/problems/{slug}"), "status": status,
        "title": "scripted", "detail": format!("scripted {status}"),
        "job_id": JOB_ID, "changed": ["/prompt"], "kind_changed": false
    })
}

async fn answer(State(stub): State<Arc<Stub>>, headers: HeaderMap, success: Response) -> Response {
    let text = |name: &str| headers.get(name).map(|v| v.to_str().unwrap().to_owned());
    stub.seen.lock().unwrap().push(Request {
        at: Instant::now(),
        key: text("idempotency-key"),
        from: text("x-from"),
    });
    let next = stub.script.lock().unwrap().pop_front();
    let Some((status, retry_after)) = next else {
        return success;
    };
    let mut response = (
        StatusCode::from_u16(status).unwrap(),
        [(header::CONTENT_TYPE, "application/problem+json")],
        problem(status).to_string(),
    )
        .into_response();
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, seconds.parse().unwrap());
    }
    response
}

async fn spawn_stub(script: &[Scripted]) -> (SocketAddr, Arc<Stub>) {
    let stub = Arc::new(Stub {
        script: Mutex::new(script.iter().copied().collect()),
        seen: Mutex::default(),
    });
    let app = Router::new()
        .route(
            "/v1/jobs",
            post(|state, headers| async move {
                let created = (
                    StatusCode::CREATED,
                    [(header::LOCATION, format!("/v1/jobs/{JOB_ID}"))],
                    axum::Json(job("pending")),
                )
                    .into_response();
                answer(state, headers, created).await
            }),
        )
        .route(
            "/v1/jobs/{id}/retry",
            post(|state, headers| async move {
                answer(state, headers, axum::Json(job("pending")).into_response()).await
            }),
        )
        .with_state(stub.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, stub)
}

/// Resends after 10 ms (20 ms at most) unless told `Retry-After`.
fn quick(retries: u32) -> RetryPolicy {
    RetryPolicy::default()
        .max_retries(retries)
        .initial_backoff(Duration::from_millis(10))
        .max_backoff(Duration::from_millis(20))
}

fn client(addr: SocketAddr, policy: RetryPolicy) -> Client {
    Client::builder(&format!("http://{addr}"), "oj_stub")
        .retry_policy(policy)
        .build()
        .unwrap()
}

async fn submit(client: &Client) -> Result<onejob_client::Submission, Error> {
    client
        .submit(
            "order-7:caption",
            "chat.completion",
            &json!({"prompt": "fox"}),
        )
        .await
}

#[tokio::test]
async fn every_not_now_answer_is_resent_with_the_same_key_until_the_job_is_created() {
    let script = [
        (429, Some("0")),
        (502, None),
        (504, None),
        (408, None),
        (503, Some("0")),
    ];
    let (addr, stub) = spawn_stub(&script).await;
    let submission = submit(&client(addr, quick(5))).await.unwrap();
    assert_eq!(submission.job.id.to_string(), JOB_ID);
    let seen = stub.seen();
    assert_eq!(
        seen.len(),
        6,
        "five refusals resent, then created: {seen:?}"
    );
    assert!(
        seen.iter()
            .all(|r| r.key.as_deref() == Some("order-7:caption")),
        "one key on every try: {seen:?}"
    );
}

#[tokio::test]
async fn retry_after_is_waited_for_instead_of_the_backoff() {
    let (addr, stub) = spawn_stub(&[(429, Some("1")), (503, None)]).await;
    submit(&client(addr, quick(3))).await.unwrap();
    let seen = stub.seen();
    assert_eq!(seen.len(), 3);
    let told = seen[1].at - seen[0].at;
    assert!(
        told >= Duration::from_millis(950),
        "Retry-After: 1 was honoured: {told:?}"
    );
    let backed_off = seen[2].at - seen[1].at;
    assert!(
        backed_off < Duration::from_millis(500),
        "without Retry-After the (10-20 ms) backoff applies: {backed_off:?}"
    );
}

#[tokio::test]
async fn a_retry_after_over_the_limit_is_cut_to_it() {
    let (addr, stub) = spawn_stub(&[(503, Some("3600"))]).await;
    let policy = quick(1).max_retry_after(Duration::from_millis(50));
    let started = Instant::now();
    submit(&client(addr, policy)).await.unwrap();
    assert_eq!(stub.seen().len(), 2);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_400_is_final_and_not_resent() {
    let (addr, stub) = spawn_stub(&[(400, None)]).await;
    let error = submit(&client(addr, quick(5))).await.unwrap_err();
    assert_eq!(error.status(), Some(400), "{error:?}");
    assert_eq!(stub.seen().len(), 1, "one try");
}

#[tokio::test]
async fn a_422_is_key_reused_and_not_resent() {
    let (addr, stub) = spawn_stub(&[(422, None)]).await;
    let error = submit(&client(addr, quick(5))).await.unwrap_err();
    assert!(
        matches!(&error, Error::KeyReused { job_id, changed, .. }
            if job_id.to_string() == JOB_ID && changed == &["/prompt"]),
        "{error:?}"
    );
    assert_eq!(stub.seen().len(), 1, "one try");
}

#[tokio::test]
async fn a_429_beyond_the_budget_is_the_last_answer_and_says_come_back_later() {
    let (addr, stub) = spawn_stub(&[(429, Some("0")); 10]).await;
    let error = submit(&client(addr, quick(2))).await.unwrap_err();
    assert_eq!(error.status(), Some(429), "{error:?}");
    assert!(error.is_unavailable());
    assert_eq!(stub.seen().len(), 3, "one try, two resends");
}

#[tokio::test]
async fn a_job_retry_is_resent_after_a_429_but_not_after_a_502() {
    let id = JOB_ID.parse().unwrap();
    let (addr, stub) = spawn_stub(&[(429, Some("0"))]).await;
    client(addr, quick(3)).retry(id).await.unwrap();
    assert_eq!(stub.seen().len(), 2, "turned away, then retried");

    // A 502 may come from a proxy after onejob retried the job: a second retry would be
    // refused (the job is no longer failed), hiding that the first one worked.
    let (addr, stub) = spawn_stub(&[(502, None)]).await;
    let error = client(addr, quick(3)).retry(id).await.unwrap_err();
    assert_eq!(error.status(), Some(502), "{error:?}");
    assert_eq!(stub.seen().len(), 1, "not resent");
}

#[tokio::test]
async fn a_reqwest_client_of_ones_own_sends_every_request() {
    let (addr, stub) = spawn_stub(&[(503, Some("0"))]).await;
    // The application's own client, with its own TLS choice and a header of its own.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("x-from", "the-application".parse().unwrap());
    let own = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap();
    let client = Client::builder(&format!("http://{addr}"), "oj_stub")
        .http_client(own)
        .retry_policy(quick(2))
        .build()
        .unwrap();
    submit(&client).await.unwrap();
    let seen = stub.seen();
    assert_eq!(seen.len(), 2, "the retry policy still applies: {seen:?}");
    assert!(
        seen.iter()
            .all(|r| r.from.as_deref() == Some("the-application")),
        "{seen:?}"
    );
}
