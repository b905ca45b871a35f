//! Slow and oversized clients: a request head trickled byte by byte (slowloris), a body
//! trickled after a complete head, and heads larger than the server reads. Each is cut off
//! after a bounded wait while other clients keep being served. The bounds are set small
//! here (1 s) so the tests are quick; they only wait for the cut-off, never time it.

use std::time::Duration;

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::helpers::{Backend, TestApp, TestDatabase};

/// How long a test waits for the server to cut a slow client off before failing: far above
/// the 1 s bounds configured, so only a server that never cuts off fails it.
const CUT_OFF_WITHIN: Duration = Duration::from_secs(30);

async fn app(db: &TestDatabase) -> TestApp {
    TestApp::spawn_with(db, |config| {
        config.http.header_read_timeout = Duration::from_secs(1);
        config.http.request_timeout = Duration::from_secs(1);
    })
    .await
}

/// Reads until the server closes the connection (or resets it); returns what it sent.
async fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    let closed = tokio::time::timeout(CUT_OFF_WITHIN, async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "the server never closed the slow connection"
    );
    String::from_utf8_lossy(&seen).into_owned()
}

/// A client that never reuses a connection: the server closes idle keep-alive connections
/// after `header_read_timeout` too, and a pooled one could be reused just as it closes.
fn fresh_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

/// A normal request on a fresh connection still gets its answer.
async fn others_are_served(app: &TestApp) {
    let response = fresh_client()
        .get(app.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clients_trickling_their_headers_are_cut_off_while_others_are_served() {
    let db = TestDatabase::create(Backend::Sqlite).await;
    let app = app(&db).await;
    let mut slow = Vec::new();
    for _ in 0..50 {
        let mut stream = TcpStream::connect(app.addr).await.unwrap();
        stream
            .write_all(b"POST /v1/jobs HTTP/1.1\r\nHost: onejob\r\n")
            .await
            .unwrap();
        slow.push(stream);
    }
    // One header line more now and then, never the blank line that ends the head.
    let trickle = tokio::spawn(async move {
        let mut open = slow;
        let mut closed = Vec::new();
        while !open.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let mut still = Vec::new();
            for mut stream in open {
                match stream.write_all(b"X-Slow: 1\r\n").await {
                    Ok(()) => still.push(stream),
                    Err(_) => closed.push(stream),
                }
            }
            open = still;
            if closed.len() >= 50 {
                break;
            }
            // Also count connections the server closed that we have not written into yet.
            let mut remaining = Vec::new();
            for mut stream in open {
                let mut byte = [0u8; 1];
                match tokio::time::timeout(Duration::from_millis(1), stream.read(&mut byte)).await {
                    Ok(Ok(0) | Err(_)) => closed.push(stream),
                    _ => remaining.push(stream),
                }
            }
            open = remaining;
        }
        closed.len()
    });
    others_are_served(&app).await;
    let closed = tokio::time::timeout(CUT_OFF_WITHIN, trickle)
        .await
        .expect("every slow head is cut off")
        .unwrap();
    assert_eq!(closed, 50);
    others_are_served(&app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_trickling_its_body_is_answered_408_and_disconnected() {
    let db = TestDatabase::create(Backend::Sqlite).await;
    let app = app(&db).await;
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    let head = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: onejob\r\nAuthorization: Bearer {}\r\n\
         Idempotency-Key: slow-body\r\nContent-Type: application/json\r\n\
         Content-Length: 1000\r\n\r\n{{",
        app.token
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let trickle = tokio::spawn(async move {
        while writer.write_all(b" ").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    others_are_served(&app).await;
    let mut seen = Vec::new();
    let _ = tokio::time::timeout(CUT_OFF_WITHIN, reader.read_to_end(&mut seen)).await;
    trickle.abort();
    let answer = String::from_utf8_lossy(&seen);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    assert!(
        answer.contains("https://onejob.dev/problems/request-timeout"),
        "{answer}"
    );
    // Nothing was created under the key.
    let (status, _) = crate::helpers::json(
        fresh_client()
            .get(app.url("/v1/jobs?idempotency_key=slow-body"))
            .bearer_auth(&app.token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn oversized_request_heads_are_refused_with_431() {
    let db = TestDatabase::create(Backend::Sqlite).await;
    let app = app(&db).await;
    let huge_header = format!(
        "GET /healthz HTTP/1.1\r\nHost: onejob\r\nX-Big: {}\r\n\r\n",
        "a".repeat(200 * 1024)
    );
    let many_headers = format!(
        "GET /healthz HTTP/1.1\r\nHost: onejob\r\n{}\r\n",
        (0..500)
            .map(|i| format!("X-H{i}: v\r\n"))
            .collect::<String>()
    );
    for request in [huge_header, many_headers] {
        let mut stream = TcpStream::connect(app.addr).await.unwrap();
        // The server may stop reading (and close) before all of it is written.
        let _ = stream.write_all(request.as_bytes()).await;
        let answer = read_until_closed(&mut stream).await;
        assert!(
            answer.starts_with("HTTP/1.1 431"),
            "{}",
            &answer[..answer.len().min(200)]
        );
    }
    others_are_served(&app).await;
}
