//! Completions of jobs' only attempts on PostgreSQL, many in one statement that is its own
//! transaction ([`crate::store::backend::Backend::complete_only_attempts`]): the third
//! place, after intake and the first attempts' batch, where the PostgreSQL store writes a
//! rule in SQL of its own. It is the completion of nearly every job (one attempt, answered
//! by the worker that sent it), which the general rule (`transitions.rs`) writes as a
//! transaction of seven round trips (`BEGIN`, the job's lock, the attempt's state, the
//! compare-and-swap, the winner's end, the event, `COMMIT`): here it is one, and one commit
//! for every completion of a group.
//!
//! The guards are the general rule's, in the same order:
//!
//! * **The job's lock first** (`locked`, `FOR UPDATE`, the jobs in the order of their ids as
//!   every group takes them), with its conditions re-checked on the locked row (READ
//!   COMMITTED re-reads a row another transaction changed while this one waited): the job
//!   open (`running` or `unknown`), without a winner, and having had one attempt only (so
//!   there is no sibling to discard, and no second attempt racing this one). The job is the
//!   attempt's (read from the attempt: an attempt's job never changes), and a job two
//!   offers of the statement name is left to the general rule.
//! * **The attempt still open** when it is ended (`ended`: its `UPDATE` re-checks the state
//!   on the newest row, after the lock): an attempt an operator or the reconciler resolved
//!   (they hold the job's lock to do so) never wins afterwards, nor does a discarded one.
//! * **The compare-and-swap** of the job (`swapped`) only behind an attempt that ended
//!   here, under the lock taken above: one winner per job.
//!
//! An offer whose job or attempt fails a guard is left untouched (nothing of it is written)
//! and answered `false`: the general rule then decides it from scratch (a race lost, the
//! winner's own answer again, a job with several attempts).
//!
//! Each step's rows carry the offer on (`RETURNING` the columns the next step needs), so no
//! step joins two of the statement's own results: on [`at_once_pool`]'s sessions, which
//! allow neither hash nor merge joins, such a join is a nested loop over both, quadratic in
//! the group's size.

use std::{collections::HashSet, sync::Arc};

use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use super::{
    PgStore, Variant,
    connect::{Hosts, side_pool, tcp},
};
use crate::store::{
    StoreError,
    backend::{Dialect, fetch_all_on},
    grouped::{WRITERS, Writer},
    records::{storable, storable_text},
    transitions::OnlyAttempt,
};

/// The statement's text, as a macro so that a test can prepare it under a name
/// (`concat!`: SQL is never built by formatting).
macro_rules! complete_only_attempts_sql {
    () => {
        "\
    WITH offered AS (\
      SELECT o.attempt_id, o.output, o.actor, o.detail, a.job_id, a.tenant, \
      count(*) OVER (PARTITION BY a.job_id) AS offers \
      FROM unnest($1::uuid[], $2::jsonb[], $3::text[], $4::jsonb[]) \
      AS o (attempt_id, output, actor, detail) JOIN attempts a ON a.id = o.attempt_id\
    ), locked AS MATERIALIZED (\
      SELECT j.id AS job_id, o.attempt_id, o.output, o.actor, o.detail, o.tenant \
      FROM offered o JOIN jobs j ON j.id = o.job_id \
      WHERE o.offers = 1 AND j.attempts = 1 AND j.completed_by IS NULL \
      AND j.state IN ('running', 'unknown') \
      ORDER BY j.id FOR UPDATE OF j\
    ), ended AS (\
      UPDATE attempts a SET state = 'succeeded', finished_at = now(), \
      acknowledged_at = LEAST(a.acknowledged_at, \
      now() + CASE WHEN a.state = 'unknown' THEN NULL ELSE interval '0' END) \
      FROM locked l WHERE a.id = l.attempt_id AND a.tenant = l.tenant AND a.job_id = l.job_id \
      AND a.state IN ('starting', 'running', 'unknown') \
      RETURNING a.id, a.job_id, l.output, l.actor, l.detail, l.tenant\
    ), swapped AS (\
      UPDATE jobs j SET state = 'succeeded', result = e.output, completed_by = e.id, \
      error = NULL, version = j.version + 1, dispatch_at = NULL, updated_at = now() \
      FROM ended e WHERE j.id = e.job_id AND j.tenant = e.tenant \
      RETURNING e.id\
    ), logged AS (\
      INSERT INTO job_events (job_id, attempt_id, kind, actor, detail, tenant) \
      SELECT e.job_id, e.id, 'won', e.actor, e.detail, e.tenant \
      FROM ended e ORDER BY e.job_id\
    ) \
    SELECT s.id FROM swapped s"
    };
}

