//! Waiting for a job to finish: [`Client::poll`] reads the job once with the server's
//! polling advice ([`Poll`]); [`Client::wait`] polls until the job is finished, honouring
//! that advice, within [`WaitOptions`].

use std::time::Duration;

use reqwest::Method;
use tokio::time::Instant;
use uuid::Uuid;

use crate::{Client, Error, Job, request::Resend, retry};

/// How [`Client::wait`] waits.
///
/// ```
/// use std::time::Duration;
/// use onejob_client::WaitOptions;
///
/// let options = WaitOptions::default().timeout(Duration::from_secs(120));
/// # let _ = options;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitOptions {
    timeout: Duration,
    max_interval: Duration,
    default_interval: Duration,
}

impl Default for WaitOptions {
    /// Up to 10 minutes; the server's advice, at most 10 s apart; 1 s without advice.
    fn default() -> Self {
        WaitOptions {
            timeout: Duration::from_secs(600),
            max_interval: Duration::from_secs(10),
            default_interval: Duration::from_secs(1),
        }
    }
}

impl WaitOptions {
    /// Give up ([`Error::WaitTimedOut`]) once this much time has passed.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Poll at least this often, whatever the server advises.
    pub fn max_interval(mut self, interval: Duration) -> Self {
        self.max_interval = interval;
        self
    }

    /// The interval when the server gives no advice.
    pub fn default_interval(mut self, interval: Duration) -> Self {
        self.default_interval = interval;
        self
    }

    /// The overall timeout.
    pub fn overall_timeout(&self) -> Duration {
        self.timeout
    }

    /// How long to sleep after `poll`, before the deadline `remaining` away.
    fn interval(&self, poll: &Poll, remaining: Duration) -> Duration {
        poll.advice()
            .unwrap_or(self.default_interval)
            .min(self.max_interval)
            .min(remaining)
    }
}

/// One read of a job, with the server's advice on when to read it again.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Poll {
    /// The job.
    pub job: Job,
    /// The `Retry-After` header, in seconds (sent while the job is not finished).
    pub retry_after: Option<Duration>,
}

impl Poll {
    /// When to poll again: `poll_after_ms` (the finer advice), else `Retry-After`; `None`
    /// once the job is finished, or when the server gave no advice.
    pub fn advice(&self) -> Option<Duration> {
        if self.job.is_finished() {
            return None;
        }
        self.job.poll_after().or(self.retry_after)
    }
}

impl Client {
    /// Reads the job once (`GET /v1/jobs/{id}`) with the server's polling advice.
    pub async fn poll(&self, id: Uuid) -> Result<Poll, Error> {
        let path = format!("/v1/jobs/{id}");
        let answer = self
            .send(Method::GET, &path, Resend::Safe, |request| request)
            .await?
            .success()?;
        let retry_after = retry::retry_after(&answer.headers);
        Ok(Poll {
            job: answer.json()?,
            retry_after,
        })
    }

    /// Polls the job until it is finished (succeeded, failed or cancelled) and returns it,
    /// sleeping between polls as the server advises. A failed or cancelled job is returned
    /// too: look at [`Job::state`]. [`Error::WaitTimedOut`] after the options' timeout.
    pub async fn wait(&self, id: Uuid, options: &WaitOptions) -> Result<Job, Error> {
        self.wait_with(id, options, |_| {}).await
    }

    /// Like [`Client::wait`], calling `on_change` with the job on the first poll and
    /// whenever its state, attempt count or update time changed (for progress display).
    pub async fn wait_with(
        &self,
        id: Uuid,
        options: &WaitOptions,
        mut on_change: impl FnMut(&Job),
    ) -> Result<Job, Error> {
        let started = Instant::now();
        let deadline = started + options.timeout;
        let mut seen = None;
        loop {
            let poll = self.poll(id).await?;
            let now = (poll.job.state, poll.job.attempts, poll.job.updated_at);
            if seen != Some(now) {
                on_change(&poll.job);
                seen = Some(now);
            }
            if poll.job.is_finished() {
                return Ok(poll.job);
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(Error::WaitTimedOut {
                    job: Box::new(poll.job),
                    waited: started.elapsed(),
                });
            }
            tokio::time::sleep(options.interval(&poll, remaining)).await;
        }
    }
}
