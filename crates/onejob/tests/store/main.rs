//! The store suite: every [`onejob::store::Store`] method, with its edge cases, on
//! PostgreSQL and on SQLite alike, straight through the trait (and raw SQL where only the
//! database can show an invariant). One file per noun of the store, as river's
//! `riverdrivertest` has: intake, attempts, lifecycle (cancel, recover, prune), dispatch,
//! listing, keys. A behaviour both backends must share is written once here, so drift
//! between them fails a test instead of going unseen.
//!
//! PostgreSQL is taken from `ONEJOB_TEST_POSTGRES` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`); each test gets a fresh database. A missing
//! PostgreSQL fails the tests: it is never skipped.

mod attempts;
mod batches;
mod dispatch;
mod intake;
mod keys;
mod lifecycle;
mod listing;
mod states;
mod support;
mod wedged;
