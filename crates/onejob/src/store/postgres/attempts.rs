//! Attempts on PostgreSQL: the guarded start, acknowledgement, heartbeats, and the three
//! ways an attempt ends (won or discarded by compare-and-swap, failed, unknown).
//!
//! The attempt guard is the job's row lock. `start` takes `SELECT … FOR UPDATE SKIP LOCKED`
//! on the job, so two starters never interleave: the second either skips the locked row
//! (`Busy`) or, after the first committed, reads its `starting` attempt in a fresh
//! READ COMMITTED snapshot and is refused. A conditional `INSERT … WHERE NOT EXISTS` alone
//! would not do: two transactions could both see no blocking attempt. The partial unique
//! index `attempts_one_starting` and `UNIQUE (job_id, number)` back the lock structurally.

use std::time::Duration;

use onejob_domain::{AttemptState, EventKind, JobState};
use serde_json::{Value, json};
use sqlx::{PgPool, Postgres, Transaction, types::Json};
use uuid::Uuid;

use super::{PgAttemptRow, insert_event};
use crate::store::{
    Acknowledged, AttemptRecord, AttemptStart, Completion, FailOutcome, NewEvent, Resolution,
    RetryPolicy, StartOutcome, StartRefusal, StoreError, UnknownBy, Unsuccessful, payload_digest,
    records::{Exhausted, sibling_discarded, storable, storable_text, with_member, within_budget},
    release,
};

/// How many times a completion re-reads the job when its version moved for another reason.
const CAS_ROUNDS: usize = 16;

fn secs(duration: Duration) -> f64 {
    duration.as_secs_f64()
}

