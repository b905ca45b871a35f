//! Acknowledgements of attempts still `starting` on PostgreSQL, many in one statement that
//! is its own transaction ([`crate::store::backend::Backend::acknowledge_starting`]): the
//! acknowledgement of nearly every request to a slow provider (a synchronous request in
//! flight longer than the worker's acknowledgement delay, no task id, no hedge waiting on
//! it), which the general rule (`transitions.rs`) writes as a transaction of five round
//! trips (`BEGIN`, the attempts' jobs, the jobs' locks, the attempts' states, the update,
//! `COMMIT`): here it is one.
//!
//! The guards are the general rule's, in the same order: **the job's lock first**
//! (`locked`, `FOR UPDATE`, the jobs in the order of their ids as every group takes them),
//! so that a cancellation either committed before (and the attempt is left to the general
//! rule, which ends it `cancelled`) or waits until the attempt is `running`; then **the
//! attempt still `starting`** (the `UPDATE` re-checks it on the newest row, after the lock).
//! An attempt that fails a guard, or whose job another acknowledgement of the statement
//! names, is left untouched and answered `false`: the general rule then decides it.
//!
//! Each step's rows carry what the next needs, so no step joins two of the statement's own
//! results (on the sessions it runs on, which allow neither hash nor merge joins, such a
//! join is a nested loop over both, quadratic in the group).

use std::collections::HashSet;

use uuid::Uuid;

use super::{PgStore, Variant};
use crate::store::{
    StoreError,
    backend::{Dialect, fetch_all_on},
    grouped::Writer,
};

/// The statement's text, as a macro so that a test can prepare it under a name
/// (`concat!`: SQL is never built by formatting).
macro_rules! acknowledge_starting_sql {
    () => {
        "\
    WITH offered AS (\
      SELECT o.attempt_id, a.job_id, a.tenant, count(*) OVER (PARTITION BY a.job_id) AS offers \
      FROM unnest($1::uuid[]) AS o (attempt_id) JOIN attempts a ON a.id = o.attempt_id\
    ), locked AS MATERIALIZED (\
      SELECT o.attempt_id, o.job_id, o.tenant FROM offered o \
      JOIN jobs j ON j.id = o.job_id AND j.tenant = o.tenant \
      WHERE o.offers = 1 AND j.state <> 'cancelled' \
      ORDER BY j.id FOR UPDATE OF j\
    ) \
    UPDATE attempts a SET state = 'running', acknowledged_at = now() \
    FROM locked l WHERE a.id = l.attempt_id AND a.tenant = l.tenant AND a.job_id = l.job_id \
    AND a.state = 'starting' \
    RETURNING a.id"
    };
}

/// `$1` attempt ids → `id` of each attempt that became `running`.
const ACKNOWLEDGE_STARTING: &str = acknowledge_starting_sql!();

/// Acknowledges each attempt, in one statement (see the module doc); whether each became
/// `running`. `None` on a distributed database (Citus), whose groups are written tenant by
/// tenant the general way.
pub(super) async fn acknowledge_starting(
    writer: &Writer<PgStore>,
    attempts: &[Uuid],
) -> Result<Option<Vec<bool>>, StoreError> {
    match writer.variant() {
        Variant::Citus => return Ok(None),
        Variant::Single => {}
    }
    let rows = fetch_all_on::<PgStore>(
        writer.at_once_pool(),
        writer.bound(),
        ACKNOWLEDGE_STARTING,
        args![attempts],
    )
    .await?;
    let running = rows
        .iter()
        .map(|row| PgStore::uuid(row, "id"))
        .collect::<Result<HashSet<Uuid>, StoreError>>()?;
    Ok(Some(attempts.iter().map(|a| running.contains(a)).collect()))
}

#[cfg(test)]
mod tests {
    use sqlx::{Executor, PgPool};
    use uuid::Uuid;

    use super::acknowledge_starting;
    use crate::store::postgres::{
        as_at_once_session, assert_looks_up_by_keys, assert_no_key_gaps, fresh, group_writer,
    };

