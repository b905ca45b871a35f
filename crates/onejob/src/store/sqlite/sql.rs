//! onejob's statements in SQLite's dialect (the table is described in `store/sql.rs`).
//!
//! Times are RFC 3339 UTC text with milliseconds (`now!()`), so they compare correctly as
//! strings; a duration is bound as seconds and becomes a `strftime` modifier here
//! (`later!`/`earlier!`). There are no row locks: a state change's write transaction holds
//! the database's one write lock (`BEGIN IMMEDIATE`), so a "lock" is a plain read that no
//! other writer, in this process or another, can interleave with.

use crate::store::{StoreError, sql::Sql};

/// The current time as onejob stores it.
macro_rules! now {
    () => {
        "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
    };
}

/// The current time plus the seconds bound at `$param`.
macro_rules! later {
    ($param:literal) => {
        concat!(
            "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('%+.3f seconds', ",
            $param,
            "))"
        )
    };
}

/// The current time minus the seconds bound at `$param`.
macro_rules! earlier {
    ($param:literal) => {
        concat!(
            "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('%+.3f seconds', -",
            $param,
            "))"
        )
    };
}

/// The lookup by key: `?1` tenant, `?2` user, `?3` key hash. It names the environment
/// (every job is in `'default'`, docs/design.md §2.10) so that the whole unique key
/// `(tenant, user_id, environment, key_hash)` is the index search, not only its owner
/// prefix.
macro_rules! job_by_key {
    () => {
        concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE tenant = ?1 AND user_id = ?2 AND environment = 'default' \
             AND key_hash = ?3"
        )
    };
}

/// The due jobs that never had an attempt, oldest first: `?1` limit, `?2` the kinds (a JSON
/// array) → `id, kind, tenant` (see `transitions::start_first_in_one_transaction`).
pub(super) const DUE_FIRST: &str = concat!(
    "SELECT id, kind, tenant FROM jobs WHERE dispatch_at <= ",
    now!(),
    " AND state = 'pending' AND attempts = 0 AND kind IN (SELECT value FROM json_each(?2)) \
     ORDER BY dispatch_at LIMIT ?1"
);

