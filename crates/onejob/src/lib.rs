//! onejob: one user intent, one job.
//!
//! A service (and this library under it) that sits between applications and slow, costly or
//! side-effecting upstreams. Clients submit a job under an idempotency key; every retry,
//! double click or recovery lands on that same job. The contract is `DESIGN.md`.
//!
//! Layout:
//! * [`onejob_domain`] (its own crate): states, keys, fingerprints; no I/O.
//! * [`store`]: the one storage trait, with PostgreSQL and SQLite beside each other.
//! * [`jobs`]: the use cases over a store (submit, read, cancel, retry, resolve, listings,
//!   certificates, health), answering typed domain errors.
//! * [`http`]: the HTTP API and the dashboard, a thin adapter over [`jobs`]: it never sees
//!   the store.
//! * [`config`] and [`kind`]: the TOML configuration and the compiled job kinds.
//! * [`api_key`]: issuing and checking API keys.
//! * [`fault`]: off-by-default fault injection for the fault suite (`ONEJOB_FAULT`).
//! * [`app`]: start-up; [`cli`]: the `onejob` command.

pub mod api_key;
pub mod app;
pub mod certification;
pub mod cli;
pub mod config;
pub mod fault;
pub mod gateway;
pub mod http;
pub mod jobs;
pub mod kind;
pub mod outcome;
pub mod provider;
pub mod store;
pub mod telemetry;
pub mod verify;
pub mod worker;