fn parse_state<T: std::str::FromStr>(text: &str) -> Result<T, StoreError>
where
    T::Err: std::fmt::Display,
{
    text.parse::<T>()
        .map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn event(job_id: Uuid, attempt_id: Uuid, kind: EventKind, detail: Value) -> NewEvent {
    NewEvent {
        job_id,
        attempt_id: Some(attempt_id),
        kind,
        actor: None,
        detail,
    }
}

pub(super) async fn start(pool: &PgPool, start: &AttemptStart) -> Result<StartOutcome, StoreError> {
    let mut tx = pool.begin().await?;
    let job: Option<(String, i32, i32, bool)> = sqlx::query_as(
        "SELECT state, attempts, recoveries, COALESCE(dispatch_at <= now(), false) FROM jobs \
         WHERE id = $1 FOR UPDATE SKIP LOCKED",
    )
    .bind(start.job_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((state, attempts, recoveries, due)) = job else {
        let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM jobs WHERE id = $1)")
            .bind(start.job_id)
            .fetch_one(&mut *tx)
            .await?;
        return release(
            tx,
            StartOutcome::Refused(if exists {
                StartRefusal::Busy
            } else {
                StartRefusal::NotFound
            }),
        )
        .await;
    };
    let state: JobState = parse_state(&state)?;
    if state.is_terminal() || !due {
        return release(tx, StartOutcome::Refused(StartRefusal::NotDue(state))).await;
    }
    if attempts != start.expected_attempts {
        return release(tx, StartOutcome::Refused(StartRefusal::Stale)).await;
    }
    if !within_budget(attempts, recoveries, start.max_attempts) {
        return release(tx, StartOutcome::Refused(StartRefusal::Exhausted)).await;
    }
    let open: Vec<(Uuid, String)> = sqlx::query_as(
        "SELECT id, state FROM attempts WHERE job_id = $1 \
         AND state IN ('starting', 'running', 'unknown') ORDER BY number",
    )
    .bind(start.job_id)
    .fetch_all(&mut *tx)
    .await?;
    for (attempt_id, state) in &open {
        let state: AttemptState = parse_state(state)?;
        if state.blocks_new_attempts() {
            return release(
                tx,
                StartOutcome::Refused(StartRefusal::Blocked {
                    attempt_id: *attempt_id,
                    state,
                }),
            )
            .await;
        }
    }
    if open.is_empty() == start.hedge {
        return release(tx, StartOutcome::Refused(StartRefusal::NotHedgeable)).await;
    }
    let previous: Option<String> = sqlx::query_scalar(
        "SELECT provider FROM attempts WHERE job_id = $1 ORDER BY number DESC LIMIT 1",
    )
    .bind(start.job_id)
    .fetch_optional(&mut *tx)
    .await?;
    let row: PgAttemptRow = sqlx::query_as(concat!(
        "INSERT INTO attempts (id, job_id, number, provider, state, hedge, worker, \
         lease_expires_at, deadline_at, upstream_key) VALUES ($1, $2, $3, $4, 'starting', $5, \
         $6, now() + make_interval(secs => $7), now() + make_interval(secs => $8), $9) RETURNING ",
        attempt_columns!()
    ))
    .bind(Uuid::now_v7())
    .bind(start.job_id)
    .bind(attempts + 1)
    .bind(&start.provider)
    .bind(start.hedge)
    .bind(&start.worker)
    .bind(secs(start.lease))
    .bind(secs(start.timeout))
    .bind(&start.upstream_key)
    .fetch_one(&mut *tx)
    .await?;
    let attempt = AttemptRecord::try_from(row)?;
    sqlx::query(
        "UPDATE jobs SET state = 'running', attempts = attempts + 1, version = version + 1, \
         dispatch_at = NULL, updated_at = now() WHERE id = $1",
    )
    .bind(start.job_id)
    .execute(&mut *tx)
    .await?;
    if let Some(from) = previous.filter(|p| !start.hedge && *p != start.provider) {
        let detail = json!({ "from": from, "to": start.provider });
        insert_event(
            &mut tx,
            &event(start.job_id, attempt.id, EventKind::Failover, detail),
        )
        .await?;
    }
    let detail =
        json!({ "number": attempt.number, "provider": attempt.provider, "hedge": attempt.hedge });
    insert_event(
        &mut tx,
        &event(start.job_id, attempt.id, EventKind::AttemptStarted, detail),
    )
    .await?;
    tx.commit().await?;
    Ok(StartOutcome::Started(Box::new(attempt)))
}

pub(super) async fn acknowledge(
    pool: &PgPool,
    attempt_id: Uuid,
    task_id: Option<&str>,
    hedge_after: Option<Duration>,
) -> Result<Acknowledged, StoreError> {
    let mut tx = pool.begin().await?;
    // The job's lock first: a cancellation either committed before (and is seen here) or
    // waits until the attempt is running, when it returns it as live for an upstream cancel.
    let job_id = job_of(&mut tx, attempt_id).await?;
    let job_state: String = sqlx::query_scalar("SELECT state FROM jobs WHERE id = $1 FOR UPDATE")
        .bind(job_id)
        .fetch_one(&mut *tx)
        .await?;
    // The task id is stored whatever the attempt's state: it is what proves what happened.
    let state: String = sqlx::query_scalar(
        "UPDATE attempts SET task_id = COALESCE(task_id, $2) WHERE id = $1 RETURNING state",
    )
    .bind(attempt_id)
    .bind(task_id.map(storable_text))
    .fetch_one(&mut *tx)
    .await?;
    let state: AttemptState = parse_state(&state)?;
    if state != AttemptState::Starting {
        tx.commit().await?;
        return Ok(Acknowledged::NotStarting(state));
    }
    if job_state == "cancelled" {
        sqlx::query(
            "UPDATE attempts SET state = 'cancelled', key_spent = true, acknowledged_at = now(), \
             finished_at = now() WHERE id = $1",
        )
        .bind(attempt_id)
        .execute(&mut *tx)
        .await?;
        let detail = json!({
            "outcome": "cancelled",
            "note": "the job was cancelled while the attempt was being sent",
        });
        insert_event(
            &mut tx,
            &event(job_id, attempt_id, EventKind::AttemptResolved, detail),
        )
        .await?;
        tx.commit().await?;
        return Ok(Acknowledged::JobCancelled);
    }
    sqlx::query("UPDATE attempts SET state = 'running', acknowledged_at = now() WHERE id = $1")
        .bind(attempt_id)
        .execute(&mut *tx)
        .await?;
    if let Some(after) = hedge_after {
        sqlx::query(
            "UPDATE jobs SET dispatch_at = now() + make_interval(secs => $2), \
             version = version + 1, updated_at = now() WHERE id = $1 AND state = 'running'",
        )
        .bind(job_id)
        .bind(secs(after))
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(Acknowledged::Running)
}

pub(super) async fn owns(
    pool: &PgPool,
    attempt_id: Uuid,
    worker: &str,
    margin: Duration,
) -> Result<bool, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM attempts a JOIN jobs j ON j.id = a.job_id \
         WHERE a.id = $1 AND a.state = 'starting' AND a.worker = $2 \
         AND a.lease_expires_at > now() + make_interval(secs => $3) AND j.state <> 'cancelled')",
    )
    .bind(attempt_id)
    .bind(worker)
    .bind(secs(margin))
    .fetch_one(pool)
    .await?)
}

