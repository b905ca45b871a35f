//! Black-box tests of onejob: a real server on a loopback port, a real PostgreSQL and a real
//! SQLite file, the same test bodies run against each (see [`helpers::Backend`]).
//!
//! The invariant tests (intake, isolation, and the worker's run-once tests) also run on a
//! Citus cluster of the test process's own (`citus_tests!`: a coordinator and two workers).
//!
//! PostgreSQL is taken from `ONEJOB_TEST_POSTGRES` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`); each test gets a fresh database. A missing
//! PostgreSQL or Citus fails the tests: they are never skipped.

mod attempts;
mod bad_input;
mod cli;
mod cli_client;
mod cli_page;
mod config_check;
mod deployment;
mod discovery;
mod docs;
mod endpoints;
mod examples;
mod gateway;
mod helpers;
mod intake;
mod isolation;
mod keys;
mod logs;
mod metrics;
mod online_migration;
mod openai_schemas;
mod openapi;
mod openapi_client;
mod paging;
mod probes;
mod proof;
mod providers;
mod readme;
mod recovery;
mod release;
mod retention;
mod runs;
mod sdk;
mod slow_clients;
mod tls;
mod ui;
mod upstream;
mod vanished;
mod worker;
