//! A Rust client for [onejob](https://github.com/onejob/onejob)'s HTTP API: one user
//! intent, one job.
//!
//! Submit a job under an *idempotency key* that names the business action; however often
//! the submission is retried (by you, or by this client after a timeout, a `429` or a
//! `503`), the key names the same one job. A reused key with other params is refused with
//! [`Error::KeyReused`] instead of silently starting a second job. Then wait for the result.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use onejob_client::{Client, Error, JobState, WaitOptions};
//! use serde_json::json;
//!
//! # async fn run() -> Result<(), Error> {
//! let client = Client::new("http://127.0.0.1:8080", "oj_…")?;
//! let submission = client
//!     .submit("order-42:caption", "chat.completion", &json!({"prompt": "Describe a red fox."}))
//!     .await?;
//! if submission.replayed {
//!     println!("this action was already submitted as job {}", submission.job.id);
//! }
//! let options = WaitOptions::default().timeout(Duration::from_secs(120));
//! let job = client
//!     .wait_with(submission.job.id, &options, |job| println!("{}", job.state))
//!     .await?;
//! match job.state {
//!     JobState::Succeeded => println!("{}", job.result.unwrap_or_default()),
//!     other => println!("job ended {other}: {:?}", job.error),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Errors are typed: [`Error::KeyReused`] (`422`, with the changed param paths),
//! [`Error::Problem`] for any other RFC 9457 problem the server answers (`404`, `409`, …),
//! [`Error::Transport`] when no answer came, [`Error::WaitTimedOut`] when waiting gave up.
//! Enums carry an `Other` variant so that a newer server's states decode.
//!
//! Layout: [`Client`] (the calls) and [`ClientBuilder`] (its settings), [`RetryPolicy`],
//! the models ([`Job`], [`Attempt`], [`Event`], [`Certificate`], and the pages
//! [`JobPage`], [`EventPage`], [`CertificatePage`]), waiting
//! ([`WaitOptions`], [`Poll`]) and [`Error`].

#![warn(missing_docs)]

mod attempt;
mod builder;
mod certificate;
mod client;
mod error;
mod event;
mod job;
mod key;
mod listing;
mod problem;
mod request;
mod resolution;
mod retry;
mod submission;
mod wait;

pub use attempt::{Attempt, AttemptState};
pub use builder::ClientBuilder;
pub use certificate::{Certificate, CertificatePage};
pub use client::Client;
pub use error::{Error, PROBLEM_BASE};
pub use event::{Event, EventKind, EventPage};
pub use job::{Job, JobState, UnknownJobState};
pub use key::{KeyError, MAX_KEY_LEN, validate_key};
pub use listing::{JobFilter, JobPage};
pub use resolution::{Outcome, Resolution, ResolveVerdict, Resolved};
pub use retry::RetryPolicy;
pub use submission::Submission;
pub use wait::{Poll, WaitOptions};