pub(super) async fn heartbeat(
    pool: &PgPool,
    worker: &str,
    lease: Duration,
) -> Result<Vec<Uuid>, StoreError> {
    Ok(sqlx::query_scalar(
        "WITH renewed AS (UPDATE attempts SET lease_expires_at = now() + make_interval(secs => $2) \
         WHERE worker = $1 AND state IN ('starting', 'running') RETURNING id, job_id) \
         SELECT renewed.id FROM renewed JOIN jobs ON jobs.id = renewed.job_id \
         WHERE jobs.state = 'cancelled'",
    )
    .bind(worker)
    .bind(secs(lease))
    .fetch_all(pool)
    .await?)
}

/// The job of an attempt (which never changes, so it needs no lock).
async fn job_of(
    tx: &mut Transaction<'static, Postgres>,
    attempt_id: Uuid,
) -> Result<Uuid, StoreError> {
    sqlx::query_scalar("SELECT job_id FROM attempts WHERE id = $1")
        .bind(attempt_id)
        .fetch_optional(&mut **tx)
        .await?
        .ok_or_else(|| StoreError::Corrupt(format!("no attempt {attempt_id}")))
}

/// The state of an attempt, read once its job's row lock is held: every transition of an
/// attempt takes that lock first, so the state cannot change before the transaction ends.
async fn locked_state(
    tx: &mut Transaction<'static, Postgres>,
    attempt_id: Uuid,
) -> Result<AttemptState, StoreError> {
    let state: String = sqlx::query_scalar("SELECT state FROM attempts WHERE id = $1")
        .bind(attempt_id)
        .fetch_one(&mut **tx)
        .await?;
    parse_state(&state)
}

