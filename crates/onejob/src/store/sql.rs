//! The statements a backend spells in its own SQL: one field per statement, with the
//! parameters it binds and the columns it returns, which the code written once relies on.
//!
//! Both backends fill this table (`postgres/sql.rs`, `sqlite/sql.rs`), so the two spellings
//! of each statement can be read side by side. What a statement means is the same in both;
//! the dialects differ in the clock (`now()` against `strftime`), in intervals
//! (`make_interval` against `strftime` modifiers, both bound as seconds), in typed NULLs
//! (`$3::text IS NULL`) and in locking (`FOR UPDATE [SKIP LOCKED]` on PostgreSQL, nothing on
//! SQLite, whose write transactions hold the database's one write lock).

/// The columns of a job, as [`super::rows::job`] reads them.
macro_rules! job_columns {
    () => {
        "id, tenant, user_id, key_hash, kind, fingerprint, params, state, version, attempts, \
         recoveries, completed_by, result, error, created_at, updated_at, request_body, run_key, \
         step"
    };
}

/// The columns of an attempt, as [`super::rows::attempt`] reads them.
macro_rules! attempt_columns {
    () => {
        "id, job_id, number, provider, state, hedge, task_id, worker, lease_expires_at, \
         deadline_at, started_at, acknowledged_at, finished_at, unknown_since, upstream_key, \
         key_spent, error, reconcile_checks"
    };
}

/// The columns of an event, as [`super::rows::event`] reads them.
macro_rules! event_columns {
    () => {
        "id, job_id, attempt_id, kind, actor, detail, at"
    };
}

/// The columns of an API key's summary, as [`super::rows::key_summary`] reads them.
macro_rules! key_columns {
    () => {
        "id, tenant, user_id, operator, created_at, revoked_at"
    };
}

/// The columns of a certificate, as [`super::rows::certificate`] reads them.
macro_rules! certificate_columns {
    () => {
        "id, provider, kind, template_hash, schema_hash, settings_hash, passed, report, created_at"
    };
}

/// The columns a new attempt is inserted with, in the order of [`first_attempt_values!`].
macro_rules! new_attempt_columns {
    () => {
        "id, job_id, number, provider, state, hedge, worker, lease_expires_at, deadline_at, \
         upstream_key, tenant"
    };
}

/// PostgreSQL's values of a job's first attempt, in the order of [`new_attempt_columns!`],
/// from SQL expressions of its id, its job's id, its provider, its worker, its lease and its
/// timeout (seconds) and its tenant: number 1, `starting`, no hedge, the upstream key
/// `onejob:<job id>`. Written once for PostgreSQL's three statements that start first
/// attempts by the batch (intake's, the batch of first starts', Citus's per tenant).
macro_rules! first_attempt_values {
    ($id:literal, $job:literal, $provider:literal, $worker:literal, $lease:literal,
     $timeout:literal, $tenant:literal) => {
        concat!(
            $id,
            ", ",
            $job,
            ", 1, ",
            $provider,
            ", 'starting', false, ",
            $worker,
            ", now() + make_interval(secs => ",
            $lease,
            "), now() + make_interval(secs => ",
            $timeout,
            "), 'onejob:' || ",
            $job,
            ", ",
            $tenant
        )
    };
}

/// PostgreSQL's detail of an `attempt_started` event from SQL expressions of the attempt's
/// number, provider and whether it hedges: what the store's other paths write from Rust
/// (`records.rs`, `transitions.rs`).
macro_rules! attempt_started_detail {
    ($number:literal, $provider:literal, $hedge:literal) => {
        concat!(
            "jsonb_build_object('number', ",
            $number,
            ", 'provider', ",
            $provider,
            ", 'hedge', ",
            $hedge,
            ")"
        )
    };
}

