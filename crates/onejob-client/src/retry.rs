//! [`RetryPolicy`]: how often and how patiently the client resends a request that did not
//! get a usable answer (a transport error, a timeout, or `503` with its `Retry-After`).

use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};

/// How the client retries its own requests.
///
/// A request is resent after a transport error or timeout (only when resending is safe:
/// reads, submissions — the same idempotency key names the same job — and cancellation;
/// `retry` and `resolve_attempt` are resent only when the connection was never made) and
/// after a `503 Service Unavailable`. The wait before a resend is the server's
/// `Retry-After` when it sent one (at most [`RetryPolicy::max_retry_after`]), otherwise an
/// exponential backoff from [`RetryPolicy::initial_backoff`] up to
/// [`RetryPolicy::max_backoff`].
///
/// ```
/// use std::time::Duration;
/// use onejob_client::RetryPolicy;
///
/// let patient = RetryPolicy::default()
///     .max_retries(6)
///     .initial_backoff(Duration::from_millis(500));
/// let never = RetryPolicy::none();
/// # let _ = (patient, never);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    max_retries: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
    max_retry_after: Duration,
}

impl Default for RetryPolicy {
    /// Three resends, backing off from 250 ms up to 8 s, honouring `Retry-After` up to 60 s.
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            initial_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// Never resend: every request is tried once.
    pub fn none() -> Self {
        RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        }
    }

    /// How many times a request may be resent after its first try.
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// The wait before the first resend without `Retry-After`; it doubles per resend.
    pub fn initial_backoff(mut self, backoff: Duration) -> Self {
        self.initial_backoff = backoff;
        self
    }

    /// The longest wait between resends without `Retry-After`.
    pub fn max_backoff(mut self, backoff: Duration) -> Self {
        self.max_backoff = backoff;
        self
    }

    /// The longest `Retry-After` honoured; a longer one is cut to this.
    pub fn max_retry_after(mut self, limit: Duration) -> Self {
        self.max_retry_after = limit;
        self
    }

    /// How many resends are allowed.
    pub fn retries(&self) -> u32 {
        self.max_retries
    }

    /// The wait before resend number `retry` (0 for the first), given the server's
    /// `Retry-After` if it sent one.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        match retry_after {
            Some(wait) => wait.min(self.max_retry_after),
            None => self
                .initial_backoff
                .saturating_mul(2u32.saturating_pow(retry))
                .min(self.max_backoff),
        }
    }
}

/// The `Retry-After` header as a duration, when it is a number of seconds (the form onejob
/// sends; an HTTP date is ignored and the backoff applies instead).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_honours_retry_after_up_to_the_limit_and_backs_off_without_it() {
        let policy = RetryPolicy::default()
            .initial_backoff(Duration::from_millis(100))
            .max_backoff(Duration::from_millis(350))
            .max_retry_after(Duration::from_secs(5));
        assert_eq!(policy.delay(0, None), Duration::from_millis(100));
        assert_eq!(policy.delay(1, None), Duration::from_millis(200));
        assert_eq!(policy.delay(2, None), Duration::from_millis(350));
        assert_eq!(policy.delay(40, None), Duration::from_millis(350));
        assert_eq!(policy.delay(3, Some(Duration::ZERO)), Duration::ZERO);
        assert_eq!(
            policy.delay(0, Some(Duration::from_secs(90))),
            Duration::from_secs(5)
        );
    }

    #[test]
    fn retry_after_reads_seconds_and_ignores_dates() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(RETRY_AFTER, "2".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert(
            RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&headers), None);
    }
}
