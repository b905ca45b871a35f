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
    AttemptRecord, AttemptStart, Completion, FailOutcome, NewEvent, Resolution, RetryPolicy,
    StartOutcome, StartRefusal, StoreError, Unsuccessful, payload_digest, records::within_budget,
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
) -> Result<bool, StoreError> {
    let mut tx = pool.begin().await?;
    let job_id: Option<Uuid> = sqlx::query_scalar(
        "UPDATE attempts SET state = 'running', task_id = COALESCE($2, task_id), \
         acknowledged_at = now() WHERE id = $1 AND state = 'starting' RETURNING job_id",
    )
    .bind(attempt_id)
    .bind(task_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(job_id) = job_id else {
        return release(tx, false).await;
    };
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
    Ok(true)
}

pub(super) async fn heartbeat(
    pool: &PgPool,
    worker: &str,
    lease: Duration,
) -> Result<u64, StoreError> {
    let result = sqlx::query(
        "UPDATE attempts SET lease_expires_at = now() + make_interval(secs => $2) \
         WHERE worker = $1 AND state IN ('starting', 'running')",
    )
    .bind(worker)
    .bind(secs(lease))
    .execute(pool)
    .await?;
    Ok(result.rows_affected())
}

/// The attempt's job and state, for the transitions below.
async fn attempt_head(
    tx: &mut Transaction<'static, Postgres>,
    attempt_id: Uuid,
) -> Result<Option<(Uuid, AttemptState)>, StoreError> {
    let row: Option<(Uuid, String)> =
        sqlx::query_as("SELECT job_id, state FROM attempts WHERE id = $1")
            .bind(attempt_id)
            .fetch_optional(&mut **tx)
            .await?;
    row.map(|(job, state)| Ok((job, parse_state(&state)?)))
        .transpose()
}

pub(super) async fn complete(
    pool: &PgPool,
    attempt_id: Uuid,
    output: &Value,
    by: &Resolution,
) -> Result<Completion, StoreError> {
    for _ in 0..CAS_ROUNDS {
        let mut tx = pool.begin().await?;
        let Some((job_id, attempt_state)) = attempt_head(&mut tx, attempt_id).await? else {
            return Err(StoreError::Corrupt(format!("no attempt {attempt_id}")));
        };
        if by.only_unknown && attempt_state != AttemptState::Unknown {
            return release(tx, Completion::NotUnknown(attempt_state)).await;
        }
        let (version, job_state, winner): (i64, String, Option<Uuid>) =
            sqlx::query_as("SELECT version, state, completed_by FROM jobs WHERE id = $1")
                .bind(job_id)
                .fetch_one(&mut *tx)
                .await?;
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
            insert_event(
                &mut tx,
                &event(job_id, attempt_id, EventKind::RaceLost, detail),
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
        if swapped == 0 {
            // The version moved under us: read again and decide again.
            tx.rollback().await?;
            continue;
        }
        sqlx::query("UPDATE attempts SET state = 'succeeded', finished_at = now() WHERE id = $1")
            .bind(attempt_id)
            .execute(&mut *tx)
            .await?;
        let won = by.event(job_id, attempt_id, EventKind::Won, payload_digest(output));
        insert_event(&mut tx, &won).await?;
        tx.commit().await?;
        return Ok(Completion::Won);
    }
    Err(StoreError::Unavailable(sqlx::Error::Protocol(
        "the job kept changing during completion; try again".into(),
    )))
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
    let mut tx = pool.begin().await?;
    let Some((job_id, attempt_state)) = attempt_head(&mut tx, attempt_id).await? else {
        return Err(StoreError::Corrupt(format!("no attempt {attempt_id}")));
    };
    let job_state: String = sqlx::query_scalar("SELECT state FROM jobs WHERE id = $1 FOR UPDATE")
        .bind(job_id)
        .fetch_one(&mut *tx)
        .await?;
    let allowed: &[&str] = if by.only_unknown {
        &["unknown"]
    } else {
        &["starting", "running", "unknown"]
    };
    // An attempt of a cancelled job ends cancelled, whatever its provider said.
    let end = if job_state == "cancelled" {
        Unsuccessful::Cancelled
    } else {
        end
    };
    let end_state = match end {
        Unsuccessful::Failed => AttemptState::Failed,
        Unsuccessful::Cancelled => AttemptState::Cancelled,
    };
    let changed = sqlx::query(
        "UPDATE attempts SET state = $2, error = $3, finished_at = now() \
         WHERE id = $1 AND state = ANY($4)",
    )
    .bind(attempt_id)
    .bind(end_state.as_str())
    .bind(Json(error))
    .bind(allowed)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if changed == 0 {
        return release(tx, FailOutcome::NotOpen(attempt_state)).await;
    }
    let detail = json!({ "outcome": end_state, "error": error, "note": by.note });
    let resolved = by.event(job_id, attempt_id, EventKind::AttemptResolved, detail);
    insert_event(&mut tx, &resolved).await?;
    let state = settle_job(&mut tx, job_id, Some(retry), Some(error)).await?;
    tx.commit().await?;
    Ok(FailOutcome::Recorded(state))
}

pub(super) async fn mark_unknown(
    pool: &PgPool,
    attempt_id: Uuid,
    reason: &str,
) -> Result<bool, StoreError> {
    let mut tx = pool.begin().await?;
    let Some((job_id, _)) = attempt_head(&mut tx, attempt_id).await? else {
        return release(tx, false).await;
    };
    let (job_state, winner): (String, Option<Uuid>) =
        sqlx::query_as("SELECT state, completed_by FROM jobs WHERE id = $1 FOR UPDATE")
            .bind(job_id)
            .fetch_one(&mut *tx)
            .await?;
    let job_state: JobState = parse_state(&job_state)?;
    if winner.is_some() || job_state == JobState::Cancelled {
        // The job is settled: this attempt's outcome no longer matters to it.
        let changed = sqlx::query(
            "UPDATE attempts SET state = 'discarded', error = $2, finished_at = now() \
             WHERE id = $1 AND state IN ('starting', 'running')",
        )
        .bind(attempt_id)
        .bind(Json(json!({ "reason": reason, "job_state": job_state })))
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if changed > 0 {
            let detail =
                json!({ "outcome": "discarded", "reason": reason, "job_state": job_state });
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
         reconcile_at = now() WHERE id = $1 AND state IN ('starting', 'running')",
    )
    .bind(attempt_id)
    .bind(Json(json!({ "reason": reason })))
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if changed == 0 {
        return release(tx, false).await;
    }
    let detail = json!({ "reason": reason });
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
        .bind(task_id)
        .execute(pool)
        .await?;
    Ok(())
}