pub(super) async fn complete(
    pool: &PgPool,
    attempt_id: Uuid,
    output: &Value,
    by: &Resolution,
) -> Result<Completion, StoreError> {
    for _ in 0..CAS_ROUNDS {
        let mut tx = pool.begin().await?;
        let job_id = job_of(&mut tx, attempt_id).await?;
        // The job's row lock before the attempt's state: an operator or the reconciler
        // resolving this attempt holds the same lock, so the state read below is the one the
        // swap acts on, never one a resolution is about to change.
        let (version, job_state, winner): (i64, String, Option<Uuid>) = sqlx::query_as(
            "SELECT version, state, completed_by FROM jobs WHERE id = $1 FOR UPDATE",
        )
        .bind(job_id)
        .fetch_one(&mut *tx)
        .await?;
        let attempt_state = locked_state(&mut tx, attempt_id).await?;
        if by.only_unknown && attempt_state != AttemptState::Unknown {
            return release(tx, Completion::NotUnknown(attempt_state)).await;
        }
        if winner == Some(attempt_id) {
            // The winner's own answer again (a recording resent after a lost reply, or the
            // upstream answering twice): it already is the result; no race was lost.
            return release(tx, Completion::Won).await;
        }
        let job_state: JobState = parse_state(&job_state)?;
        let open = matches!(
            job_state,
            JobState::Pending | JobState::Running | JobState::Unknown
        );
        if winner.is_some() || !open || attempt_state.is_terminal() {
            sqlx::query(
                "UPDATE attempts SET state = 'discarded', finished_at = now() \
                 WHERE id = $1 AND state IN ('starting', 'running', 'unknown')",
            )
            .bind(attempt_id)
            .execute(&mut *tx)
            .await?;
            let mut detail = payload_digest(output);
            detail["winner"] = json!(winner);
            detail["job_state"] = json!(job_state);
            detail["note"] = json!(by.note);
            insert_event(
                &mut tx,
                &by.event(job_id, attempt_id, EventKind::RaceLost, detail),
            )
            .await?;
            tx.commit().await?;
            return Ok(Completion::Discarded { winner, job_state });
        }
        // The compare-and-swap: exactly one attempt ever gets past this.
        let swapped = sqlx::query(
            "UPDATE jobs SET state = 'succeeded', result = $3, completed_by = $4, error = NULL, \
             version = version + 1, dispatch_at = NULL, updated_at = now() \
             WHERE id = $1 AND version = $2 AND completed_by IS NULL \
             AND state IN ('pending', 'running', 'unknown')",
        )
        .bind(job_id)
        .bind(version)
        .bind(Json(output))
        .bind(attempt_id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let ended = if swapped == 1 {
            sqlx::query(
                "UPDATE attempts SET state = 'succeeded', finished_at = now() \
                 WHERE id = $1 AND state IN ('starting', 'running', 'unknown')",
            )
            .bind(attempt_id)
            .execute(&mut *tx)
            .await?
            .rows_affected()
        } else {
            0
        };
        if ended == 0 {
            // The version or the attempt moved under us: read again and decide again.
            tx.rollback().await?;
            continue;
        }
        discard_unknown_siblings(&mut tx, job_id, attempt_id).await?;
        let mut detail = payload_digest(output);
        detail["note"] = json!(by.note);
        let won = by.event(job_id, attempt_id, EventKind::Won, detail);
        insert_event(&mut tx, &won).await?;
        tx.commit().await?;
        return Ok(Completion::Won);
    }
    Err(StoreError::Contended("completion"))
}

/// Discards the `unknown` attempts of a job another attempt just won: their outcome no
/// longer matters, and left unknown they would wait for proof (and count as unknown) forever.
async fn discard_unknown_siblings(
    tx: &mut Transaction<'static, Postgres>,
    job_id: Uuid,
    winner: Uuid,
) -> Result<(), StoreError> {
    let siblings: Vec<Uuid> = sqlx::query_scalar(
        "UPDATE attempts SET state = 'discarded', finished_at = now() \
         WHERE job_id = $1 AND id <> $2 AND state = 'unknown' RETURNING id",
    )
    .bind(job_id)
    .bind(winner)
    .fetch_all(&mut **tx)
    .await?;
    for sibling in siblings {
        insert_event(
            tx,
            &event(
                job_id,
                sibling,
                EventKind::AttemptResolved,
                sibling_discarded(winner),
            ),
        )
        .await?;
    }
    Ok(())
}

/// Recomputes a job's state from its attempts after one of them changed. Leaves succeeded
/// and cancelled jobs alone. `retry` decides whether a job with nothing open goes back to
/// `pending` (and when) or `failed` (with `error`).
async fn settle_job(
    tx: &mut Transaction<'static, Postgres>,
    job_id: Uuid,
    retry: Option<RetryPolicy>,
    error: Option<&Value>,
) -> Result<JobState, StoreError> {
    let (state, attempts, recoveries): (String, i32, i32) =
        sqlx::query_as("SELECT state, attempts, recoveries FROM jobs WHERE id = $1 FOR UPDATE")
            .bind(job_id)
            .fetch_one(&mut **tx)
            .await?;
    let state: JobState = parse_state(&state)?;
    if matches!(state, JobState::Succeeded | JobState::Cancelled) {
        return Ok(state);
    }
    let states: Vec<String> = sqlx::query_scalar("SELECT state FROM attempts WHERE job_id = $1")
        .bind(job_id)
        .fetch_all(&mut **tx)
        .await?;
    let states = states
        .iter()
        .map(|s| parse_state::<AttemptState>(s))
        .collect::<Result<Vec<_>, _>>()?;
    let may_retry = retry.is_some_and(|r| within_budget(attempts, recoveries, r.max_attempts));
    let next = JobState::settle(states, may_retry);
    let backoff = retry.map(|r| secs(r.backoff)).unwrap_or_default();
    let job_error = (next == JobState::Failed).then(
        || json!({ "message": "no attempt succeeded", "attempts": attempts, "last_error": error }),
    );
    sqlx::query(
        "UPDATE jobs SET state = $2, version = version + 1, updated_at = now(), \
         dispatch_at = CASE WHEN $2 = 'pending' THEN now() + make_interval(secs => $3) ELSE NULL END, \
         error = $4 WHERE id = $1",
    )
    .bind(job_id)
    .bind(next.as_str())
    .bind(backoff)
    .bind(job_error.map(Json))
    .execute(&mut **tx)
    .await?;
    Ok(next)
}

pub(super) async fn fail(
    pool: &PgPool,
    attempt_id: Uuid,
    end: Unsuccessful,
    error: &Value,
    retry: RetryPolicy,
    by: &Resolution,
) -> Result<FailOutcome, StoreError> {
    let error = storable(error);
    let mut tx = pool.begin().await?;
    let job_id = job_of(&mut tx, attempt_id).await?;
    let job_state: String = sqlx::query_scalar("SELECT state FROM jobs WHERE id = $1 FOR UPDATE")
        .bind(job_id)
        .fetch_one(&mut *tx)
        .await?;
    let attempt_state = locked_state(&mut tx, attempt_id).await?;
    if !by.may_end(attempt_state) {
        return release(tx, FailOutcome::NotOpen(attempt_state)).await;
    }
    // An attempt of a cancelled job ends cancelled, whatever its provider said.
    let end = if job_state == "cancelled" {
        Unsuccessful::Cancelled
    } else {
        end
    };
    let end_state = end.state();
    sqlx::query(
        "UPDATE attempts SET state = $2, error = $3, key_spent = $4, finished_at = now() \
         WHERE id = $1",
    )
    .bind(attempt_id)
    .bind(end_state.as_str())
    .bind(Json(&*error))
    .bind(end.spends_key())
    .execute(&mut *tx)
    .await?;
    let detail = json!({ "outcome": end_state, "error": &*error, "note": by.note });
    let resolved = by.event(job_id, attempt_id, EventKind::AttemptResolved, detail);
    insert_event(&mut tx, &resolved).await?;
    let state = settle_job(&mut tx, job_id, Some(retry), Some(&error)).await?;
    tx.commit().await?;
    Ok(FailOutcome::Recorded(state))
}

pub(super) async fn settle_exhausted(
    pool: &PgPool,
    job_id: Uuid,
    max_attempts: u32,
) -> Result<bool, StoreError> {
    let mut tx = pool.begin().await?;
    let row: Option<(String, i32, i32)> =
        sqlx::query_as("SELECT state, attempts, recoveries FROM jobs WHERE id = $1 FOR UPDATE")
            .bind(job_id)
            .fetch_optional(&mut *tx)
            .await?;
    let Some((state, attempts, recoveries)) = row else {
        return release(tx, false).await;
    };
    let open: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM attempts WHERE job_id = $1 \
         AND state IN ('starting', 'running', 'unknown'))",
    )
    .bind(job_id)
    .fetch_one(&mut *tx)
    .await?;
    if state != "pending" || open || within_budget(attempts, recoveries, max_attempts) {
        return release(tx, false).await;
    }
    let exhausted = Exhausted::new(job_id, attempts, max_attempts);
    sqlx::query(
        "UPDATE jobs SET state = 'failed', dispatch_at = NULL, version = version + 1, \
         updated_at = now(), error = $2 WHERE id = $1",
    )
    .bind(job_id)
    .bind(Json(exhausted.job_error()))
    .execute(&mut *tx)
    .await?;
    insert_event(&mut tx, &exhausted.event()).await?;
    tx.commit().await?;
    Ok(true)
}

