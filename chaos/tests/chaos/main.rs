//! The fault scenarios, each against real `onejob` processes, a real PostgreSQL and the fake
//! provider, each recorded as a history and checked offline ([`onejob_chaos::checker`]).
//!
//! They are `#[ignore]`d in a plain `cargo test --workspace` (they take minutes and start
//! and kill processes); `chaos/run.sh [--quick|--full]` runs them, one at a time. Histories
//! and reports go to `$ONEJOB_CHAOS_OUT` (default `chaos/out/`).

mod citus;
mod crash;
mod failover;
mod fairness;
mod harness;
mod killstorm;
mod prune;
mod restart;
mod storm;
mod vanished;
mod wedged;
