//! A scripted upstream for the gateway's tests, for what the bundled fake does not send: a
//! real HTTP server on a loopback port whose every answer the test writes, a refusal in the
//! API's own shape after a delay, or a stream of server-sent events as the real APIs send
//! theirs (`"usage": null` in every OpenAI chunk, Anthropic's cumulative usage and
//! citations, reasoning summaries, …).

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{
    body::Body,
    http::{StatusCode, Uri, header},
    response::{IntoResponse, Response},
};
use futures::StreamExt as _;
use onejob::config::{Adapter, Config, ProviderConfig};
use serde_json::Value;

/// What the upstream answers one request.
pub enum Answer {
    /// `status` with the JSON `body`, `after` the request came.
    Refuse {
        status: u16,
        body: Value,
        after: Duration,
    },
    /// `200`, a `text/event-stream` of `events` (each its `event:` name where it has one, and
    /// its `data:`), each `gap` after the one before.
    Stream {
        events: Vec<(Option<String>, String)>,
        gap: Duration,
    },
}

/// The scripted upstream, serving until the test ends.
pub struct Upstream {
    addr: SocketAddr,
}

type Script = dyn Fn(&str, &Value) -> Answer + Send + Sync;

impl Upstream {
    /// Serves every `POST` with what `answer` makes of its path and JSON body.
    pub async fn spawn(answer: impl Fn(&str, &Value) -> Answer + Send + Sync + 'static) -> Self {
        let answer: Arc<Script> = Arc::new(answer);
        let router = axum::Router::new().fallback(move |uri: Uri, body: String| {
            let answer = answer.clone();
            async move {
                let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                let answer = answer(uri.path(), &request);
                respond(answer).await
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self { addr }
    }

    /// Its `base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Adds a provider `name` speaking `adapter` to this upstream, and makes it the only
    /// provider of `kind`.
    pub fn serve(&self, config: &mut Config, name: &str, adapter: Adapter, kind: &str) {
        let mut provider = ProviderConfig::new(name, adapter);
        provider.base_url = Some(self.base_url());
        provider.model = Some("upstream-model".into());
        config.providers.push(provider);
        let kind = config
            .kinds
            .iter_mut()
            .find(|k| k.name == kind)
            .unwrap_or_else(|| panic!("the demo declares kind {kind}"));
        kind.providers = vec![name.into()];
        kind.max_attempts = 1;
    }
}

async fn respond(answer: Answer) -> Response {
    match answer {
        Answer::Refuse {
            status,
            body,
            after,
        } => {
            tokio::time::sleep(after).await;
            let status = StatusCode::from_u16(status).unwrap();
            (status, axum::Json(body)).into_response()
        }
        Answer::Stream { events, gap } => {
            let pieces = futures::stream::iter(events.into_iter().enumerate()).then(
                move |(n, (name, data))| async move {
                    if n > 0 {
                        tokio::time::sleep(gap).await;
                    }
                    let name = name
                        .map(|name| format!("event: {name}\n"))
                        .unwrap_or_default();
                    Ok::<_, std::io::Error>(format!("{name}data: {data}\n\n"))
                },
            );
            let mut response = Response::new(Body::from_stream(pieces));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/event-stream"),
            );
            response
        }
    }
}

/// Named events (Anthropic's, the Responses API's) as an [`Answer::Stream`] sends them.
pub fn named(events: &[serde_json::Value]) -> Vec<(Option<String>, String)> {
    events
        .iter()
        .map(|event| (event["type"].as_str().map(str::to_owned), event.to_string()))
        .collect()
}
