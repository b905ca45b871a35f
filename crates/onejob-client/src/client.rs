//! [`Client`]: one typed method per call of onejob's HTTP API.

use std::fmt;

use reqwest::{Method, header::HeaderValue};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    Attempt, AttemptState, Certificate, CertificatePage, ClientBuilder, Error, Event, EventPage,
    Job, JobFilter, JobPage, Resolution, Resolved, RetryPolicy, Submission,
    key::{self, validate_key},
    request::Resend,
};

/// The header carrying the caller's idempotency key.
const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The header the server sets on a replayed submission.
const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

/// A client of one onejob server, acting with one API key.
///
/// Cheap to clone (the connection pool is shared); build it once and reuse it.
#[derive(Clone)]
pub struct Client {
    pub(crate) http: reqwest::Client,
    /// The longest one request may take (set per request, so that it holds for a
    /// `reqwest::Client` given to the builder too).
    pub(crate) timeout: std::time::Duration,
    pub(crate) base_url: String,
    pub(crate) authorization: HeaderValue,
    pub(crate) retry: RetryPolicy,
}

impl fmt::Debug for Client {
    // The API key stays out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base_url", &self.base_url)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct AttemptList {
    attempts: Vec<Attempt>,
}

/// The page size [`Client::events`] and [`Client::certificates`] ask for (the server's
/// most).
const WHOLE_PAGE: u32 = 500;

impl Client {
    /// A client for the server at `base_url` (`http://127.0.0.1:8080`) acting with
    /// `api_key`, with the default timeouts and [`RetryPolicy`].
    pub fn new(base_url: &str, api_key: &str) -> Result<Client, Error> {
        Self::builder(base_url, api_key).build()
    }

    /// A [`ClientBuilder`] to set timeouts and the retry policy.
    pub fn builder(base_url: &str, api_key: &str) -> ClientBuilder {
        ClientBuilder::new(base_url, api_key)
    }

