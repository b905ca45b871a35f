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

use std::collections::HashSet;

use serde_json::Value;
use uuid::Uuid;

use super::{PgStore, Variant};
use crate::store::{
    StoreError,
    backend::{Dialect, write_all_on},
    grouped::Writer,
    records::{storable, storable_text},
    transitions::OnlyAttempt,
};

/// `$1` attempt ids, `$2` outputs, `$3` the `won` events' actors, `$4` their details → `id`
/// of each attempt that won.
const COMPLETE_ONLY_ATTEMPTS: &str = "\
    WITH offered AS (\
      SELECT o.attempt_id, o.output, o.actor, o.detail, a.job_id, a.tenant, \
      count(*) OVER (PARTITION BY a.job_id) AS offers \
      FROM unnest($1::uuid[], $2::jsonb[], $3::text[], $4::jsonb[]) \
      AS o (attempt_id, output, actor, detail) JOIN attempts a ON a.id = o.attempt_id\
    ), alone AS (\
      SELECT * FROM offered WHERE offers = 1\
    ), locked AS MATERIALIZED (\
      SELECT j.id FROM jobs j WHERE j.id IN (SELECT job_id FROM alone) \
      AND j.attempts = 1 AND j.completed_by IS NULL AND j.state IN ('running', 'unknown') \
      ORDER BY j.id FOR UPDATE OF j\
    ), ended AS (\
      UPDATE attempts a SET state = 'succeeded', finished_at = now(), \
      acknowledged_at = LEAST(a.acknowledged_at, \
      now() + CASE WHEN a.state = 'unknown' THEN NULL ELSE interval '0' END) \
      FROM alone o JOIN locked l ON l.id = o.job_id \
      WHERE a.id = o.attempt_id AND a.tenant = o.tenant \
      AND a.state IN ('starting', 'running', 'unknown') \
      RETURNING a.id, a.job_id\
    ), swapped AS (\
      UPDATE jobs j SET state = 'succeeded', result = o.output, completed_by = o.attempt_id, \
      error = NULL, version = j.version + 1, dispatch_at = NULL, updated_at = now() \
      FROM ended e JOIN alone o ON o.attempt_id = e.id \
      WHERE j.id = e.job_id AND j.tenant = o.tenant \
      RETURNING j.id\
    ), logged AS (\
      INSERT INTO job_events (job_id, attempt_id, kind, actor, detail, tenant) \
      SELECT o.job_id, o.attempt_id, 'won', o.actor, o.detail, o.tenant \
      FROM ended e JOIN alone o ON o.attempt_id = e.id ORDER BY o.job_id\
    ) \
    SELECT e.id FROM ended e JOIN swapped s ON s.id = e.job_id";

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
    let details: Vec<_> = offers.iter().map(|o| storable(&o.detail)).collect();
    let details: Vec<&Value> = details.iter().map(|d| &**d).collect();
    let values = args![&attempts[..], &outputs[..], &actors[..], &details[..]];
    let rows = write_all_on::<PgStore>(
        writer.pool(),
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

    use super::{COMPLETE_ONLY_ATTEMPTS, Variant, complete_only_attempts};
    use crate::store::{
        bound::{Bound, WRITE_TIMEOUT},
        grouped::Writer,
        postgres::{PgStore, fresh},
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
        let writer = Writer::<PgStore>::new(
            pool.clone(),
            Bound::within(WRITE_TIMEOUT),
            None,
            Variant::Single,
        );
        let open = jobs(&pool, "running", 1).await;
        let resolved = jobs(&pool, "failed", 1).await;
        let second = jobs(&pool, "running", 2).await;
        let twice = jobs(&pool, "running", 1).await;
        let output = json!({"text": "x"});
        let offer = |attempt_id| OnlyAttempt {
            attempt_id,
            output: &output,
            actor: None,
            detail: json!({}),
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
    }
}