/// The statements.
pub(super) const SQL: Sql = Sql {
    ping: "SELECT 1",

    job_by_id: concat!("SELECT ", job_columns!(), " FROM jobs WHERE id = ?1"),
    owned_job: concat!(
        "SELECT ",
        job_columns!(),
        " FROM jobs WHERE id = ?1 AND tenant = ?2 AND user_id = ?3"
    ),
    lock_owned_job: concat!(
        "SELECT ",
        job_columns!(),
        " FROM jobs WHERE id = ?1 AND tenant = ?2 AND user_id = ?3"
    ),
    job_by_key: job_by_key!(),
    run_steps: concat!(
        "SELECT ",
        job_columns!(),
        " FROM jobs WHERE tenant = ?1 AND user_id = ?2 AND run_key = ?3 ORDER BY step"
    ),
    job_in_tenant: concat!(
        "SELECT ",
        job_columns!(),
        " FROM jobs WHERE id = ?1 AND tenant = ?2"
    ),
    job_exists: "SELECT EXISTS (SELECT 1 FROM jobs WHERE id = ?1) AS found",
    job_tenant: "SELECT tenant FROM jobs WHERE id = ?1",
    lock_job: "SELECT state, version, attempts, recoveries, completed_by FROM jobs \
               WHERE id = ?1 AND tenant = ?2",
    lock_due_job: concat!(
        "SELECT state, version, attempts, recoveries, completed_by, COALESCE(dispatch_at <= ",
        now!(),
        ", 0) AS due FROM jobs WHERE id = ?1 AND tenant = ?2"
    ),
    mark_job_started: concat!(
        "UPDATE jobs SET state = 'running', attempts = attempts + 1, version = version + 1, \
         dispatch_at = NULL, updated_at = ",
        now!(),
        " WHERE id = ?1 AND tenant = ?2"
    ),
    schedule_hedge: concat!(
        "UPDATE jobs SET dispatch_at = ",
        later!("?2"),
        ", version = version + 1, updated_at = ",
        now!(),
        " WHERE id = ?1 AND state = 'running' AND tenant = ?3"
    ),
    swap_result: concat!(
        "UPDATE jobs SET state = 'succeeded', result = ?3, completed_by = ?4, error = NULL, \
         version = version + 1, dispatch_at = NULL, updated_at = ",
        now!(),
        " WHERE id = ?1 AND version = ?2 AND completed_by IS NULL \
         AND state IN ('pending', 'running', 'unknown') AND tenant = ?5"
    ),
    set_job_state: concat!(
        "UPDATE jobs SET state = ?2, version = version + 1, updated_at = ",
        now!(),
        ", dispatch_at = CASE WHEN ?2 = 'pending' THEN ",
        later!("?3"),
        " ELSE NULL END, error = ?4 WHERE id = ?1 AND tenant = ?5"
    ),
    fail_job: concat!(
        "UPDATE jobs SET state = 'failed', dispatch_at = NULL, version = version + 1, \
         updated_at = ",
        now!(),
        ", error = ?2 WHERE id = ?1 AND tenant = ?3"
    ),
    cancel_job: concat!(
        "UPDATE jobs SET state = 'cancelled', dispatch_at = NULL, version = version + 1, \
         updated_at = ",
        now!(),
        " WHERE id = ?1 AND tenant = ?2"
    ),
    recover_job: concat!(
        "UPDATE jobs SET state = 'pending', error = NULL, recoveries = recoveries + 1, \
         dispatch_at = ",
        now!(),
        ", version = version + 1, updated_at = ",
        now!(),
        " WHERE id = ?1 AND tenant = ?2"
    ),

    job_of: "SELECT job_id, tenant FROM attempts WHERE id = ?1",
    attempt_tenant: "SELECT tenant FROM attempts WHERE id = ?1",
    job_of_in_tenant: "SELECT job_id, tenant FROM attempts WHERE id = ?1 AND tenant = ?2",
    jobs_of_in_tenants: "SELECT id, job_id, tenant FROM attempts \
                         WHERE id IN (SELECT value FROM json_each(?1)) \
                         AND tenant IN (SELECT value FROM json_each(?2))",
    jobs_of: "SELECT id, job_id, tenant FROM attempts WHERE id IN (SELECT value FROM json_each(?1))",
    attempt_state: "SELECT state FROM attempts WHERE id = ?1 AND tenant = ?2",
    open_attempts: "SELECT id, state FROM attempts WHERE job_id = ?1 AND tenant = ?2 \
                    AND state IN ('starting', 'running', 'unknown') ORDER BY number",
    attempt_states: "SELECT state FROM attempts WHERE job_id = ?1 AND tenant = ?2",
    live_attempts: concat!(
        "SELECT ",
        attempt_columns!(),
        " FROM attempts WHERE job_id = ?1 AND tenant = ?2 AND state IN ('starting', 'running') \
         ORDER BY number"
    ),
    job_attempts: concat!(
        "SELECT ",
        attempt_columns!(),
        " FROM attempts WHERE job_id = ?1 ORDER BY number"
    ),
    job_attempts_in_tenant: concat!(
        "SELECT ",
        attempt_columns!(),
        " FROM attempts WHERE job_id = ?1 AND tenant = ?2 ORDER BY number"
    ),
    attempt_in_tenant: concat!(
        "SELECT ",
        attempt_columns!(),
        " FROM attempts WHERE id = ?1 AND tenant = ?2"
    ),
    last_provider: "SELECT provider FROM attempts WHERE job_id = ?1 AND tenant = ?2 \
                    ORDER BY number DESC LIMIT 1",
    insert_attempt: concat!(
        "INSERT INTO attempts (id, job_id, number, provider, state, hedge, worker, \
         lease_expires_at, deadline_at, upstream_key, tenant) \
         VALUES (?1, ?2, ?3, ?4, 'starting', ?5, ?6, ",
        later!("?7"),
        ", ",
        later!("?8"),
        ", ?9, ?10) RETURNING ",
        attempt_columns!()
    ),
    keep_task_id: "UPDATE attempts SET task_id = COALESCE(task_id, ?2) WHERE id = ?1 \
                   AND tenant = ?3 \
                   RETURNING state",
    mark_running: concat!(
        "UPDATE attempts SET state = 'running', acknowledged_at = ",
        now!(),
        " WHERE id = ?1 AND tenant = ?2"
    ),
    cancel_acknowledged: concat!(
        "UPDATE attempts SET state = 'cancelled', key_spent = 1, acknowledged_at = ",
        now!(),
        ", finished_at = ",
        now!(),
        " WHERE id = ?1 AND tenant = ?2"
    ),
    discard_attempt: concat!(
        "UPDATE attempts SET state = 'discarded', finished_at = ",
        now!(),
        " WHERE id = ?1 AND tenant = ?2 AND state IN ('starting', 'running', 'unknown')"
    ),
    end_winner: concat!(
        "UPDATE attempts SET state = 'succeeded', finished_at = ",
        now!(),
        ", acknowledged_at = CASE WHEN state = 'unknown' THEN acknowledged_at \
         ELSE COALESCE(acknowledged_at, ",
        now!(),
        ") END",
        " WHERE id = ?1 AND tenant = ?2 AND state IN ('starting', 'running', 'unknown')"
    ),
    discard_unknown_siblings: concat!(
        "UPDATE attempts SET state = 'discarded', finished_at = ",
        now!(),
        " WHERE job_id = ?1 AND id <> ?2 AND state = 'unknown' AND tenant = ?3 RETURNING id"
    ),
    end_attempt: concat!(
        "UPDATE attempts SET state = ?2, error = ?3, key_spent = ?4, finished_at = ",
        now!(),
        " WHERE id = ?1 AND tenant = ?5"
    ),
    discard_live: concat!(
        "UPDATE attempts SET state = 'discarded', error = ?2, finished_at = ",
        now!(),
        " WHERE id = ?1 AND tenant = ?4 AND state IN ('starting', 'running') \
         AND (?3 IS NULL OR lease_expires_at < ",
        now!(),
        " OR deadline_at < ",
        earlier!("?3"),
        ")"
    ),
    make_unknown: concat!(
        "UPDATE attempts SET state = 'unknown', error = ?2, unknown_since = ",
        now!(),
        ", reconcile_at = ",
        now!(),
        " WHERE id = ?1 AND tenant = ?4 AND state IN ('starting', 'running') \
         AND (?3 IS NULL OR lease_expires_at < ",
        now!(),
        " OR deadline_at < ",
        earlier!("?3"),
        ")"
    ),
    cancel_unknown_attempts: concat!(
        "UPDATE attempts SET state = 'cancelled', finished_at = ",
        now!(),
        " WHERE job_id = ?1 AND tenant = ?2 AND state = 'unknown' RETURNING id"
    ),

    lock_jobs: "SELECT id, state, version, attempts, recoveries, completed_by FROM jobs \
                WHERE id IN (SELECT value FROM json_each(?1)) \
                AND tenant IN (SELECT value FROM json_each(?2)) ORDER BY id",
    attempt_states_of: "SELECT id, state FROM attempts \
                        WHERE id IN (SELECT value FROM json_each(?1)) \
                        AND tenant IN (SELECT value FROM json_each(?2))",
    keep_task_ids: "UPDATE attempts SET task_id = COALESCE(attempts.task_id, u.task_id) \
                    FROM (SELECT i.value AS id, t.value AS task_id FROM json_each(?1) i \
                    JOIN json_each(?2) t ON t.key = i.key) AS u WHERE attempts.id = u.id \
                    AND attempts.tenant IN (SELECT value FROM json_each(?3)) \
                    RETURNING attempts.id, attempts.state",
    mark_all_running: concat!(
        "UPDATE attempts SET state = 'running', acknowledged_at = ",
        now!(),
        " WHERE id IN (SELECT value FROM json_each(?1)) \
         AND tenant IN (SELECT value FROM json_each(?2))"
    ),
    swap_results: concat!(
        "UPDATE jobs SET state = 'succeeded', result = u.output, completed_by = u.attempt_id, \
         error = NULL, version = jobs.version + 1, dispatch_at = NULL, updated_at = ",
        now!(),
        " FROM (SELECT i.value AS id, v.value AS version, o.value AS output, \
         a.value AS attempt_id FROM json_each(?1) i JOIN json_each(?2) v ON v.key = i.key \
         JOIN json_each(?3) o ON o.key = i.key JOIN json_each(?4) a ON a.key = i.key) AS u \
         WHERE jobs.id = u.id AND jobs.version = u.version AND jobs.completed_by IS NULL \
         AND jobs.state IN ('pending', 'running', 'unknown') \
         AND jobs.tenant IN (SELECT value FROM json_each(?5)) RETURNING jobs.id"
    ),
    end_winners: concat!(
        "UPDATE attempts SET state = 'succeeded', finished_at = ",
        now!(),
        ", acknowledged_at = CASE WHEN state = 'unknown' THEN acknowledged_at \
         ELSE COALESCE(acknowledged_at, ",
        now!(),
        ") END",
        " WHERE id IN (SELECT value FROM json_each(?1)) \
         AND tenant IN (SELECT value FROM json_each(?2)) AND state IN ('starting', 'running', 'unknown')"
    ),
    discard_unknown_siblings_of: concat!(
        "UPDATE attempts SET state = 'discarded', finished_at = ",
        now!(),
        " FROM (SELECT j.value AS job_id, w.value AS winner FROM json_each(?1) j \
         JOIN json_each(?2) w ON w.key = j.key) AS u WHERE attempts.job_id = u.job_id \
         AND attempts.id <> u.winner AND attempts.state = 'unknown' \
         AND attempts.tenant IN (SELECT value FROM json_each(?3)) \
         RETURNING attempts.id, attempts.job_id"
    ),
    insert_events: "INSERT INTO job_events (job_id, attempt_id, kind, actor, detail, tenant) \
                    SELECT j.value, a.value, k.value, c.value, d.value, t.value \
                    FROM json_each(?1) j \
                    JOIN json_each(?2) a ON a.key = j.key JOIN json_each(?3) k ON k.key = j.key \
                    JOIN json_each(?4) c ON c.key = j.key JOIN json_each(?5) d ON d.key = j.key \
                    JOIN json_each(?6) t ON t.key = j.key ORDER BY j.key",
    insert_event: "INSERT INTO job_events (job_id, attempt_id, kind, actor, detail, tenant) \
                   VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    events_after: concat!(
        "SELECT ",
        event_columns!(),
        " FROM job_events WHERE job_id = ?1 AND tenant = ?4 AND (?2 IS NULL OR id > ?2) \
         ORDER BY id LIMIT ?3"
    ),

    due_jobs: concat!(
        "SELECT id, tenant FROM jobs WHERE dispatch_at <= ",
        now!(),
        " ORDER BY dispatch_at LIMIT ?1"
    ),
    due_others: concat!(
        "SELECT id, tenant FROM jobs WHERE dispatch_at <= ",
        now!(),
        " AND NOT (state = 'pending' AND attempts = 0 \
         AND kind IN (SELECT value FROM json_each(?2))) ORDER BY dispatch_at LIMIT ?1"
    ),
    owned_attempts: concat!(
        "SELECT a.id FROM attempts a JOIN jobs j ON j.id = a.job_id AND j.tenant = a.tenant \
         WHERE a.id IN (SELECT value FROM json_each(?1)) AND a.state = 'starting' \
         AND a.worker = ?2 AND a.lease_expires_at > ",
        later!("?3"),
        " AND (a.deadline_at IS NULL OR a.deadline_at > ",
        later!("?3"),
        ") AND j.state <> 'cancelled'"
    ),
    renew_leases: concat!(
        "UPDATE attempts SET lease_expires_at = ",
        later!("?2"),
        " WHERE worker = ?1 AND state IN ('starting', 'running')"
    ),
    live_tenants: "SELECT DISTINCT tenant FROM attempts WHERE worker = ?1 \
                   AND state IN ('starting', 'running')",
    renew_tenant_leases: concat!(
        "UPDATE attempts SET lease_expires_at = ",
        later!("?2"),
        " WHERE tenant = ?3 AND worker = ?1 AND state IN ('starting', 'running')"
    ),
    cancelled_leases: "SELECT a.id FROM attempts a \
                       JOIN jobs j ON j.id = a.job_id AND j.tenant = a.tenant \
                       WHERE a.worker = ?1 AND a.state IN ('starting', 'running') \
                       AND j.state = 'cancelled'",
    cancelled_tenant_leases: "SELECT a.id FROM attempts a \
                              JOIN jobs j ON j.id = a.job_id AND j.tenant = a.tenant \
                              WHERE a.tenant = ?2 AND a.worker = ?1 \
                              AND a.state IN ('starting', 'running') AND j.state = 'cancelled'",
    expired_attempts: concat!(
        "SELECT id, provider, tenant FROM attempts WHERE state IN ('starting', 'running') \
         AND (lease_expires_at < ",
        now!(),
        " OR deadline_at < ",
        earlier!("?1"),
        ") ORDER BY started_at LIMIT 100"
    ),
    claim_unknown: concat!(
        "UPDATE attempts SET reconcile_checks = reconcile_checks + 1, reconcile_at = ",
        later!("?2"),
        " WHERE id IN (SELECT id FROM attempts WHERE state = 'unknown' AND reconcile_at <= ",
        now!(),
        " ORDER BY reconcile_at LIMIT ?1) RETURNING ",
        attempt_columns!()
    ),
    unknown_due_tenants: concat!(
        "SELECT tenant FROM attempts WHERE state = 'unknown' AND reconcile_at <= ",
        now!(),
        " GROUP BY tenant ORDER BY min(reconcile_at) LIMIT ?1"
    ),
    lock_tenant_unknown: concat!(
        "SELECT id FROM attempts WHERE tenant = ?2 AND state = 'unknown' AND reconcile_at <= ",
        now!(),
        " ORDER BY reconcile_at LIMIT ?1"
    ),
    claim_locked_unknown: concat!(
        "UPDATE attempts SET reconcile_checks = reconcile_checks + 1, reconcile_at = ",
        later!("?2"),
        " WHERE tenant = ?3 AND id IN (SELECT value FROM json_each(?1)) RETURNING ",
        attempt_columns!()
    ),
    recheck_unknown_later: concat!(
        "UPDATE attempts SET reconcile_at = ",
        later!("MIN(?3 * (1 << MIN(MAX(reconcile_checks - 1, 0), 20)), ?4)"),
        " WHERE id = ?1 AND state = 'unknown' AND reconcile_checks = ?2"
    ),
    set_task_id: "UPDATE attempts SET task_id = ?2 WHERE id = ?1 AND task_id IS NULL",
    extend_deadline: concat!(
        "UPDATE attempts SET deadline_at = ",
        later!("?2"),
        " WHERE id = ?1 AND state IN ('starting', 'running')"
    ),
    defer_dispatch: concat!(
        "UPDATE jobs SET dispatch_at = ",
        later!("?3"),
        " WHERE id = ?1 AND version = ?2 AND dispatch_at IS NOT NULL"
    ),
    next_due_in: "SELECT (julianday(min(dispatch_at)) - julianday('now')) * 86400.0 AS seconds \
                  FROM jobs WHERE dispatch_at IS NOT NULL",

    list_jobs: concat!(
        "SELECT ",
        job_columns!(),
        " FROM jobs WHERE tenant = ?1 AND user_id = ?2 \
         AND (?3 IS NULL OR state = ?3) AND (?4 IS NULL OR kind = ?4) \
         AND (?5 IS NULL OR id < ?5) ORDER BY id DESC LIMIT ?6"
    ),
    list_attempts: concat!(
        "SELECT ",
        attempt_columns!(),
        " FROM attempts WHERE tenant = ?1 AND job_id IN (SELECT id FROM jobs WHERE tenant = ?1 \
         AND (?2 IS NULL OR user_id = ?2)) AND (?3 IS NULL OR state = ?3) \
         ORDER BY id DESC LIMIT ?4"
    ),
    recent_events: "SELECT e.id, e.job_id, e.attempt_id, e.kind, e.actor, e.detail, e.at \
                    FROM job_events e JOIN jobs j ON j.id = e.job_id AND j.tenant = e.tenant \
                    WHERE e.tenant = ?1 AND j.tenant = ?1 AND (?2 IS NULL OR j.user_id = ?2) \
                    AND (?3 IS NULL OR e.kind = ?3) ORDER BY e.id DESC LIMIT ?4",
    count_unknown: "SELECT COUNT(*) AS count FROM attempts WHERE state = 'unknown'",

    api_keys: concat!(
        "SELECT ",
        key_columns!(),
        " FROM api_keys ORDER BY created_at, id"
    ),
    revoke_api_key: concat!(
        "UPDATE api_keys SET revoked_at = ",
        now!(),
        " WHERE id = ?1 AND revoked_at IS NULL RETURNING ",
        key_columns!()
    ),
    api_key_summary: concat!("SELECT ", key_columns!(), " FROM api_keys WHERE id = ?1"),
    insert_api_key: "INSERT INTO api_keys (id, tenant, user_id, salt, secret_hash, operator) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    api_key: "SELECT id, tenant, user_id, salt, secret_hash, operator FROM api_keys \
              WHERE id = ?1 AND revoked_at IS NULL",

    insert_certificate: concat!(
        "INSERT INTO certificates (",
        certificate_columns!(),
        ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
    ),
    certificates: concat!(
        "SELECT ",
        certificate_columns!(),
        " FROM certificates ORDER BY created_at DESC, id DESC"
    ),
    certificates_page: concat!(
        "SELECT ",
        certificate_columns!(),
        " FROM certificates WHERE (?1 IS NULL OR id < ?1) ORDER BY id DESC LIMIT ?2"
    ),
};

/// How many migrations the database records as applied: 0 when it holds no onejob schema.
pub(super) async fn applied_migrations(pool: &sqlx::SqlitePool) -> Result<usize, StoreError> {
    let recorded: bool = sqlx::query_scalar(
        "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
    )
    .fetch_one(pool)
    .await?;
    if !recorded {
        return Ok(0);
    }
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(pool)
        .await?;
    Ok(usize::try_from(applied).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use sqlx::{Executor, SqlSafeStr};

    use super::{DUE_FIRST, SQL};
    use crate::store::sqlite::fresh;

    /// Every statement of the table parses and names real columns on the migrated schema,
    /// also those only rare paths run.
    #[tokio::test]
    async fn every_statement_prepares_on_the_schema() {
        let (_dir, store) = fresh().await;
        let mut db = store.pool().acquire().await.unwrap();
        for (name, sql) in SQL.each().into_iter().chain([("due_first", DUE_FIRST)]) {
            if let Err(error) = (&mut *db).prepare(sql.into_sql_str()).await {
                panic!("{name} does not prepare: {error}\n{sql}");
            }
        }
    }
}
