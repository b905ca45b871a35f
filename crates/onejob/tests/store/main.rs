//! The store suite: every [`onejob::store::Store`] method, with its edge cases, on
//! PostgreSQL, SQLite and Citus alike, straight through the trait (and raw SQL where only the
//! database can show an invariant). One file per noun of the store, as river's
//! `riverdrivertest` has: intake, attempts, lifecycle (cancel, recover, prune), dispatch,
//! listing, keys. A behaviour both backends must share is written once here, so drift
//! between them fails a test instead of going unseen.
//!
//! Every body runs three times: on PostgreSQL, on SQLite and on a Citus cluster (the job
//! tables distributed by tenant over two worker nodes).
//!
//! PostgreSQL is taken from `ONEJOB_TEST_POSTGRES` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`); each test gets a fresh database. The Citus
//! cluster is this test process's own (`onejob_chaos::citus`: a coordinator and two workers
//! from the PostgreSQL server binaries, Citus loaded), started by the first test that needs
//! it; each test gets a fresh database on it. A missing PostgreSQL or Citus fails the tests:
//! they are never skipped.

mod attempts;
mod batches;
mod citus;
mod dispatch;
mod intake;
mod keys;
mod lifecycle;
mod listing;
mod states;
mod support;
mod wedged;
