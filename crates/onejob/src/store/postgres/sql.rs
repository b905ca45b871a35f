//! onejob's statements in PostgreSQL's dialect (the table is described in `store/sql.rs`).
//!
//! A state change's exclusion is the job's row lock: `lock_job` takes `FOR UPDATE`, and a
//! start's `lock_due_job` takes `FOR UPDATE SKIP LOCKED`, so a second starter skips a job
//! another is starting instead of queueing behind it. Under READ COMMITTED each statement
//! after the lock sees what the previous holder committed. Typed NULLs (`$3::text IS NULL`)
//! tell the planner a parameter's type where only a NULL test names it. The heartbeat's
//! renewal skips the attempts another transaction is changing right now (`SKIP LOCKED`):
//! it never waits for a group of changes holding some of them, so the two never wait for
//! each other in a cycle, and those attempts are renewed by the next beat.
//!
//! The same statements run on Citus, which refuses a function that is not immutable inside
//! `CASE` or `COALESCE` of a write (it evaluates `now()` once, before the shard runs the
//! statement): `now()` stands outside them, `now() + CASE … ELSE NULL END` for a time that
//! may be NULL, and `LEAST(acknowledged_at, now() + …)` for "the acknowledgement time, or
//! now" (`LEAST` skips NULLs; an acknowledgement is never later than now). Nor may a
//! write combine `now()` with a column through a function that is not immutable (`+` of a
//! time and an interval is only stable): the reconciler's backoff, which grows with the
//! attempt's checks, is counted in seconds since the epoch (`to_timestamp`).

use crate::store::{StoreError, sql::Sql};