/// `$1` attempt ids, `$2` outputs, `$3` the `won` events' actors, `$4` their details → `id`
/// of each attempt that won.
const COMPLETE_ONLY_ATTEMPTS: &str = complete_only_attempts_sql!();

/// The sessions the statement runs on: one per group writer, each keeping one generic plan
/// of it, made of key lookups only ([`AT_ONCE_SESSIONS`]).
///
/// Under the default `auto` mode the planner, given the arrays' values, estimates a custom
/// plan for a group's one or two offers cheaper than the generic plan (which assumes ten
/// per array), and so plans the statement anew at most executions: 2,752 plans in 3,647
/// executions in a gateway run, at 0.58 ms each, as much as executing it (0.86 ms;
/// pg_stat_statements, bench/journal.md). A generic plan is kept for the session's life,
/// replanned only when a table is analyzed, and the statistics watch stops analyzing at
/// [`super::statistics::Watch::ENOUGH`] rows: made from the statistics of that many, the plan
/// the costs alone choose ends attempts through a sequential scan and a hash join (ten
/// lookups cost about what reading a thousand rows does), and would keep reading the whole
/// table as it grows. So these sessions leave the planner only key lookups; the test
/// `its_generic_plan_looks_every_row_up_by_its_key` checks the plan at that size and larger.
pub(super) fn at_once_pool(pool: &PgPool, hosts: Option<&Arc<Hosts>>) -> PgPool {
    side_pool(
        tcp::pool_options(),
        pool,
        hosts,
        WRITERS as u32,
        AT_ONCE_SESSIONS,
    )
}

/// The settings of [`at_once_pool`]'s sessions: one generic plan, kept, and that plan made
/// of key lookups only (no sequential scan, hash or merge join: every row the statement
/// touches it finds by its key, whatever the tables' size).
pub(super) const AT_ONCE_SESSIONS: &[(&str, &str)] = &[
    ("plan_cache_mode", "force_generic_plan"),
    ("enable_seqscan", "off"),
    ("enable_hashjoin", "off"),
    ("enable_mergejoin", "off"),
];

