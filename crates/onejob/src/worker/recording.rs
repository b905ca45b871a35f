//! Writing what a worker learned, with retries: a retryable store error (the database
//! unreachable for a moment, a compare-and-swap that kept losing) is tried again with
//! backoff until the write's window closes, instead of losing what the provider said.

use std::{future::Future, time::Duration};

use tokio::time::Instant;

use crate::store::{Chain, StoreError};

/// First wait between tries; doubles up to [`MAX_WAIT`].
const FIRST_WAIT: Duration = Duration::from_millis(50);
const MAX_WAIT: Duration = Duration::from_secs(1);

/// The shortest window a write gets, even when it starts at (or after) the attempt's
/// deadline: an answer that arrives just in time must still be recorded.
pub const MIN_WINDOW: Duration = Duration::from_secs(3);

/// Runs `write` until it succeeds, fails with an error retrying cannot fix, or `until`
/// (at least [`MIN_WINDOW`] from now) has passed; the last error is returned.
pub async fn with_retries<T, F, Fut>(
    what: &str,
    until: Instant,
    mut write: F,
) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let until = until.max(Instant::now() + MIN_WINDOW);
    let mut wait = FIRST_WAIT;
    loop {
        match write().await {
            Ok(value) => return Ok(value),
            Err(error) if error.is_retryable() && Instant::now() + wait < until => {
                tracing::warn!(error = %Chain(&error), what, ?wait, "recording failed; trying again");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(MAX_WAIT);
            }
            Err(error) => return Err(error),
        }
    }
}
