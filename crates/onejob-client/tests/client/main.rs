//! onejob-client against a real onejob: the server runs in-process on a loopback port (its
//! demo kinds on the bundled fake providers, so jobs really run), on a SQLite file and, for
//! the submission tests, on a fresh PostgreSQL database too. The resend paths run against a
//! small stub server that answers `503` first.

mod clients_page;
mod lifecycle;
mod listing;
mod resend;
mod server;
mod statuses;
mod submit;
mod wait;