pub(super) async fn mark_unknown(
    pool: &PgPool,
    attempt_id: Uuid,
    why: &Value,
    by: UnknownBy,
) -> Result<bool, StoreError> {
    let why = storable(why);
    let mut tx = pool.begin().await?;
    let job_id = job_of(&mut tx, attempt_id).await?;
    let (job_state, winner): (String, Option<Uuid>) =
        sqlx::query_as("SELECT state, completed_by FROM jobs WHERE id = $1 FOR UPDATE")
            .bind(job_id)
            .fetch_one(&mut *tx)
            .await?;
    let job_state: JobState = parse_state(&job_state)?;
    // A rescuer acts only on a lease that is still expired now: a renewal that got the row
    // first (or the attempt's own worker) keeps it.
    let grace = match by {
        UnknownBy::Worker => None,
        UnknownBy::Rescuer { grace } => Some(secs(grace)),
    };
    if winner.is_some() || job_state == JobState::Cancelled {
        // The job is settled: this attempt's outcome no longer matters to it.
        let changed = sqlx::query(
            "UPDATE attempts SET state = 'discarded', error = $2, finished_at = now() \
             WHERE id = $1 AND state IN ('starting', 'running') AND ($3::float8 IS NULL \
             OR lease_expires_at < now() OR deadline_at < now() - make_interval(secs => $3))",
        )
        .bind(attempt_id)
        .bind(Json(with_member(&why, "job_state", json!(job_state))))
        .bind(grace)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if changed > 0 {
            let detail = with_member(&why, "outcome", json!("discarded"));
            let detail = with_member(&detail, "job_state", json!(job_state));
            insert_event(
                &mut tx,
                &event(job_id, attempt_id, EventKind::AttemptResolved, detail),
            )
            .await?;
        }
        tx.commit().await?;
        return Ok(false);
    }
    let changed = sqlx::query(
        "UPDATE attempts SET state = 'unknown', error = $2, unknown_since = now(), \
         reconcile_at = now() WHERE id = $1 AND state IN ('starting', 'running') \
         AND ($3::float8 IS NULL OR lease_expires_at < now() \
         OR deadline_at < now() - make_interval(secs => $3))",
    )
    .bind(attempt_id)
    .bind(Json(&*why))
    .bind(grace)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if changed == 0 {
        return release(tx, false).await;
    }
    let detail = why.into_owned();
    insert_event(
        &mut tx,
        &event(job_id, attempt_id, EventKind::AttemptUnknown, detail),
    )
    .await?;
    settle_job(&mut tx, job_id, None, None).await?;
    tx.commit().await?;
    Ok(true)
}