/// Offers each output as its attempt's job's result, in one statement (see the module doc);
/// whether each won. `None` on a distributed database (Citus), whose groups are written
/// tenant by tenant the general way.
pub(super) async fn complete_only_attempts(
    writer: &Writer<PgStore>,
    offers: &[OnlyAttempt<'_>],
) -> Result<Option<Vec<bool>>, StoreError> {
    match writer.variant() {
        Variant::Citus => return Ok(None),
        Variant::Single => {}
    }
    let attempts: Vec<Uuid> = offers.iter().map(|o| o.attempt_id).collect();
    let outputs: Vec<&Value> = offers.iter().map(|o| o.output).collect();
    let actors: Vec<_> = offers.iter().map(|o| o.actor.map(storable_text)).collect();
    let actors: Vec<Option<&str>> = actors.iter().map(|a| a.as_deref()).collect();
    // The `won` events' details, built here only: a hash of each output.
    let details: Vec<Value> = offers.iter().map(OnlyAttempt::won_detail).collect();
    let details: Vec<_> = details.iter().map(storable).collect();
    let details: Vec<&Value> = details.iter().map(|d| &**d).collect();
    let values = args![&attempts[..], &outputs[..], &actors[..], &details[..]];
    let rows = fetch_all_on::<PgStore>(
        writer.at_once_pool(),
        writer.bound(),
        COMPLETE_ONLY_ATTEMPTS,
        values,
    )
    .await?;
    let won = rows
        .iter()
        .map(|row| PgStore::uuid(row, "id"))
        .collect::<Result<HashSet<Uuid>, StoreError>>()?;
    Ok(Some(
        offers.iter().map(|o| won.contains(&o.attempt_id)).collect(),
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use sqlx::{Executor, PgPool, SqlSafeStr};
    use uuid::Uuid;

    use super::{COMPLETE_ONLY_ATTEMPTS, complete_only_attempts};
    use crate::store::{
        postgres::{
            as_at_once_session, assert_looks_up_by_keys, assert_no_key_gaps, fresh, group_writer,
        },
        transitions::OnlyAttempt,
    };

    /// The statement parses, names real columns and gets its parameters' types on the
    /// migrated schema.
    #[tokio::test]
    async fn the_statement_prepares_on_the_schema() {
        let (mut db, _) = fresh!("onejob_unit_only_attempts").await;
        if let Err(error) = (&mut db)
            .prepare(COMPLETE_ONLY_ATTEMPTS.into_sql_str())
            .await
        {
            panic!("the completion does not prepare: {error}");
        }
    }

    /// Running jobs with `attempts` attempts each in `state`; their attempt ids.
    async fn jobs(pool: &PgPool, state: &str, attempts: i32) -> Uuid {
        let job = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params, \
             state, attempts, version, dispatch_at) VALUES ($1, 'acme', 'alice', \
             sha256($1::text::bytea), 'chat', sha256('x'::bytea), '{}', 'running', $2, 1, NULL)",
        )
        .bind(job)
        .bind(attempts)
        .execute(pool)
        .await
        .unwrap();
        let mut last = Uuid::nil();
        for number in 1..=attempts {
            last = Uuid::now_v7();
            sqlx::query(
                "INSERT INTO attempts (id, job_id, number, provider, state, hedge, worker, \
                 lease_expires_at, deadline_at, upstream_key, tenant) VALUES ($1, $2, $3, 'p', \
                 'running', false, 'w', now() + interval '1 minute', \
                 now() + interval '1 minute', 'k' || $1::text, 'acme')",
            )
            .bind(last)
            .bind(job)
            .bind(number)
            .execute(pool)
            .await
            .unwrap();
        }
        if state != "running" {
            sqlx::query("UPDATE attempts SET state = $2, finished_at = now() WHERE id = $1")
                .bind(last)
                .bind(state)
                .execute(pool)
                .await
                .unwrap();
        }
        last
    }

    /// Each guard of the statement, offer by offer in one statement: only the open only
    /// attempt of an open job wins, once, with one event; an attempt already resolved, a
    /// job with a second attempt and an attempt offered twice in the statement are left
    /// untouched, for the general rule.
    #[tokio::test]
    async fn only_an_open_only_attempt_wins_and_the_rest_is_left_untouched() {
        let (_, options) = fresh!("onejob_unit_only_attempts_guards").await;
        let pool = PgPool::connect_with(options).await.unwrap();
        let writer = group_writer(&pool);
        let open = jobs(&pool, "running", 1).await;
        let resolved = jobs(&pool, "failed", 1).await;
        let second = jobs(&pool, "running", 2).await;
        let twice = jobs(&pool, "running", 1).await;
        let output = json!({"text": "x"});
        let offer = |attempt_id| OnlyAttempt {
            attempt_id,
            output: &output,
            actor: None,
            note: None,
        };
        let offers = [
            offer(open),
            offer(resolved),
            offer(second),
            offer(twice),
            offer(twice),
        ];
        let won = complete_only_attempts(&writer, &offers).await.unwrap();
        assert_eq!(won, Some(vec![true, false, false, false, false]));
        // Offered again: the winner is not written twice.
        let again = complete_only_attempts(&writer, &offers[..1]).await.unwrap();
        assert_eq!(again, Some(vec![false]));
        let count = |sql: &'static str| {
            let pool = pool.clone();
            async move {
                sqlx::query_scalar::<_, i64>(sql)
                    .fetch_one(&pool)
                    .await
                    .unwrap()
            }
        };
        assert_eq!(
            count("SELECT count(*) FROM job_events WHERE kind = 'won'").await,
            1
        );
        assert_eq!(
            count("SELECT count(*) FROM jobs WHERE state = 'succeeded'").await,
            1
        );
        assert_eq!(
            count("SELECT count(*) FROM attempts WHERE state = 'succeeded'").await,
            1
        );
        let winner: Option<Uuid> =
            sqlx::query_scalar("SELECT completed_by FROM jobs WHERE state = 'succeeded'")
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(winner, Some(open));
        // Its `won` event's detail is the general rule's: the output's size and hash, and
        // the note, built when the offer was bound.
        let detail: serde_json::Value =
            sqlx::query_scalar("SELECT detail FROM job_events WHERE kind = 'won'")
                .fetch_one(&pool)
                .await
                .unwrap();
        let mut expected = crate::store::payload_digest(&output);
        expected["note"] = serde_json::Value::Null;
        assert_eq!(detail, expected);
    }

    /// The plan of the statement the sessions of [`super::at_once_pool`] keep: its generic
    /// plan, made from the statistics of as many running jobs as the statistics watch has them
    /// analyzed up to (`Watch::ENOUGH`, after which it keeps its plans), and again of 5,000,
    /// looks each attempt and each job up by its key, never scanning a whole table (a
    /// sequential scan, or an index read without a condition on the id), and never joins two
    /// of its own steps' results by comparing every row of one with every row of the other. A
    /// kept plan that scanned would read every row of `attempts` and `jobs` for each group
    /// until the next `ANALYZE`. (On statistics of the empty tables, with rows since, the
    /// plan may read whole indexes until the statistics watch analyzes them and so replans
    /// it, [`super::super::statistics`]; the attempts it ends it still finds by their whole
    /// key: the plan the worked benchmark's first second ran ended each attempt through
    /// every entry of its tenant in `attempts_job_and_id`.)
    #[tokio::test]
    async fn its_generic_plan_looks_every_row_up_by_its_key() {
        let (mut db, _) = fresh!("onejob_unit_only_attempts_plan").await;
        db.execute(concat!(
            "PREPARE complete(uuid[], jsonb[], text[], jsonb[]) AS ",
            complete_only_attempts_sql!()
        ))
        .await
        .unwrap();
        as_at_once_session(&mut db).await;
        let enough = super::super::statistics::Watch::ENOUGH as i32;
        // First the statistics of the empty tables (an `ANALYZE` of the new schema), with 100
        // rows since: the state before the statistics watch analyzes them again.
        db.execute("ANALYZE jobs").await.unwrap();
        db.execute("ANALYZE attempts").await.unwrap();
        for (filled, from, to) in [
            (100, 1, 100),
            (enough, 101, enough),
            (5000, enough + 1, 5000),
        ] {
            {
                sqlx::query(
                    "INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params, \
                     state, attempts, version) SELECT gen_random_uuid(), 'acme', 'alice', \
                     sha256(i::text::bytea), 'chat', sha256('x'::bytea), '{}', 'running', 1, 1 \
                     FROM generate_series($1::int, $2::int) AS i",
                )
                .bind(from)
                .bind(to)
                .execute(&mut db)
                .await
                .unwrap();
                db.execute(
                    "INSERT INTO attempts (id, job_id, number, provider, state, hedge, worker, \
                     lease_expires_at, deadline_at, upstream_key, tenant) SELECT \
                     gen_random_uuid(), id, 1, 'p', 'running', false, 'w', now(), now(), \
                     'k' || id::text, 'acme' FROM jobs WHERE id NOT IN (SELECT job_id FROM attempts)",
                )
                .await
                .unwrap();
                if filled > 100 {
                    db.execute("ANALYZE jobs").await.unwrap();
                    db.execute("ANALYZE attempts").await.unwrap();
                    // (The ANALYZE replans the kept plan, with the statistics, at its next use.)
                }
            }
            let plan: Vec<String> = sqlx::query_scalar(
                "EXPLAIN EXECUTE complete(ARRAY[gen_random_uuid()], ARRAY['{}'::jsonb], \
                 ARRAY[NULL::text], ARRAY['{}'::jsonb])",
            )
            .fetch_all(&mut db)
            .await
            .unwrap();
            let (plan, what) = (plan.join("\n"), format!("filled {filled}"));
            if filled > 100 {
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