    /// The server's base URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Submits a job of `kind` with `params` under the idempotency `key`
    /// (`POST /v1/jobs`).
    ///
    /// Name the key once per business action (`order-42:caption`) and pass the same key
    /// whenever that action is retried: the server answers the job the key already names
    /// ([`Submission::replayed`]) instead of starting a second one. The key is checked here
    /// first ([`Error::InvalidKey`], nothing sent). Transport errors, timeouts and the
    /// answers that say "not now" (`408`, `429`, `502`, `503`, `504`) are resent with the
    /// same key under the client's [`RetryPolicy`], which is safe for that reason. The same key with other params or another kind is
    /// [`Error::KeyReused`], never resent.
    pub async fn submit(&self, key: &str, kind: &str, params: &Value) -> Result<Submission, Error> {
        validate_key(key)?;
        let header = key::header_value(key);
        let body = json!({ "kind": kind, "params": params });
        let answer = self
            .send(Method::POST, "/v1/jobs", Resend::Safe, |request| {
                request.header(IDEMPOTENCY_KEY, &header).json(&body)
            })
            .await?;
        let replayed = answer
            .headers
            .get(IDEMPOTENT_REPLAYED)
            .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"true"));
        Ok(Submission {
            job: answer.json()?,
            replayed,
        })
    }

    /// The job (`GET /v1/jobs/{id}`); a missing or foreign one is a `404`
    /// [`Error::Problem`]. See [`Client::poll`] for the server's polling advice too.
    pub async fn job(&self, id: Uuid) -> Result<Job, Error> {
        Ok(self.poll(id).await?.job)
    }

    /// The caller's job under `key`, or `None` (`GET /v1/jobs?idempotency_key=…`).
    pub async fn job_by_key(&self, key: &str) -> Result<Option<Job>, Error> {
        validate_key(key)?;
        let answer = self
            .send(Method::GET, "/v1/jobs", Resend::Safe, |request| {
                request.query(&[("idempotency_key", key)])
            })
            .await?;
        match answer.json() {
            Ok(job) => Ok(Some(job)),
            Err(error) if error.status() == Some(404) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// One page of the caller's jobs, newest first (`GET /v1/jobs?state=…&kind=…`).
    pub async fn list_jobs(&self, filter: &JobFilter) -> Result<JobPage, Error> {
        let query = filter.query();
        self.send(Method::GET, "/v1/jobs", Resend::Safe, |request| {
            request.query(&query)
        })
        .await?
        .json()
    }

    /// The job's attempts, oldest first (`GET /v1/jobs/{id}/attempts`).
    pub async fn attempts(&self, id: Uuid) -> Result<Vec<Attempt>, Error> {
        let path = format!("/v1/jobs/{id}/attempts");
        let list: AttemptList = self
            .send(Method::GET, &path, Resend::Safe, |request| request)
            .await?
            .json()?;
        Ok(list.attempts)
    }

    /// The job's whole event log, oldest first: follows the pages of
    /// `GET /v1/jobs/{id}/events` (500 events each) until the last. A log grows with every
    /// replay of the job's key; [`Client::events_page`] reads one page at a time instead.
    pub async fn events(&self, id: Uuid) -> Result<Vec<Event>, Error> {
        let mut events = Vec::new();
        let mut after = None;
        loop {
            let page = self.events_page(id, after, Some(WHOLE_PAGE)).await?;
            let last = page.events.last().map(|e| e.id);
            events.extend(page.events);
            // A page without events cannot move the cursor: stop rather than ask again.
            match (page.next_after, last) {
                (Some(next), Some(_)) if Some(next) > after => after = Some(next),
                _ => return Ok(events),
            }
        }
    }

    /// One page of the job's event log, oldest first (`GET /v1/jobs/{id}/events`): the
    /// events after the event id `after` (from the start when `None`; pass the previous
    /// page's [`EventPage::next_after`]), at most `limit` (1–500; the server's default,
    /// 100, when `None`).
    pub async fn events_page(
        &self,
        id: Uuid,
        after: Option<i64>,
        limit: Option<u32>,
    ) -> Result<EventPage, Error> {
        let path = format!("/v1/jobs/{id}/events");
        let mut query: Vec<(&str, String)> = Vec::new();
        if let Some(after) = after {
            query.push(("after", after.to_string()));
        }
        if let Some(limit) = limit {
            query.push(("limit", limit.to_string()));
        }
        self.send(Method::GET, &path, Resend::Safe, |request| {
            request.query(&query)
        })
        .await?
        .json()
    }

    /// Cancels the job (`POST /v1/jobs/{id}/cancel`); cancelling a cancelled job answers
    /// it again, a succeeded or failed one is a `409` [`Error::Problem`] (`invalid-state`).
    pub async fn cancel(&self, id: Uuid) -> Result<Job, Error> {
        let path = format!("/v1/jobs/{id}/cancel");
        self.send(Method::POST, &path, Resend::Safe, |request| request)
            .await?
            .json()
    }

    /// Recovers a `failed` job on the same job with a fresh attempt budget
    /// (`POST /v1/jobs/{id}/retry`); any other state is a `409` [`Error::Problem`].
    pub async fn retry(&self, id: Uuid) -> Result<Job, Error> {
        let path = format!("/v1/jobs/{id}/retry");
        self.send(Method::POST, &path, Resend::IfUnsent, |request| request)
            .await?
            .json()
    }

    /// Resolves an `unknown` attempt out of band (`POST /v1/attempts/{id}/resolve`;
    /// operator keys only, `403` otherwise; `409` unless the attempt is unknown).
    pub async fn resolve_attempt(
        &self,
        attempt_id: Uuid,
        resolution: &Resolution,
    ) -> Result<Resolved, Error> {
        let path = format!("/v1/attempts/{attempt_id}/resolve");
        self.send(Method::POST, &path, Resend::IfUnsent, |request| {
            request.json(resolution)
        })
        .await?
        .json()
    }

    /// Attempts newest first, optionally only in `state` (`GET /v1/attempts?state=…`): an
    /// operator key sees its tenant's, any other key its own jobs'.
    pub async fn list_attempts(&self, state: Option<AttemptState>) -> Result<Vec<Attempt>, Error> {
        let query: Vec<(&str, &str)> = state.map(|s| ("state", s.as_str())).into_iter().collect();
        let list: AttemptList = self
            .send(Method::GET, "/v1/attempts", Resend::Safe, |request| {
                request.query(&query)
            })
            .await?
            .json()?;
        Ok(list.attempts)
    }

    /// Every verification run, newest first, with whether it certifies its provider now:
    /// follows the pages of `GET /v1/certificates` (500 runs each) until the last. Operator
    /// keys only (any other key: a `403` [`Error::Problem`], `forbidden`).
    pub async fn certificates(&self) -> Result<Vec<Certificate>, Error> {
        let mut certificates = Vec::new();
        let mut before = None;
        loop {
            let page = self.certificates_page(before, Some(WHOLE_PAGE)).await?;
            let last = page.certificates.last().map(|c| c.id);
            certificates.extend(page.certificates);
            // A page without runs cannot move the cursor: stop rather than ask again.
            match (page.next_before, last) {
                (Some(next), Some(_)) if Some(next) != before => before = Some(next),
                _ => return Ok(certificates),
            }
        }
    }

    /// One page of verification runs, newest first (`GET /v1/certificates`; operator keys
    /// only): the runs older than `before` (from the newest when `None`; pass the previous
    /// page's [`CertificatePage::next_before`]), at most `limit` (1–500; the server's
    /// default, 100, when `None`). Each run's `valid` is decided over all runs, not only
    /// the page's.
    pub async fn certificates_page(
        &self,
        before: Option<Uuid>,
        limit: Option<u32>,
    ) -> Result<CertificatePage, Error> {
        let mut query: Vec<(&str, String)> = Vec::new();
        if let Some(before) = before {
            query.push(("before", before.to_string()));
        }
        if let Some(limit) = limit {
            query.push(("limit", limit.to_string()));
        }
        self.send(Method::GET, "/v1/certificates", Resend::Safe, |request| {
            request.query(&query)
        })
        .await?
        .json()
    }
}