pub(super) async fn expired(
    pool: &PgPool,
    grace: Duration,
) -> Result<Vec<(Uuid, String)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT id, provider FROM attempts WHERE state IN ('starting', 'running') \
         AND (lease_expires_at < now() OR deadline_at < now() - make_interval(secs => $1)) \
         ORDER BY started_at LIMIT 100",
    )
    .bind(secs(grace))
    .fetch_all(pool)
    .await?)
}

pub(super) async fn claim_unknown(
    pool: &PgPool,
    limit: u32,
    backoff: Duration,
    max_backoff: Duration,
) -> Result<Vec<AttemptRecord>, StoreError> {
    let rows: Vec<PgAttemptRow> = sqlx::query_as(concat!(
        "UPDATE attempts SET reconcile_checks = reconcile_checks + 1, \
         reconcile_at = now() + make_interval(secs => LEAST($2 * power(2, LEAST(reconcile_checks, 20)), $3)) \
         WHERE id IN (SELECT id FROM attempts WHERE state = 'unknown' AND reconcile_at <= now() \
         ORDER BY reconcile_at LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING ",
        attempt_columns!()
    ))
    .bind(i64::from(limit))
    .bind(secs(backoff))
    .bind(secs(max_backoff))
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(AttemptRecord::try_from).collect()
}

pub(super) async fn set_task_id(
    pool: &PgPool,
    attempt_id: Uuid,
    task_id: &str,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE attempts SET task_id = $2 WHERE id = $1 AND task_id IS NULL")
        .bind(attempt_id)
        .bind(storable_text(task_id))
        .execute(pool)
        .await?;
    Ok(())
}