/// Declares [`Sql`] with its fields, and (for tests) the list of all of them.
macro_rules! statements {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// One backend's statements (see the module doc). "Job columns", "attempt columns"
        /// and so on name the column lists above; a duration binds as seconds.
        #[derive(Debug, Clone, Copy)]
        pub(crate) struct Sql {
            $($(#[$doc])* pub $name: &'static str,)*
        }

        #[cfg(test)]
        impl Sql {
            /// Every statement, by name.
            pub(crate) fn each(&self) -> Vec<(&'static str, &'static str)> {
                vec![$((stringify!($name), self.$name)),*]
            }
        }
    };
}

statements! {
    /// Checks that the database answers.
    ping,

    // Jobs.
    /// `$1` job id → job columns.
    job_by_id,
    /// `$1` job id, `$2` tenant, `$3` user → job columns.
    owned_job,
    /// As `owned_job`, locking the job (waiting for other holders).
    lock_owned_job,
    /// `$1` tenant, `$2` user, `$3` key hash → job columns, searching the whole unique key.
    job_by_key,
    /// `$1` tenant, `$2` user, `$3` a run's key hash → job columns of the run's later steps,
    /// in step order.
    run_steps,
    /// `$1` job id, `$2` tenant → job columns.
    job_in_tenant,
    /// `$1` job id → `found`.
    job_exists,
    /// `$1` job id → `tenant` (the only lookup of a job by its id alone inside a change; a
    /// distributed database runs it on every shard, every later statement on one).
    job_tenant,
    /// `$1` job id, `$2` tenant → `state, version, attempts, recoveries, completed_by`,
    /// locking the job (waiting for other holders).
    lock_job,
    /// `$1` job id, `$2` tenant → the same and `due`, locking the job unless another transaction holds it
    /// (then no row).
    lock_due_job,
    /// `$1` job id, `$2` tenant: the job is `running` with one more attempt, not due.
    mark_job_started,
    /// `$1` job id, `$2` seconds, `$3` tenant: a `running` job becomes due again then, for a hedge.
    schedule_hedge,
    /// `$1` job id, `$2` version, `$3` output, `$4` attempt id, `$5` tenant: the result's compare-and-swap;
    /// changes one row only if the job is at that version, open and without a winner.
    swap_result,
    /// `$1` job id, `$2` state, `$3` backoff seconds, `$4` error or NULL, `$5` tenant: the job's
    /// recomputed state, due after the backoff when `pending`, version bumped.
    set_job_state,
    /// `$1` job id, `$2` error, `$3` tenant: the job ends `failed`.
    fail_job,
    /// `$1` job id, `$2` tenant: the job ends `cancelled`, not due.
    cancel_job,
    /// `$1` job id, `$2` tenant: a failed job is `pending` again, due now, in a new recovery generation.
    recover_job,

    // Attempts.
    /// `$1` attempt id → `job_id, tenant`.
    job_of,
    /// `$1` attempt id → `tenant`.
    attempt_tenant,
    /// `$1` attempt id, `$2` tenant → `job_id, tenant`: `job_of` when the tenant is known.
    job_of_in_tenant,
    /// `$1` attempt ids, `$2` tenants → `id, job_id, tenant` of each: `jobs_of` when the
    /// tenants are known.
    jobs_of_in_tenants,
    /// `$1` attempt ids → `id, job_id, tenant` of each.
    jobs_of,
    /// `$1` attempt id, `$2` tenant → `state`.
    attempt_state,
    /// `$1` job id, `$2` tenant → `id, state` of its `starting`, `running` and `unknown` attempts, oldest
    /// first.
    open_attempts,
    /// `$1` job id, `$2` tenant → `state` of each of its attempts.
    attempt_states,
    /// `$1` job id, `$2` tenant → attempt columns of its `starting` and `running` attempts, oldest first.
    live_attempts,
    /// `$1` job id → attempt columns of all its attempts, oldest first.
    job_attempts,
    /// `$1` job id, `$2` tenant → the same, for the job's owner.
    job_attempts_in_tenant,
    /// `$1` attempt id, `$2` tenant → attempt columns.
    attempt_in_tenant,
    /// `$1` job id, `$2` tenant → `provider` of its latest attempt.
    last_provider,
    /// `$1` attempt id, `$2` job id, `$3` number, `$4` provider, `$5` hedge, `$6` worker,
    /// `$7` lease seconds, `$8` timeout seconds, `$9` upstream key, `$10` the job's tenant →
    /// attempt columns of the
    /// new `starting` attempt, its lease and deadline counted from the database's clock.
    insert_attempt,
    /// `$1` attempt id, `$2` task id or NULL, `$3` tenant → `state`; a task id already stored is kept.
    keep_task_id,
    /// `$1` attempt id, `$2` tenant: the acknowledged attempt is `running`.
    mark_running,
    /// `$1` attempt id, `$2` tenant: acknowledged after its job was cancelled, it ends `cancelled`, its key
    /// spent.
    cancel_acknowledged,
    /// `$1` attempt id, `$2` tenant: an open attempt ends `discarded`.
    discard_attempt,
    /// `$1` attempt id, `$2` tenant: the winner, if still open, ends `succeeded`; a live one (not
    /// `unknown`) not acknowledged before is acknowledged by its answer.
    end_winner,
    /// `$1` job id, `$2` winner, `$3` tenant → `id` of each other `unknown` attempt, now `discarded`.
    discard_unknown_siblings,
    /// `$1` attempt id, `$2` state, `$3` error, `$4` key spent, `$5` tenant: the attempt ends.
    end_attempt,
    /// `$1` attempt id, `$2` error, `$3` grace seconds or NULL, `$4` tenant: a live attempt ends
    /// `discarded` if there is no grace (its own worker) or its lease is still expired (or
    /// its deadline more than the grace past).
    discard_live,
    /// `$1` attempt id, `$2` why, `$3` grace seconds or NULL, `$4` tenant: a live attempt becomes
    /// `unknown`, due for reconciliation now, on the same condition as `discard_live`.
    make_unknown,
    /// `$1` job id, `$2` tenant → `id` of each `unknown` attempt of the job, now `cancelled`.
    cancel_unknown_attempts,

    // Groups: the same changes for many jobs or attempts at once (`grouped.rs`). Lists are
    // bound as arrays (PostgreSQL) or JSON arrays (SQLite), the n-th elements together. Each
    // also takes the group's tenants, so that on a distributed database a group of one
    // shard's tenants runs on that shard alone (`grouped.rs`).
    /// `$1` job ids, `$2` tenants → `id, state, version, attempts, recoveries, completed_by` of each,
    /// locking them in the order of their ids (waiting for other holders).
    lock_jobs,
    /// `$1` attempt ids, `$2` tenants → `id, state` of each.
    attempt_states_of,
    /// `$1` attempt ids, `$2` task ids or NULLs, `$3` tenants → `id, state` of each; a task id already
    /// stored is kept.
    keep_task_ids,
    /// `$1` attempt ids, `$2` tenants: each acknowledged attempt is `running`.
    mark_all_running,
    /// `$1` job ids, `$2` versions, `$3` outputs, `$4` attempt ids, `$5` tenants → `id` of each job whose
    /// compare-and-swap went through (as `swap_result`, job by job).
    swap_results,
    /// `$1` attempt ids, `$2` tenants → the winners, those still open, end `succeeded`.
    end_winners,
    /// `$1` job ids, `$2` their winners, `$3` tenants → `id, job_id` of each other `unknown` attempt of
    /// those jobs, now `discarded`.
    discard_unknown_siblings_of,
    /// `$1` job ids, `$2` attempt ids or NULLs, `$3` kinds, `$4` actors or NULLs, `$5`
    /// details, `$6` the jobs' tenants: one event each.
    insert_events,

    // Events.
    /// `$1` job id, `$2` attempt id or NULL, `$3` kind, `$4` actor or NULL, `$5` detail, `$6`
    /// the job's tenant.
    insert_event,
    /// `$1` job id, `$2` last event id seen or NULL, `$3` limit, `$4` tenant → event columns, oldest
    /// first.
    events_after,

    // Dispatch.
    /// `$1` limit → `id, tenant` of jobs due now, oldest dispatch time first.
    due_jobs,
    /// `$1` limit, `$2` kinds → the same, leaving out new jobs of those kinds (`pending`,
    /// never attempted), which batches of first attempts start.
    due_others,
    /// `$1` attempt ids, `$2` worker, `$3` margin seconds → `id` of each the worker holds,
    /// `starting`, with at least the margin of lease left and of its deadline, its job not
    /// cancelled.
    owned_attempts,
    /// `$1` worker, `$2` lease seconds: renews the lease of its live attempts (on PostgreSQL
    /// those no other transaction holds right now).
    renew_leases,
    /// `$1` worker → `tenant` of each tenant it holds live attempts of.
    live_tenants,
    /// `$1` worker, `$2` lease seconds, `$3` tenant: `renew_leases` for that tenant's
    /// attempts alone (on a distributed database, run tenant by tenant on each one's shard).
    renew_tenant_leases,
    /// `$1` worker → `id` of its live attempts whose job was cancelled.
    cancelled_leases,
    /// `$1` worker, `$2` tenant: `cancelled_leases` for that tenant's attempts alone.
    cancelled_tenant_leases,
    /// `$1` grace seconds → `id, provider, tenant` of live attempts whose lease expired or whose
    /// deadline passed more than the grace ago.
    expired_attempts,
    /// `$1` limit, `$2` lease seconds → attempt columns of `unknown` attempts due for
    /// reconciliation, each one's check counted and its next check pushed back by the lease.
    claim_unknown,
    /// `$1` most tenants → `tenant` of each with `unknown` attempts due for reconciliation,
    /// the longest due first.
    unknown_due_tenants,
    /// `$1` limit, `$2` tenant → `id` of that tenant's `unknown` attempts due for
    /// reconciliation, oldest due first, locked unless another transaction holds them: the
    /// first half of `claim_unknown` for one tenant (on a distributed database, run tenant
    /// by tenant on each one's shard).
    lock_tenant_unknown,
    /// `$1` attempt ids, `$2` lease seconds, `$3` tenant → attempt columns, each one's check
    /// counted and its next check pushed back by the lease: the second half.
    claim_locked_unknown,
    /// `$1` attempt id, `$2` its check count as claimed, `$3` backoff seconds, `$4` most
    /// seconds: its next check after a backoff doubling with each check, if it is still
    /// `unknown` and nobody claimed it since.
    recheck_unknown_later,
    /// `$1` attempt id, `$2` task id: stored unless one is.
    set_task_id,
    /// `$1` attempt id, `$2` seconds: a live attempt's deadline moves to that long from now.
    extend_deadline,
    /// `$1` job id, `$2` version, `$3` seconds: a due job's dispatch time moves on, if the job
    /// is still at that version.
    defer_dispatch,
    /// → `seconds` until the earliest dispatch time (negative when due), NULL if none.
    next_due_in,

    // Listings.
    /// `$1` tenant, `$2` user, `$3` state or NULL, `$4` kind or NULL, `$5` job id below which
    /// to list or NULL, `$6` limit → job columns, newest first.
    list_jobs,
    /// `$1` tenant, `$2` user or NULL, `$3` state or NULL, `$4` limit → attempt columns,
    /// newest first.
    list_attempts,
    /// `$1` tenant, `$2` user or NULL, `$3` kind or NULL, `$4` limit → event columns, newest
    /// first.
    recent_events,
    /// → `count` of `unknown` attempts.
    count_unknown,

    // API keys.
    /// → key columns of every key, oldest first.
    api_keys,
    /// `$1` key id → key columns; revokes the key unless it is revoked.
    revoke_api_key,
    /// `$1` key id → key columns.
    api_key_summary,
    /// `$1` key id, `$2` tenant, `$3` user, `$4` salt, `$5` secret hash, `$6` operator.
    insert_api_key,
    /// `$1` key id → `id, tenant, user_id, salt, secret_hash, operator` of a key not revoked.
    api_key,

    // Certificates.
    /// `$1` … `$9`: certificate columns, in order.
    insert_certificate,
    /// → certificate columns of every run, newest first.
    certificates,
    /// `$1` id below which to list or NULL, `$2` limit → certificate columns, newest first.
    certificates_page,
}