/// The statements.
pub(super) const SQL: Sql = Sql {
    ping: "SELECT 1",

    job_by_id: concat!("SELECT ", job_columns!(), " FROM jobs WHERE id = $1"),
    owned_job: concat!(
        "SELECT ",
        job_columns!(),
        " FROM jobs WHERE id = $1 AND tenant = $2 AND user_id = $3"
    ),
    lock_owned_job: concat!(
        "SELECT ",
        job_columns!(),
        " FROM jobs WHERE id = $1 AND tenant = $2 AND user_id = $3 FOR UPDATE"
    ),
    job_by_key: concat!(
        "SELECT ",
        job_columns!(),
        " FROM jobs WHERE tenant = $1 AND user_id = $2 AND key_hash = $3 \
         AND environment = 'default'"
    ),
    run_steps: concat!(
        "SELECT ",
        job_columns!(),
        " FROM jobs WHERE tenant = $1 AND user_id = $2 AND run_key = $3 ORDER BY step"
    ),
    job_in_tenant: concat!(
        "SELECT ",
        job_columns!(),
        " FROM jobs WHERE id = $1 AND tenant = $2"
    ),
    job_exists: "SELECT EXISTS (SELECT 1 FROM jobs WHERE id = $1) AS found",
    job_tenant: "SELECT tenant FROM jobs WHERE id = $1",
    lock_job: "SELECT state, version, attempts, recoveries, completed_by FROM jobs \
               WHERE id = $1 AND tenant = $2 FOR UPDATE",
    lock_due_job: "SELECT state, version, attempts, recoveries, completed_by, \
                   COALESCE(dispatch_at <= now(), false) AS due FROM jobs WHERE id = $1 \
                   AND tenant = $2 FOR UPDATE SKIP LOCKED",
    mark_job_started: "UPDATE jobs SET state = 'running', attempts = attempts + 1, \
                       version = version + 1, dispatch_at = NULL, updated_at = now() \
                       WHERE id = $1 AND tenant = $2",
    schedule_hedge: "UPDATE jobs SET dispatch_at = now() + make_interval(secs => $2), \
                     version = version + 1, updated_at = now() \
                     WHERE id = $1 AND state = 'running' AND tenant = $3",
    swap_result: "UPDATE jobs SET state = 'succeeded', result = $3, completed_by = $4, \
                  error = NULL, version = version + 1, dispatch_at = NULL, updated_at = now() \
                  WHERE id = $1 AND version = $2 AND completed_by IS NULL \
                  AND state IN ('pending', 'running', 'unknown') AND tenant = $5",
    set_job_state: "UPDATE jobs SET state = $2, version = version + 1, updated_at = now(), \
                    dispatch_at = now() + CASE WHEN $2 = 'pending' \
                    THEN make_interval(secs => $3) ELSE NULL END, \
                    error = $4 WHERE id = $1 AND tenant = $5",
    fail_job: "UPDATE jobs SET state = 'failed', dispatch_at = NULL, version = version + 1, \
               updated_at = now(), error = $2 WHERE id = $1 AND tenant = $3",
    cancel_job: "UPDATE jobs SET state = 'cancelled', dispatch_at = NULL, \
                 version = version + 1, updated_at = now() WHERE id = $1 AND tenant = $2",
    recover_job: "UPDATE jobs SET state = 'pending', error = NULL, recoveries = recoveries + 1, \
                  dispatch_at = now(), version = version + 1, updated_at = now() WHERE id = $1 \
                  AND tenant = $2",

    job_of: "SELECT job_id, tenant FROM attempts WHERE id = $1",
    attempt_tenant: "SELECT tenant FROM attempts WHERE id = $1",
    jobs_of: "SELECT id, job_id, tenant FROM attempts WHERE id = ANY($1)",
    job_of_in_tenant: "SELECT job_id, tenant FROM attempts WHERE id = $1 AND tenant = $2",
    jobs_of_in_tenants: "SELECT id, job_id, tenant FROM attempts WHERE id = ANY($1) \
                         AND tenant = ANY($2)",
    attempt_state: "SELECT state FROM attempts WHERE id = $1 AND tenant = $2",
    open_attempts: "SELECT id, state FROM attempts WHERE job_id = $1 AND tenant = $2 \
                    AND state IN ('starting', 'running', 'unknown') ORDER BY number",
    attempt_states: "SELECT state FROM attempts WHERE job_id = $1 AND tenant = $2",
    live_attempts: concat!(
        "SELECT ",
        attempt_columns!(),
        " FROM attempts WHERE job_id = $1 AND tenant = $2 AND state IN ('starting', 'running') \
         ORDER BY number"
    ),
    job_attempts: concat!(
        "SELECT ",
        attempt_columns!(),
        " FROM attempts WHERE tenant = (SELECT tenant FROM jobs WHERE id = $1) AND job_id = $1 \
         ORDER BY number"
    ),
    job_attempts_in_tenant: concat!(
        "SELECT ",
        attempt_columns!(),
        " FROM attempts WHERE job_id = $1 AND tenant = $2 ORDER BY number"
    ),
    attempt_in_tenant: concat!(
        "SELECT ",
        attempt_columns!(),
        " FROM attempts WHERE id = $1 AND tenant = $2"
    ),
    last_provider: "SELECT provider FROM attempts WHERE job_id = $1 AND tenant = $2 \
                    ORDER BY number DESC LIMIT 1",
    insert_attempt: concat!(
        "INSERT INTO attempts (id, job_id, number, provider, state, hedge, worker, \
         lease_expires_at, deadline_at, upstream_key, tenant) VALUES ($1, $2, $3, $4, 'starting', \
         $5, $6, now() + make_interval(secs => $7), now() + make_interval(secs => $8), $9, $10) \
         RETURNING ",
        attempt_columns!()
    ),
    keep_task_id: "UPDATE attempts SET task_id = COALESCE(task_id, $2) WHERE id = $1 \
                   AND tenant = $3 \
                   RETURNING state",
    mark_running: "UPDATE attempts SET state = 'running', acknowledged_at = now() \
                   WHERE id = $1 AND tenant = $2",
    cancel_acknowledged: "UPDATE attempts SET state = 'cancelled', key_spent = true, \
                          acknowledged_at = now(), finished_at = now() WHERE id = $1 \
                          AND tenant = $2",
    discard_attempt: "UPDATE attempts SET state = 'discarded', finished_at = now() \
                      WHERE id = $1 AND tenant = $2 AND state IN ('starting', 'running', 'unknown')",
    end_winner: "UPDATE attempts SET state = 'succeeded', finished_at = now(), \
                 acknowledged_at = LEAST(acknowledged_at, \
                 now() + CASE WHEN state = 'unknown' THEN NULL ELSE interval '0' END) \
                 WHERE id = $1 AND tenant = $2 AND state IN ('starting', 'running', 'unknown')",
    discard_unknown_siblings: "UPDATE attempts SET state = 'discarded', finished_at = now() \
                               WHERE job_id = $1 AND id <> $2 AND state = 'unknown' \
                               AND tenant = $3 RETURNING id",
    end_attempt: "UPDATE attempts SET state = $2, error = $3, key_spent = $4, \
                  finished_at = now() WHERE id = $1 AND tenant = $5",
    discard_live: "UPDATE attempts SET state = 'discarded', error = $2, finished_at = now() \
                   WHERE id = $1 AND tenant = $4 AND state IN ('starting', 'running') \
                   AND ($3::float8 IS NULL OR lease_expires_at < now() \
                   OR deadline_at < now() - make_interval(secs => $3))",
    make_unknown: "UPDATE attempts SET state = 'unknown', error = $2, unknown_since = now(), \
                   reconcile_at = now() WHERE id = $1 AND tenant = $4 AND state IN ('starting', 'running') \
                   AND ($3::float8 IS NULL OR lease_expires_at < now() \
                   OR deadline_at < now() - make_interval(secs => $3))",
    cancel_unknown_attempts: "UPDATE attempts SET state = 'cancelled', finished_at = now() \
                              WHERE job_id = $1 AND tenant = $2 AND state = 'unknown' RETURNING id",

    lock_jobs: "SELECT id, state, version, attempts, recoveries, completed_by FROM jobs \
                WHERE id = ANY($1) AND tenant = ANY($2) ORDER BY id FOR UPDATE",
    attempt_states_of: "SELECT id, state FROM attempts WHERE id = ANY($1) \
                        AND tenant = ANY($2)",
    keep_task_ids: "UPDATE attempts a SET task_id = COALESCE(a.task_id, u.task_id) \
                    FROM unnest($1::uuid[], $2::text[]) AS u (id, task_id) WHERE a.id = u.id \
                    AND a.tenant = ANY($3) \
                    RETURNING a.id, a.state",
    mark_all_running: "UPDATE attempts SET state = 'running', acknowledged_at = now() \
                       WHERE id = ANY($1) AND tenant = ANY($2)",
    swap_results: "UPDATE jobs j SET state = 'succeeded', result = u.output, \
                   completed_by = u.attempt_id, error = NULL, version = j.version + 1, \
                   dispatch_at = NULL, updated_at = now() \
                   FROM unnest($1::uuid[], $2::int8[], $3::jsonb[], $4::uuid[]) \
                   AS u (id, version, output, attempt_id) \
                   WHERE j.id = u.id AND j.version = u.version AND j.completed_by IS NULL \
                   AND j.state IN ('pending', 'running', 'unknown') AND j.tenant = ANY($5) RETURNING j.id",
    end_winners: "UPDATE attempts SET state = 'succeeded', finished_at = now(), \
                  acknowledged_at = LEAST(acknowledged_at, \
                  now() + CASE WHEN state = 'unknown' THEN NULL ELSE interval '0' END) \
                  WHERE id = ANY($1) AND tenant = ANY($2) \
                  AND state IN ('starting', 'running', 'unknown')",
    discard_unknown_siblings_of: "UPDATE attempts a SET state = 'discarded', finished_at = now() \
                                  FROM unnest($1::uuid[], $2::uuid[]) AS u (job_id, winner) \
                                  WHERE a.job_id = u.job_id AND a.id <> u.winner \
                                  AND a.state = 'unknown' AND a.tenant = ANY($3) \
                                  RETURNING a.id, a.job_id",
    insert_events: "INSERT INTO job_events (job_id, attempt_id, kind, actor, detail, tenant) \
                    SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], \
                    $5::jsonb[], $6::text[])",
    insert_event: "INSERT INTO job_events (job_id, attempt_id, kind, actor, detail, tenant) \
                   VALUES ($1, $2, $3, $4, $5, $6)",
    events_after: concat!(
        "SELECT ",
        event_columns!(),
        " FROM job_events WHERE job_id = $1 AND tenant = $4 AND ($2::bigint IS NULL OR id > $2) \
         ORDER BY id LIMIT $3"
    ),

    due_jobs: "SELECT id, tenant FROM jobs WHERE dispatch_at <= now() ORDER BY dispatch_at LIMIT $1",
    due_others: "SELECT id, tenant FROM jobs WHERE dispatch_at <= now() \
                 AND NOT (state = 'pending' AND attempts = 0 AND kind = ANY($2)) \
                 ORDER BY dispatch_at LIMIT $1",
    owned_attempts: "SELECT a.id FROM attempts a \
                     JOIN jobs j ON j.id = a.job_id AND j.tenant = a.tenant \
                     WHERE a.id = ANY($1) AND a.state = 'starting' AND a.worker = $2 \
                     AND a.lease_expires_at > now() + make_interval(secs => $3) \
                     AND (a.deadline_at IS NULL \
                          OR a.deadline_at > now() + make_interval(secs => $3)) \
                     AND j.state <> 'cancelled'",
    renew_leases: "UPDATE attempts SET lease_expires_at = now() + make_interval(secs => $2) \
                   WHERE id IN (SELECT id FROM attempts WHERE worker = $1 \
                   AND state IN ('starting', 'running') FOR UPDATE SKIP LOCKED)",
    live_tenants: "SELECT DISTINCT tenant FROM attempts WHERE worker = $1 \
                   AND state IN ('starting', 'running') ORDER BY tenant",
    renew_tenant_leases: "UPDATE attempts SET lease_expires_at = now() + make_interval(secs => $2) \
                          WHERE tenant = $3 AND id IN (SELECT id FROM attempts WHERE tenant = $3 \
                          AND worker = $1 AND state IN ('starting', 'running') \
                          FOR UPDATE SKIP LOCKED)",
    cancelled_leases: "SELECT a.id FROM attempts a \
                       JOIN jobs j ON j.id = a.job_id AND j.tenant = a.tenant \
                       WHERE a.worker = $1 AND a.state IN ('starting', 'running') \
                       AND j.state = 'cancelled'",
    cancelled_tenant_leases: "SELECT a.id FROM attempts a \
                              JOIN jobs j ON j.id = a.job_id AND j.tenant = a.tenant \
                              WHERE a.tenant = $2 AND j.tenant = $2 AND a.worker = $1 \
                              AND a.state IN ('starting', 'running') AND j.state = 'cancelled'",
    expired_attempts: "SELECT id, provider, tenant FROM attempts WHERE state IN ('starting', 'running') \
                       AND (lease_expires_at < now() \
                       OR deadline_at < now() - make_interval(secs => $1)) \
                       ORDER BY started_at LIMIT 100",
    claim_unknown: concat!(
        "UPDATE attempts SET reconcile_checks = reconcile_checks + 1, \
         reconcile_at = now() + make_interval(secs => $2) \
         WHERE id IN (SELECT id FROM attempts WHERE state = 'unknown' AND reconcile_at <= now() \
         ORDER BY reconcile_at LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING ",
        attempt_columns!()
    ),
    unknown_due_tenants: "SELECT tenant FROM attempts WHERE state = 'unknown' \
                          AND reconcile_at <= now() GROUP BY tenant ORDER BY min(reconcile_at) \
                          LIMIT $1",
    lock_tenant_unknown: "SELECT id FROM attempts WHERE tenant = $2 AND state = 'unknown' \
                          AND reconcile_at <= now() ORDER BY reconcile_at LIMIT $1 \
                          FOR UPDATE SKIP LOCKED",
    claim_locked_unknown: concat!(
        "UPDATE attempts SET reconcile_checks = reconcile_checks + 1, \
         reconcile_at = now() + make_interval(secs => $2) \
         WHERE tenant = $3 AND id = ANY($1) RETURNING ",
        attempt_columns!()
    ),
    recheck_unknown_later: "UPDATE attempts SET reconcile_at = to_timestamp(extract(epoch FROM now()) \
         + LEAST($3 * power(2, LEAST(GREATEST(reconcile_checks - 1, 0), 20)), $4)) \
         WHERE id = $1 AND state = 'unknown' AND reconcile_checks = $2",
    set_task_id: "UPDATE attempts SET task_id = $2 WHERE id = $1 AND task_id IS NULL",
    extend_deadline: "UPDATE attempts SET deadline_at = now() + make_interval(secs => $2) \
                      WHERE id = $1 AND state IN ('starting', 'running')",
    defer_dispatch: "UPDATE jobs SET dispatch_at = now() + make_interval(secs => $3) \
                     WHERE id = $1 AND version = $2 AND dispatch_at IS NOT NULL",
    next_due_in: "SELECT EXTRACT(EPOCH FROM (min(dispatch_at) - now()))::float8 AS seconds \
                  FROM jobs WHERE dispatch_at IS NOT NULL",

    list_jobs: concat!(
        "SELECT ",
        job_columns!(),
        " FROM jobs WHERE tenant = $1 AND user_id = $2 \
         AND ($3::text IS NULL OR state = $3) AND ($4::text IS NULL OR kind = $4) \
         AND ($5::uuid IS NULL OR id < $5) ORDER BY id DESC LIMIT $6"
    ),
    list_attempts: concat!(
        "SELECT ",
        attempt_columns!(),
        " FROM attempts WHERE tenant = $1 AND job_id IN (SELECT id FROM jobs WHERE tenant = $1 \
         AND ($2::text IS NULL OR user_id = $2)) AND ($3::text IS NULL OR state = $3) \
         ORDER BY id DESC LIMIT $4"
    ),
    recent_events: "SELECT e.id, e.job_id, e.attempt_id, e.kind, e.actor, e.detail, e.at \
                    FROM job_events e JOIN jobs j ON j.id = e.job_id AND j.tenant = e.tenant \
                    WHERE e.tenant = $1 AND j.tenant = $1 AND ($2::text IS NULL OR j.user_id = $2) \
                    AND ($3::text IS NULL OR e.kind = $3) ORDER BY e.id DESC LIMIT $4",
    count_unknown: "SELECT COUNT(*) AS count FROM attempts WHERE state = 'unknown'",

    api_keys: concat!(
        "SELECT ",
        key_columns!(),
        " FROM api_keys ORDER BY created_at, id"
    ),
    revoke_api_key: concat!(
        "UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL RETURNING ",
        key_columns!()
    ),
    api_key_summary: concat!("SELECT ", key_columns!(), " FROM api_keys WHERE id = $1"),
    insert_api_key: "INSERT INTO api_keys (id, tenant, user_id, salt, secret_hash, operator) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
    api_key: "SELECT id, tenant, user_id, salt, secret_hash, operator FROM api_keys \
              WHERE id = $1 AND revoked_at IS NULL",

    insert_certificate: concat!(
        "INSERT INTO certificates (",
        certificate_columns!(),
        ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
    ),
    certificates: concat!(
        "SELECT ",
        certificate_columns!(),
        " FROM certificates ORDER BY created_at DESC, id DESC"
    ),
    certificates_page: concat!(
        "SELECT ",
        certificate_columns!(),
        " FROM certificates WHERE ($1::uuid IS NULL OR id < $1) ORDER BY id DESC LIMIT $2"
    ),
};

/// How many migrations the database records as applied: 0 when it holds no onejob schema.
pub(super) async fn applied_migrations(pool: &sqlx::PgPool) -> Result<usize, StoreError> {
    let recorded: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
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

    use super::SQL;
    use crate::store::postgres::fresh;

    /// Every statement of the table parses, names real columns and gets its parameters'
    /// types on the migrated schema, also those only rare paths run.
    #[tokio::test]
    async fn every_statement_prepares_on_the_schema() {
        let (mut db, _) = fresh!("onejob_unit_statements").await;
        for (name, sql) in SQL.each() {
            if let Err(error) = (&mut db).prepare(sql.into_sql_str()).await {
                panic!("{name} does not prepare: {error}\n{sql}");
            }
        }
    }
}
