//! One keep-alive HTTP/1.1 connection per simulated client (hyper's low-level client, so a
//! client is exactly one TCP connection and nothing is pooled or multiplexed behind it).

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode, client::conn::http1::SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// One open connection.
pub struct Conn {
    addr: SocketAddr,
    host: String,
    send: SendRequest<Full<Bytes>>,
}

/// A request's answer: status and full body.
pub struct Answer {
    pub status: StatusCode,
    pub body: Bytes,
}

impl Conn {
    /// Opens a connection (retrying briefly while the server starts listening).
    pub async fn open(addr: SocketAddr) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (send, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(std::io::Error::other)?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Conn {
            addr,
            host: addr.to_string(),
            send,
        })
    }

    /// Reopens after an error.
    pub async fn reopen(&mut self) -> std::io::Result<()> {
        *self = Conn::open(self.addr).await?;
        Ok(())
    }

    /// Sends a request and reads the whole answer.
    pub async fn call(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Bytes>,
    ) -> Result<Answer, String> {
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.host);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let request = builder
            .body(Full::new(body.unwrap_or_default()))
            .map_err(|e| e.to_string())?;
        self.send.ready().await.map_err(|e| e.to_string())?;
        let response = self
            .send
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok(Answer { status, body })
    }
}

/// Waits until `GET /readyz` answers 200 (the server is up and its database answers).
pub async fn wait_ready(addr: SocketAddr, timeout: std::time::Duration) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Ok(mut conn) = Conn::open(addr).await
            && let Ok(answer) = conn.call("GET", "/readyz", &[], None).await
            && answer.status == StatusCode::OK
        {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("{addr} did not become ready within {timeout:?}"));
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