    /// A job in `job_state` with one attempt per state of `attempts`; their ids.
    async fn job(pool: &PgPool, job_state: &str, attempts: &[&str]) -> Vec<Uuid> {
        let job = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params, \
             state, attempts, version, dispatch_at) VALUES ($1, 'acme', 'alice', \
             sha256($1::text::bytea), 'chat', sha256('x'::bytea), '{}', $2, $3, 1, NULL)",
        )
        .bind(job)
        .bind(job_state)
        .bind(attempts.len() as i32)
        .execute(pool)
        .await
        .unwrap();
        let mut ids = Vec::new();
        for (number, state) in attempts.iter().enumerate() {
            let id = Uuid::now_v7();
            sqlx::query(
                "INSERT INTO attempts (id, job_id, number, provider, state, hedge, worker, \
                 lease_expires_at, deadline_at, upstream_key, tenant) VALUES ($1, $2, $3, 'p', \
                 $4, false, 'w', now() + interval '1 minute', \
                 now() + interval '1 minute', 'k' || $1::text, 'acme')",
            )
            .bind(id)
            .bind(job)
            .bind(number as i32 + 1)
            .bind(state)
            .execute(pool)
            .await
            .unwrap();
            ids.push(id);
        }
        ids
    }

    async fn state(pool: &PgPool, attempt: Uuid) -> (String, bool) {
        sqlx::query_as("SELECT state, acknowledged_at IS NOT NULL FROM attempts WHERE id = $1")
            .bind(attempt)
            .fetch_one(pool)
            .await
            .unwrap()
    }

    /// Each guard, attempt by attempt in one statement: only a `starting` attempt of a job
    /// not cancelled becomes `running`; an attempt of a cancelled job, one no longer
    /// `starting`, two attempts of one job and an attempt that does not exist are left
    /// untouched, for the general rule.
    #[tokio::test]
    async fn only_a_starting_attempt_of_a_live_job_runs_and_the_rest_is_left_untouched() {
        let (_, options) = fresh!("onejob_unit_acknowledge_starting").await;
        let pool = PgPool::connect_with(options).await.unwrap();
        let writer = group_writer(&pool);
        let starting = job(&pool, "running", &["starting"]).await[0];
        let cancelled = job(&pool, "cancelled", &["starting"]).await[0];
        let unknown = job(&pool, "unknown", &["unknown"]).await[0];
        let running = job(&pool, "running", &["running"]).await[0];
        let hedged = job(&pool, "running", &["running", "starting"]).await;
        let missing = Uuid::now_v7();
        let acks = [
            starting, cancelled, unknown, running, hedged[0], hedged[1], missing,
        ];
        let ran = acknowledge_starting(&writer, &acks).await.unwrap().unwrap();
        assert_eq!(ran, [true, false, false, false, false, false, false]);
        assert_eq!(state(&pool, starting).await, ("running".into(), true));
        assert_eq!(state(&pool, cancelled).await, ("starting".into(), false));
        assert_eq!(state(&pool, unknown).await, ("unknown".into(), false));
        assert_eq!(state(&pool, hedged[1]).await, ("starting".into(), false));
        // Again: it is `running` now, and left to the general rule.
        let again = acknowledge_starting(&writer, &[starting]).await.unwrap();
        assert_eq!(again, Some(vec![false]));
    }

    /// A cancellation that commits while the statement waits on the job's lock is seen by
    /// it: the lock re-reads the job's newest row (PostgreSQL's `READ COMMITTED` re-check of
    /// a row updated while it waited) and the attempt is left `starting`, for the general
    /// rule to end it `cancelled`, never made `running` for a job that was cancelled first.
    #[tokio::test]
    async fn a_cancellation_committed_while_it_waits_on_the_job_is_seen() {
        let (mut db, options) = fresh!("onejob_unit_acknowledge_starting_race").await;
        let pool = PgPool::connect_with(options).await.unwrap();
        let writer = group_writer(&pool);
        let attempt = job(&pool, "running", &["starting"]).await[0];
        let mut canceller = sqlx::Connection::begin(&mut db).await.unwrap();
        sqlx::query(
            "UPDATE jobs SET state = 'cancelled', version = version + 1 \
             WHERE id = (SELECT job_id FROM attempts WHERE id = $1)",
        )
        .bind(attempt)
        .execute(&mut *canceller)
        .await
        .unwrap();
        let acknowledging = tokio::spawn({
            let writer = writer.clone();
            async move { acknowledge_starting(&writer, &[attempt]).await }
        });
        // Until the statement waits on the job's lock, the canceller's.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND wait_event_type = 'Lock' AND query LIKE '%FOR UPDATE OF j%'",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
            if waiting == 1 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the statement never waited on the job's lock"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        canceller.commit().await.unwrap();
        let ran = acknowledging.await.unwrap().unwrap();
        assert_eq!(ran, Some(vec![false]));
        assert_eq!(state(&pool, attempt).await, ("starting".into(), false));
    }

    /// The plan the sessions of the at-once pool keep, made from the statistics of as many
    /// running jobs as the statistics watch has them analyzed up to (`Watch::ENOUGH`, after
    /// which it keeps its plans) and again of 5,000, looks each attempt and each job up by
    /// its key (never a whole table, nor an index read without a condition on the id), and
    /// joins none of its own steps' results by comparing every row of one with every row of
    /// the other. Before that, on statistics of the empty tables with rows since (until the
    /// watch analyzes them), it finds the attempts it updates by their whole key.
    #[tokio::test]
    async fn its_generic_plan_looks_every_row_up_by_its_key() {
        let (mut db, options) = fresh!("onejob_unit_acknowledge_starting_plan").await;
        let pool = PgPool::connect_with(options).await.unwrap();
        as_at_once_session(&mut db).await;
        db.execute(concat!(
            "PREPARE acknowledge(uuid[]) AS ",
            acknowledge_starting_sql!()
        ))
        .await
        .unwrap();
        let enough = super::super::statistics::Watch::ENOUGH;
        // First the statistics of the empty tables (an `ANALYZE` of the new schema), with 100
        // rows since: the state before the statistics watch analyzes them again.
        db.execute("ANALYZE jobs").await.unwrap();
        db.execute("ANALYZE attempts").await.unwrap();
        let mut filled = 0;
        for size in [100, enough, 5000] {
            while filled < size {
                job(&pool, "running", &["starting"]).await;
                filled += 1;
            }
            if size > 100 {
                db.execute("ANALYZE jobs").await.unwrap();
                db.execute("ANALYZE attempts").await.unwrap();
            }
            let plan: Vec<String> =
                sqlx::query_scalar("EXPLAIN EXECUTE acknowledge(ARRAY[gen_random_uuid()])")
                    .fetch_all(&mut db)
                    .await
                    .unwrap();
            let (plan, what) = (plan.join("\n"), format!("filled {filled}"));
            if size > 100 {
                assert_looks_up_by_keys(&mut db, &plan, &what).await;
            } else {
                // Until then the plan may read whole indexes (the watch's `ANALYZE` replans
                // it), but the attempts it writes it finds by their whole key, never through
                // every entry of their tenant.
                assert_no_key_gaps(&mut db, &plan, Some("attempts"), &what).await;
            }
        }
    }
}
