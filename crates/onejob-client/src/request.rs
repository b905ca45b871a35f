//! Sending one API call: the `Authorization` header, resending under the
//! [`RetryPolicy`](crate::RetryPolicy), and turning the answer into a value or an
//! [`Error`].

use reqwest::{
    Method, RequestBuilder, StatusCode,
    header::{AUTHORIZATION, HeaderMap},
};
use serde::de::DeserializeOwned;

use crate::{Client, Error, problem, retry};

/// Whether a call may be resent after a transport error that may have reached the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// Resending has no further effect (reads, submissions under their key, cancel).
    Safe,
    /// Only when the connection was never made (a second `retry` or `resolve` that reached
    /// the server would be refused, hiding the first one's success).
    IfUnsent,
}

/// A received answer.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The call, as `METHOD /path`.
    pub endpoint: String,
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body, as received.
    pub body: Vec<u8>,
}

impl Answer {
    /// The answer as `T` if it is a success, else the error it stands for.
    pub(crate) fn json<T: DeserializeOwned>(self) -> Result<T, Error> {
        let answer = self.success()?;
        serde_json::from_slice(&answer.body).map_err(|source| Error::Decode {
            endpoint: answer.endpoint,
            source,
        })
    }

    /// The answer itself if it is a success, else the error it stands for.
    pub(crate) fn success(self) -> Result<Answer, Error> {
        if self.status.is_success() {
            Ok(self)
        } else {
            Err(problem::error_from(self.status, &self.body))
        }
    }
}

impl Client {
    /// Sends `method path` (built further by `build`, called again for every try) and
    /// returns the answer, resending after transport errors and "not now" answers (as
    /// `resend` allows, see [`retry::retryable`]), as the retry policy says.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        resend: Resend,
        build: impl Fn(RequestBuilder) -> RequestBuilder,
    ) -> Result<Answer, Error> {
        let endpoint = format!("{method} {path}");
        let url = format!("{}{path}", self.base_url);
        let mut retries = 0;
        loop {
            let request = self
                .http
                .request(method.clone(), &url)
                .timeout(self.timeout)
                .header(AUTHORIZATION, self.authorization.clone());
            let sent = build(request).send().await;
            let received = match sent {
                Ok(response) => {
                    let status = response.status();
                    let headers = response.headers().clone();
                    response.bytes().await.map(|body| (status, headers, body))
                }
                Err(error) => Err(error),
            };
            let wait = match received {
                Ok((status, headers, body)) => {
                    if !retry::retryable(status, resend == Resend::Safe)
                        || retries >= self.retry.retries()
                    {
                        return Ok(Answer {
                            endpoint,
                            status,
                            headers,
                            body: body.to_vec(),
                        });
                    }
                    retry::retry_after(&headers)
                }
                Err(error) => {
                    let may_resend = match resend {
                        Resend::Safe => !error.is_builder(),
                        Resend::IfUnsent => error.is_connect(),
                    };
                    if !may_resend || retries >= self.retry.retries() {
                        return Err(Error::Transport {
                            endpoint,
                            source: error.without_url(),
                        });
                    }
                    None
                }
            };
            tokio::time::sleep(self.retry.delay(retries, wait)).await;
            retries += 1;
        }
    }
}
