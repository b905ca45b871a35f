//! Recording how an attempt ended, shared by everyone who learns it: the worker (a live
//! answer), the reconciler (the provider's status) and operators (out-of-band proof).
//!
//! An output is only ever offered as a result after [`crate::kind::Kind::check_output`]
//! passed; one that does not is a failed attempt ("no fake success"). Offering goes through
//! the store's compare-and-swap, so a late or duplicate result is discarded, never merged.

use serde_json::{Value, json};

use crate::{
    kind::{FieldError, Kind},
    store::{
        AttemptRecord, Completion, FailOutcome, Resolution, RetryPolicy, Store, StoreError,
        Unsuccessful,
    },
    telemetry,
};

/// What offering an output did.
#[derive(Debug, Clone, PartialEq)]
pub enum Offered {
    /// It won: it is the job's result.
    Won,
    /// It came after another attempt won or the job was cancelled; discarded.
    Discarded,
    /// The resolution needed an `unknown` attempt and this one is not.
    NotUnknown(onejob_domain::AttemptState),
    /// It is not a real result; the attempt was recorded as failed.
    Invalid(Vec<FieldError>),
}

/// The retry policy for the attempt after attempt number `number` of a `kind` job.
pub fn retry_after(kind: &Kind, number: i32) -> RetryPolicy {
    RetryPolicy {
        max_attempts: kind.max_attempts,
        backoff: kind.backoff(number + 1),
    }
}

/// Validates `output` and offers it as the job's result.
pub async fn offer(
    store: &dyn Store,
    kind: &Kind,
    attempt: &AttemptRecord,
    output: &Value,
    by: &Resolution,
) -> Result<Offered, StoreError> {
    offer_in(store, kind, None, attempt, output, by).await
}

/// [`offer`], for a caller that knows the tenant of the attempt's job (a worker running
/// it): the completion then does not look the job up.
pub async fn offer_in(
    store: &dyn Store,
    kind: &Kind,
    tenant: Option<&str>,
    attempt: &AttemptRecord,
    output: &Value,
    by: &Resolution,
) -> Result<Offered, StoreError> {
    if let Err(errors) = kind.check_output(output) {
        let error = json!({
            "message": "the output does not pass the kind's output schema: no real artifact",
            "errors": errors,
        });
        return match fail(store, kind, attempt, Unsuccessful::Failed, error, by).await? {
            FailOutcome::NotOpen(state) if by.only_unknown => Ok(Offered::NotUnknown(state)),
            _ => Ok(Offered::Invalid(errors)),
        };
    }
    let completion = match tenant {
        Some(tenant) => {
            let job = (attempt.job_id, tenant);
            store.complete_attempt_of(job, attempt.id, output, by).await
        }
        None => store.complete_attempt(attempt.id, output, by).await,
    };
    // A completion may commit and its reply still be lost (armed here by the fault suite):
    // the caller retries it, and the retry finds its own earlier win (`transitions.rs`).
    let completion = crate::fault::lose_completion_reply(completion)?;
    let offered = match completion {
        Completion::Won => Offered::Won,
        Completion::Discarded { .. } => Offered::Discarded,
        Completion::NotUnknown(state) => Offered::NotUnknown(state),
    };
    match offered {
        Offered::Won => telemetry::attempt_ended(&attempt.provider, "won"),
        Offered::Discarded => telemetry::attempt_ended(&attempt.provider, "discarded"),
        Offered::NotUnknown(_) | Offered::Invalid(_) => {}
    }
    Ok(offered)
}

/// Records a definite failure (or cancellation) of attempt `number`, letting the job move on
/// to its next attempt while its budget lasts.
pub async fn fail(
    store: &dyn Store,
    kind: &Kind,
    attempt: &AttemptRecord,
    end: Unsuccessful,
    error: Value,
    by: &Resolution,
) -> Result<FailOutcome, StoreError> {
    let outcome = store
        .fail_attempt(
            attempt.id,
            end,
            &error,
            retry_after(kind, attempt.number),
            by,
        )
        .await?;
    if matches!(outcome, FailOutcome::Recorded(_)) {
        let label = match end {
            Unsuccessful::Failed | Unsuccessful::FailedKeyKept => "failed",
            Unsuccessful::Cancelled => "cancelled",
        };
        telemetry::attempt_ended(&attempt.provider, label);
    }
    Ok(outcome)
}
