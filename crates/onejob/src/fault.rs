//! Fault injection for the fault suite (`chaos/`, `RELIABILITY.md`): a process-wide,
//! off-by-default switch read once from `ONEJOB_FAULT` when the `onejob` command starts.
//!
//! It exists to make one crash that no signal can aim at reproducible: a worker that dies
//! *after* a provider answered but *before* the answer is written. With
//! `ONEJOB_FAULT=abort-after-answer` the worker calls [`std::process::abort`] at exactly that
//! point, as a power cut or SIGKILL would, leaving the attempt `running` with its task id
//! stored and the provider's work done. The suite then proves the attempt is resolved by
//! proof (the reconciler asks the provider) and that nothing is sent twice.
//!
//! `ONEJOB_FAULT=abort-after-migration-step:STEP` does the same to `onejob migrate` after one
//! step of an online migration ([`crate::store::postgres::online`]), so a test can kill the
//! migrator at each step.
//!
//! `ONEJOB_FAULT=ack-reply-lost` makes an unclear commit: the first acknowledgement a worker
//! records commits, and its reply is then lost (the worker sees the connection drop), so the
//! worker must retry it not knowing whether it committed.
//!
//! `ONEJOB_FAULT=completion-reply-lost` does the same to a completion: the first output a
//! process records as a job's result commits (on PostgreSQL, usually by the one-statement
//! completion of `store/postgres/completion.rs`), and its reply is then lost, so the
//! worker retries the completion not knowing that its attempt already won.
//!
//! `ONEJOB_FAULT=intake-reply-lost` does the same to intake: the first submission a process
//! makes that starts its job's first attempt with it (a gateway call on a node whose worker
//! runs in the same process) commits, and its reply is then lost, so the gateway must find
//! and run the attempt its intake started without knowing it did.
//!
//! Unset (the default, and everywhere outside the suite) nothing is armed and every check
//! is one load of an already-initialised cell. An unknown value is refused at start, so a
//! typo cannot silently disarm a fault test.

use std::sync::{
    OnceLock,
    atomic::{AtomicBool, Ordering},
};

/// The environment variable that arms a fault.
pub const FAULT_ENV: &str = "ONEJOB_FAULT";

/// The faults that can be armed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// `abort-after-answer`: a worker aborts the process after a provider's answer (an
    /// output) arrived and before it is recorded.
    AbortAfterAnswer,
    /// `abort-after-migration-step:STEP`: `onejob migrate` aborts right after the online
    /// migration step named `STEP` has completed.
    AbortAfterMigrationStep(String),
    /// `ack-reply-lost`: the first acknowledgement a worker records commits, and the worker
    /// is then told the connection dropped (an unclear commit).
    AckReplyLost,
    /// `completion-reply-lost`: the first completion (an output offered as a job's result)
    /// a process records commits, and the recorder is then told the connection dropped (an
    /// unclear commit).
    CompletionReplyLost,
    /// `intake-reply-lost`: the first submission that starts its job's first attempt at
    /// intake commits, and the submitter is then told the connection dropped (an unclear
    /// commit).
    IntakeReplyLost,
}

/// An `ONEJOB_FAULT` value that names no fault.
#[derive(Debug, thiserror::Error)]
#[error(
    "{FAULT_ENV}={0:?} names no fault (known: abort-after-answer, ack-reply-lost, \
     completion-reply-lost, intake-reply-lost, abort-after-migration-step:STEP)"
)]
pub struct UnknownFault(pub String);

impl Fault {
    /// Parses an `ONEJOB_FAULT` value.
    pub fn parse(value: &str) -> Result<Fault, UnknownFault> {
        match value.split_once(':') {
            None if value == "abort-after-answer" => Ok(Fault::AbortAfterAnswer),
            None if value == "ack-reply-lost" => Ok(Fault::AckReplyLost),
            None if value == "completion-reply-lost" => Ok(Fault::CompletionReplyLost),
            None if value == "intake-reply-lost" => Ok(Fault::IntakeReplyLost),
            Some(("abort-after-migration-step", step)) if !step.is_empty() => {
                Ok(Fault::AbortAfterMigrationStep(step.to_owned()))
            }
            _ => Err(UnknownFault(value.to_owned())),
        }
    }
}

static ARMED: OnceLock<Option<Fault>> = OnceLock::new();

