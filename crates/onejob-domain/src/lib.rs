//! onejob's domain: the words of the design contract as types, with no I/O.
//!
//! * [`key`]: the client's idempotency key, its validation and the hash stored in its place.
//! * [`fingerprint`]: the SHA-256 of the RFC 8785 canonical `{"kind", "params"}` that binds
//!   a key to one intent, and the list of changed parameter paths shown when it does not match.
//! * [`params`]: the explicit limits on what a job's parameters may contain.
//! * [`job`] and [`attempt`]: the two state machines and their allowed transitions.
//! * [`event`]: the names of the entries in a job's append-only event log.
//! * [`field`]: a violation at one place of a JSON document.
//! * [`principal`]: who calls, always taken from the API key.
//! * [`wire`]: the streamed forms of finished Anthropic messages and OpenAI responses.
//!
//! Storage, HTTP and providers live in the `onejob` crate and build on these types.

pub mod attempt;
pub mod event;
pub mod field;
pub mod fingerprint;
pub mod job;
pub mod key;
pub mod params;
pub mod principal;
pub mod wire;

pub use attempt::AttemptState;
pub use event::EventKind;
pub use field::FieldError;
pub use fingerprint::{Fingerprint, changed_paths};
pub use job::JobState;
pub use key::{IdempotencyKey, KeyError, KeyHash};
pub use params::{ParamsError, ParamsLimits};
pub use principal::Principal;
