//! [`RetryPolicy`]: how often and how patiently the client resends a request that did not
//! get a usable answer (a transport error, a timeout, or a `408`, `429`, `502`, `503` or
//! `504` with its `Retry-After`), and which answers are worth resending at all.

use std::time::Duration;

use rand::Rng;
use reqwest::{
    StatusCode,
    header::{HeaderMap, RETRY_AFTER},
};

/// How the client retries its own requests.
///
/// A request is resent after a transport error or timeout, and after an answer that says
/// "not now": `429 Too Many Requests` and `503 Service Unavailable` for every call, and
/// `408 Request Timeout`, `502 Bad Gateway` and `504 Gateway Timeout` (which a proxy may
/// send after the request reached onejob) only where resending is safe: reads,
/// submissions (the same idempotency key names the same job) and cancellation. `retry` and
/// `resolve_attempt` are resent after a transport error only when the connection was never
/// made, and never after a `408`, `502` or `504`: a second one that reached the server would
/// be refused, hiding the first one's success. Any other answer (`400`, `404`, `422`, …) is
/// final and never resent.
///
/// The wait before a resend is the server's `Retry-After` when it sent one in seconds (at
/// most [`RetryPolicy::max_retry_after`]), otherwise a jittered exponential backoff: a
/// random wait between half and all of [`RetryPolicy::initial_backoff`] doubled per resend,
/// capped at [`RetryPolicy::max_backoff`], so that clients turned away together do not
/// come back together.
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

    /// The longest wait before resend number `retry` (0 for the first) without
    /// `Retry-After`: [`RetryPolicy::initial_backoff`] doubled `retry` times, at most
    /// [`RetryPolicy::max_backoff`].
    pub fn backoff(&self, retry: u32) -> Duration {
        self.initial_backoff
            .saturating_mul(2u32.saturating_pow(retry))
            .min(self.max_backoff)
    }

    /// The wait before resend number `retry` (0 for the first), given the server's
    /// `Retry-After` if it sent one: that (at most [`RetryPolicy::max_retry_after`]), else
    /// a random wait between half and all of [`RetryPolicy::backoff`].
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        match retry_after {
            Some(wait) => wait.min(self.max_retry_after),
            None => {
                let ceiling = self.backoff(retry);
                let floor = ceiling / 2;
                floor + (ceiling - floor).mul_f64(rand::rng().random::<f64>())
            }
        }
    }
}

/// Whether an answer with `status` is worth resending: `429` and `503` (the server turned
/// the request away before doing anything) for every call, `408`, `502` and `504` (the
/// request may have reached onejob) only for calls that are safe to repeat.
pub(crate) fn retryable(status: StatusCode, safe_to_repeat: bool) -> bool {
    match status {
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => true,
        StatusCode::REQUEST_TIMEOUT | StatusCode::BAD_GATEWAY | StatusCode::GATEWAY_TIMEOUT => {
            safe_to_repeat
        }
        _ => false,
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
        assert_eq!(policy.backoff(0), Duration::from_millis(100));
        assert_eq!(policy.backoff(1), Duration::from_millis(200));
        assert_eq!(policy.backoff(2), Duration::from_millis(350));
        assert_eq!(policy.backoff(40), Duration::from_millis(350));
        assert_eq!(policy.delay(3, Some(Duration::ZERO)), Duration::ZERO);
        assert_eq!(
            policy.delay(0, Some(Duration::from_secs(90))),
            Duration::from_secs(5)
        );
    }

    #[test]
    fn the_backoff_is_jittered_between_half_and_all_of_its_ceiling() {
        let policy = RetryPolicy::default()
            .initial_backoff(Duration::from_millis(100))
            .max_backoff(Duration::from_secs(10));
        let waits: Vec<Duration> = (0..200).map(|_| policy.delay(2, None)).collect();
        for wait in &waits {
            assert!(
                (Duration::from_millis(200)..=Duration::from_millis(400)).contains(wait),
                "{wait:?}"
            );
        }
        let distinct: std::collections::BTreeSet<_> = waits.iter().collect();
        assert!(distinct.len() > 100, "jittered, not fixed: {distinct:?}");
    }

    #[test]
    fn only_not_now_answers_are_retryable_and_some_only_when_safe() {
        for status in [429, 503] {
            let status = StatusCode::from_u16(status).unwrap();
            assert!(
                retryable(status, true) && retryable(status, false),
                "{status}"
            );
        }
        for status in [408, 502, 504] {
            let status = StatusCode::from_u16(status).unwrap();
            assert!(
                retryable(status, true) && !retryable(status, false),
                "{status}"
            );
        }
        for status in [200, 201, 400, 401, 403, 404, 409, 413, 415, 422, 500] {
            let status = StatusCode::from_u16(status).unwrap();
            assert!(!retryable(status, true), "{status}");
        }
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
