//! [`Client`]: one typed method per call of onejob's HTTP API.

use std::fmt;

use reqwest::{Method, header::HeaderValue};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    Attempt, AttemptState, Certificate, ClientBuilder, Error, Event, Job, JobFilter, JobPage,
    Resolution, Resolved, RetryPolicy, Submission,
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

#[derive(Deserialize)]
struct EventList {
    events: Vec<Event>,
}

#[derive(Deserialize)]
struct CertificateList {
    certificates: Vec<Certificate>,
}

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
    /// first ([`Error::InvalidKey`], nothing sent). Transport errors, timeouts and `503`
    /// are resent with the same key under the client's [`RetryPolicy`], which is safe for
    /// that reason. The same key with other params or another kind is
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

    /// The job's event log, oldest first (`GET /v1/jobs/{id}/events`).
    pub async fn events(&self, id: Uuid) -> Result<Vec<Event>, Error> {
        let path = format!("/v1/jobs/{id}/events");
        let list: EventList = self
            .send(Method::GET, &path, Resend::Safe, |request| request)
            .await?
            .json()?;
        Ok(list.events)
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

    /// Every verification run, with whether it certifies its provider now
    /// (`GET /v1/certificates`).
    pub async fn certificates(&self) -> Result<Vec<Certificate>, Error> {
        let list: CertificateList = self
            .send(Method::GET, "/v1/certificates", Resend::Safe, |request| {
                request
            })
            .await?
            .json()?;
        Ok(list.certificates)
    }
}
