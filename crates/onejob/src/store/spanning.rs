//! The reads that span every tenant (which jobs are due, which tenants hold live or unknown
//! attempts, whose leases lapsed, when the next job is due), and what a distributed
//! database's node down leaves of them. On Citus such a read runs on every shard and fails
//! as a whole when one worker node cannot be reached, which would stop every tenant's work
//! (and, for heartbeats, let the live nodes' attempts turn `unknown` once their leases ran
//! out) for one node's outage. So each has a second spelling, shard by shard ([`ByShard`]),
//! run when the read across the shards fails: it answers from the shards that can be
//! reached, and a node down costs only the tenants whose shards it holds.

use super::{
    StoreError,
    backend::{Arg, Backend, Row, read_all},
};

/// The reads spanning every tenant, each spelled shard by shard: the same parameters and
/// the same columns as the statement across the shards it stands in for (`sql.rs`'s field
/// of the same name), from the shards that answered.
#[derive(Debug)]
pub(crate) struct ByShard {
    /// The tenants of the due jobs that never had an attempt (Citus's first starts:
    /// `postgres/citus.rs`'s `DUE_FIRST`).
    pub(crate) due_first: &'static str,
    /// `due_jobs`.
    pub(crate) due_jobs: &'static str,
    /// `due_others`.
    pub(crate) due_others: &'static str,
    /// `live_tenants`.
    pub(crate) live_tenants: &'static str,
    /// `expired_attempts`.
    pub(crate) expired_attempts: &'static str,
    /// `unknown_due_tenants`.
    pub(crate) unknown_due_tenants: &'static str,
    /// `next_due_in`.
    pub(crate) next_due_in: &'static str,
}

/// Runs `sql`, a read across every tenant; where the store spells its reads shard by shard
/// too ([`Backend::by_shard`]) and `sql` fails, the read `by_shard` picks is run instead, on
/// the shards that answer. (An error that is not a node's, a bad statement say, fails the
/// second read too and is answered.)
pub(crate) async fn read_spanning<B: Backend>(
    store: &B,
    sql: &'static str,
    by_shard: fn(&ByShard) -> &'static str,
    args: &[Arg<'_>],
) -> Result<Vec<Row<B>>, StoreError> {
    match read_all(store, sql, args).await {
        Err(error) => match store.by_shard() {
            Some(reads) => {
                tracing::warn!(
                    error = %error,
                    "a read across the shards failed: reading it shard by shard"
                );
                read_all(store, by_shard(reads), args).await
            }
            None => Err(error),
        },
        read => read,
    }
}
