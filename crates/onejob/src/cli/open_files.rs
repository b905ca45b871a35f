//! The process's limit on open files. Every attempt in flight holds a connection to its
//! provider, every held gateway call one to its client: `onejob serve` and `onejob worker`
//! raise their soft limit to the hard one at start (as Go's runtime does), and say so when
//! even that is below what `[worker] concurrency` needs.

/// File descriptors a process needs beside one per attempt in flight: its database pool,
/// listeners, clients' connections, logs.
const HEADROOM: u64 = 256;

/// Raises the soft limit on open files to the hard limit; warns when the result leaves less
/// than `concurrency` connections plus [`HEADROOM`]. Logs, never fails: a process that cannot
/// raise it still runs (and fails a connection, not the node, when it runs out).
pub fn raise(concurrency: usize) {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(soft) => {
            let needed = concurrency as u64 + HEADROOM;
            if soft < needed {
                tracing::warn!(
                    open_files = soft,
                    needed,
                    "the limit on open files is below [worker] concurrency plus {HEADROOM}: \
                     raise it (ulimit -n; systemd's LimitNOFILE=) or lower the concurrency"
                );
            } else {
                tracing::debug!(open_files = soft, "limit on open files");
            }
        }
        Err(error) => {
            tracing::warn!(%error, "could not raise the limit on open files");
        }
    }
}
