//! onejob's fault suite: it proves that nothing is lost or run twice when onejob nodes
//! race, workers die mid-attempt, the database restarts and clients misbehave.
//!
//! The scenarios are the `chaos` test binary (`tests/chaos/`, run by `chaos/run.sh`); this
//! library is what they are built from, and the offline checker:
//!
//! * [`node`]: the real `onejob` binary as child processes (`serve`, `worker`), killed and
//!   restarted;
//! * [`postgres`]: a fresh database on the shared PostgreSQL, or a throwaway cluster of our
//!   own that may be restarted;
//! * [`citus`]: a local Citus cluster (a coordinator and worker nodes) of our own;
//! * [`client`]: a client that records every request and answer into a [`history`], and
//!   plays callers that go away mid-call;
//! * [`readback`]: the final read-back of every job and of the fake providers' side effects;
//! * [`checker`]: the offline checker of DESIGN §2 over a history (also the
//!   `onejob-chaos-check` binary);
//! * [`scale`]: quick (CI) or full (`RELIABILITY.md`) sizes;
//! * [`slownet`]: a slow network in front of a provider, which loses the requests it holds
//!   when their sender dies.

#![warn(missing_docs)]

pub mod checker;
pub mod citus;
pub mod client;
pub mod history;
pub mod node;
pub mod postgres;
pub mod readback;
pub mod scale;
pub mod slownet;