/// Reads `ONEJOB_FAULT` once; later calls keep the first reading. Call it at start.
pub fn init_from_env() -> Result<(), UnknownFault> {
    let fault = match std::env::var(FAULT_ENV) {
        Ok(value) if !value.is_empty() => Some(Fault::parse(&value)?),
        _ => None,
    };
    if let Some(fault) = &fault {
        tracing::warn!(?fault, "fault injection armed ({FAULT_ENV})");
    }
    let _ = ARMED.set(fault);
    Ok(())
}

/// The error a write whose reply was lost on the way back reads as: what a dropped
/// connection gives (the store's own error implements it).
pub trait ReplyLost {
    /// That error.
    fn reply_lost() -> Self;
}

fn armed() -> Option<&'static Fault> {
    ARMED.get_or_init(|| None).as_ref()
}

/// Aborts the process if `abort-after-answer` is armed. Called by the worker between a
/// provider's answer and its recording.
pub fn after_answer() {
    if armed() == Some(&Fault::AbortAfterAnswer) {
        eprintln!("onejob: {FAULT_ENV}=abort-after-answer: aborting before recording the answer");
        std::process::abort();
    }
}

/// With `ack-reply-lost` armed, turns the first acknowledgement `recorded` (committed) into
/// the error a dropped connection gives, once per process; otherwise `recorded` unchanged.
pub fn lose_ack_reply<T, E: ReplyLost>(recorded: Result<T, E>) -> Result<T, E> {
    static LOST: AtomicBool = AtomicBool::new(false);
    let fault = (&Fault::AckReplyLost, "ack-reply-lost");
    lose_reply(recorded, fault, &LOST, "the acknowledgement")
}

/// With `completion-reply-lost` armed, turns the first completion `recorded` (committed)
/// into the error a dropped connection gives, once per process; otherwise `recorded`
/// unchanged.
pub fn lose_completion_reply<T, E: ReplyLost>(recorded: Result<T, E>) -> Result<T, E> {
    static LOST: AtomicBool = AtomicBool::new(false);
    let fault = (&Fault::CompletionReplyLost, "completion-reply-lost");
    lose_reply(recorded, fault, &LOST, "the completion")
}

/// With `intake-reply-lost` armed, turns the first intake `recorded` (committed) that
/// started its job's first attempt into the error a dropped connection gives, once per
/// process; otherwise `recorded` unchanged.
pub fn lose_intake_reply<T, E: ReplyLost>(recorded: Result<T, E>, started: bool) -> Result<T, E> {
    static LOST: AtomicBool = AtomicBool::new(false);
    if !started {
        return recorded;
    }
    let fault = (&Fault::IntakeReplyLost, "intake-reply-lost");
    lose_reply(recorded, fault, &LOST, "the intake that started an attempt")
}

/// The first committed `recorded` while `fault` (and its `ONEJOB_FAULT` value) is armed
/// and `lost` not yet set becomes a dropped connection's error.
fn lose_reply<T, E: ReplyLost>(
    recorded: Result<T, E>,
    (fault, value): (&Fault, &str),
    lost: &AtomicBool,
    what: &str,
) -> Result<T, E> {
    if recorded.is_ok() && armed() == Some(fault) && !lost.swap(true, Ordering::SeqCst) {
        eprintln!("onejob: {FAULT_ENV}={value}: {what} committed; its reply is lost");
        return Err(E::reply_lost());
    }
    recorded
}

/// Aborts the process if `abort-after-migration-step:STEP` is armed for this `step`.
pub fn after_migration_step(step: &str) {
    if let Some(Fault::AbortAfterMigrationStep(armed)) = armed()
        && armed == step
    {
        eprintln!("onejob: {FAULT_ENV}=abort-after-migration-step:{step}: aborting");
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_faults_parse_and_typos_are_refused() {
        assert_eq!(
            Fault::parse("abort-after-answer").unwrap(),
            Fault::AbortAfterAnswer
        );
        assert_eq!(Fault::parse("ack-reply-lost").unwrap(), Fault::AckReplyLost);
        assert_eq!(
            Fault::parse("completion-reply-lost").unwrap(),
            Fault::CompletionReplyLost
        );
        assert_eq!(
            Fault::parse("intake-reply-lost").unwrap(),
            Fault::IntakeReplyLost
        );
        assert_eq!(
            Fault::parse("abort-after-migration-step:build-index").unwrap(),
            Fault::AbortAfterMigrationStep("build-index".into())
        );
        for typo in [
            "abort-after-anwser",
            "abort-after-migration-step:",
            "abort-after-answer:x",
            "completion-reply-lost:x",
        ] {
            assert!(Fault::parse(typo).is_err(), "{typo}");
        }
    }
}
