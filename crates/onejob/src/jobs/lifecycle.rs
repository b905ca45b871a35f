//! The owner's controls over a job's life: cancel and retry.
//!
//! Cancelling settles the job in the store first (its `unknown` attempts become
//! `cancelled`), then asks each live attempt's provider to cancel its task upstream where it
//! has one and the API can; results that still arrive are discarded and recorded by the
//! store's compare-and-swap. Retrying recovers a `failed` job on the same job (never a new
//! one), with a fresh attempt budget. A cancellation is announced on the job change notices,
//! so a gateway caller waiting on the job wakes up and answers it.

use onejob_domain::{JobState, Principal};
use uuid::Uuid;

use super::Jobs;
use crate::{
    provider::Providers,
    store::{AttemptRecord, CancelOutcome, JobRecord, RecoverOutcome, StoreError},
};

/// Why a job was not cancelled. Nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum CancelError {
    /// The job does not exist or is not the owner's (the two look the same).
    #[error("no such job")]
    NotFound,
    /// The job already succeeded or failed: there is nothing to cancel.
    #[error("the job already {state}; there is nothing to cancel")]
    Finished {
        /// The state it ended in.
        state: JobState,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The process is stopping: the cancellation was not run to its end here.
    #[error("onejob is stopping; send the cancellation again")]
    Stopping,
}

/// Why a job was not retried. Nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum RetryError {
    /// The job does not exist or is not the owner's (the two look the same).
    #[error("no such job")]
    NotFound,
    /// Only a failed job is retried; this one is in `state`.
    #[error("only a failed job can be retried; this one is {state}")]
    NotFailed {
        /// The state it is in.
        state: JobState,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Jobs {
    /// Cancels the owner's job unless it already succeeded or failed; a cancelled job answers
    /// as it is. Live attempts' providers are asked to cancel in the background: the answer
    /// does not wait for them.
    ///
    /// The cancellation runs as a task of its own: a caller that goes away while it commits
    /// does not keep the providers from being asked (only the node that cancels the job asks
    /// for an attempt whose task id was already recorded).
    pub async fn cancel(
        &self,
        owner: &Principal,
        id: Uuid,
        actor: &str,
    ) -> Result<JobRecord, CancelError> {
        let (jobs, owner, actor) = (self.clone(), owner.clone(), actor.to_owned());
        let cancelled = tokio::spawn(async move {
            let cancelled = jobs.store.cancel_job(&owner, id, &actor).await?;
            if let Some(CancelOutcome::Cancelled { job, live }) = &cancelled {
                jobs.watch.changed(job.id);
                for attempt in live {
                    tokio::spawn(cancel_upstream(jobs.providers.clone(), attempt.clone()));
                }
            }
            Ok::<_, StoreError>(cancelled)
        });
        let cancelled = match cancelled.await {
            Ok(cancelled) => cancelled?,
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            Err(_) => return Err(CancelError::Stopping),
        };
        match cancelled.ok_or(CancelError::NotFound)? {
            CancelOutcome::Final(job) => Err(CancelError::Finished { state: job.state }),
            CancelOutcome::Cancelled { job, .. } => Ok(job),
        }
    }

    /// Runs the owner's failed job again: the same job, pending again with a fresh attempt
    /// budget; a `recovered` event names the actor.
    pub async fn retry(
        &self,
        owner: &Principal,
        id: Uuid,
        actor: &str,
    ) -> Result<JobRecord, RetryError> {
        match self
            .store
            .recover_job(owner, id, actor)
            .await?
            .ok_or(RetryError::NotFound)?
        {
            RecoverOutcome::Recovered(job) => Ok(job),
            RecoverOutcome::NotFailed(job) => Err(RetryError::NotFailed { state: job.state }),
        }
    }
}

/// Asks an attempt's provider to cancel its task, where it has one and the API can.
async fn cancel_upstream(providers: Providers, attempt: AttemptRecord) {
    let (Some(task_id), Some(provider)) = (&attempt.task_id, providers.get(&attempt.provider))
    else {
        return;
    };
    match provider.cancel(task_id).await {
        Ok(()) => tracing::info!(attempt = %attempt.id, %task_id, "asked the provider to cancel"),
        Err(error) => {
            tracing::warn!(attempt = %attempt.id, %task_id, %error, "upstream cancel failed");
        }
    }
}
