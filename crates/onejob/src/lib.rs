//! onejob: one user intent, one job.
//!
//! A service (and this library under it) that sits between applications and slow, costly or
//! side-effecting upstreams. Clients submit a job under an idempotency key; every retry,
//! double click or recovery lands on that same job. The design it follows is
//! `docs/design.md`.
//!
//! Layout (one concept per module):
//! * [`onejob_domain`] (its own crate): keys, fingerprints, params limits, job and attempt
//!   states, event kinds; no I/O.
//! * [`store`]: one `Store` trait (jobs and their intake) over supertraits by noun
//!   (transitions, dispatch, keys, listings, certificates, retention), their rules written
//!   once over a narrow per-database interface: a SQL dialect (`store/dialect.rs`) and a
//!   backend that runs it (`store/backend.rs`), with the runtime services every store holds
//!   made once (`store/engine.rs`; group commit in `grouped.rs` and `batch.rs`), the
//!   statements and state changes written once (`statements.rs`, `transitions.rs`), and
//!   `store/postgres/` (Citus a variant of it, `Variant` in `store/dialect.rs`; its
//!   connections from the `onejob-pg-connect` crate, its pools in `store/postgres/connect/`)
//!   and `store/sqlite/` beside each other.
//! * [`jobs`]: the use cases over a store (submit, read, cancel, retry, resolve, listings,
//!   certificates recorded and read, API keys, health), answering typed domain errors; every
//!   adapter (HTTP, gateway, CLI) stands on it and never on the store, except start-up
//!   ([`app`]: opening, migrating and checking a database). [`outcome`]: recording how an
//!   attempt ended, for the worker, the reconciler and operators alike.
//! * [`worker`]: the worker loop, the next attempt's plan, leases, the reconciler, held
//!   answers and retention's pruning pass. It is the one caller that talks to the store
//!   directly ([`store::Transitions`], [`store::Dispatch`]), not through [`jobs`], on
//!   purpose: its calls are not requests to validate and refuse with a typed error but the
//!   engine's own moves on attempts it holds under lease (claim due work, start, extend,
//!   acknowledge, complete, fail, mark unknown, wait for work), batched and ordered by the
//!   loop for throughput. What it shares with the use cases it reaches through the same
//!   code: [`outcome`] for how an attempt ended, and `Certified::load`
//!   (`jobs/certificates.rs`) for which providers are certified.
//! * [`provider`]: the provider trait and the `openai-chat`, `async-task` and `fake`
//!   adapters; [`verify`] and [`certification`]: contract runs and the rules of the
//!   certificates that gate failover (pure: recording and loading them is in [`jobs`]).
//! * [`gateway`]: the OpenAI-compatible gateway's domain (chat requests as jobs, stored
//!   completions, live streams).
//! * [`http`]: the HTTP API, the gateway's routes and the dashboard (`http/ui/`), a thin
//!   adapter over [`jobs`]: it never sees the store.
//! * [`config`] and [`kind`]: the TOML configuration and the compiled job kinds;
//!   [`api_key`]: issuing and checking API keys; [`telemetry`]: the Prometheus metrics.
//! * [`fault`]: off-by-default fault injection for the fault suite (`ONEJOB_FAULT`).
//! * [`app`]: start-up; [`cli`]: the `onejob` command, one file per subcommand.

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
