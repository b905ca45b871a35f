//! Attempts on SQLite: the same transitions as on PostgreSQL (see `postgres/attempts.rs`).
//!
//! The attempt guard here is SQLite's single writer: every transition runs in a
//! `BEGIN IMMEDIATE` transaction, which holds the database's write lock from its first
//! statement, so the guard's read and the insert that follows cannot interleave with any
//! other writer, in this process or another. There is no `SKIP LOCKED`: a second starter
//! waits for the lock (`busy_timeout`) and then sees the first one's attempt.

use std::time::Duration;

use onejob_domain::{AttemptState, EventKind, JobState};
use serde_json::{Value, json};
use sqlx::{Sqlite, Transaction};
use uuid::Uuid;

use super::{SqliteAttemptRow, SqliteStore, insert_event, parse_uuid};
use crate::store::{
    AttemptRecord, AttemptStart, Completion, FailOutcome, NewEvent, Resolution, RetryPolicy,
    StartOutcome, StartRefusal, StoreError, Unsuccessful, payload_digest, records::within_budget,
    release,
};

/// How many times a completion re-reads the job when its version moved for another reason.
const CAS_ROUNDS: usize = 16;

/// A `strftime` modifier adding `duration` to now, bound as a parameter.
fn plus(duration: Duration) -> String {
    format!("+{:.3} seconds", duration.as_secs_f64())
}

fn minus(duration: Duration) -> String {
    format!("-{:.3} seconds", duration.as_secs_f64())
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

pub(super) async fn start(
    store: &SqliteStore,
    start: &AttemptStart,
) -> Result<StartOutcome, StoreError> {
    let mut tx = store.begin_write().await?;
    let job_id = start.job_id.to_string();
    let job: Option<(String, i32, i32, bool)> = sqlx::query_as(concat!(
        "SELECT state, attempts, recoveries, COALESCE(dispatch_at <= ",
        now!(),
        ", 0) FROM jobs WHERE id = ?1"
    ))
    .bind(&job_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((state, attempts, recoveries, due)) = job else {
        return release(tx, StartOutcome::Refused(StartRefusal::NotFound)).await;
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
    let open: Vec<(String, String)> = sqlx::query_as(
        "SELECT id, state FROM attempts WHERE job_id = ?1 \
         AND state IN ('starting', 'running', 'unknown') ORDER BY number",
    )
    .bind(&job_id)
    .fetch_all(&mut *tx)
    .await?;
    for (attempt_id, state) in &open {
        let state: AttemptState = parse_state(state)?;
        if state.blocks_new_attempts() {
            return release(
                tx,
                StartOutcome::Refused(StartRefusal::Blocked {
                    attempt_id: parse_uuid(attempt_id)?,
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
        "SELECT provider FROM attempts WHERE job_id = ?1 ORDER BY number DESC LIMIT 1",
    )
    .bind(&job_id)
    .fetch_optional(&mut *tx)
    .await?;
    let row: SqliteAttemptRow = sqlx::query_as(concat!(
        "INSERT INTO attempts (id, job_id, number, provider, state, hedge, worker, \
         lease_expires_at, deadline_at, upstream_key) VALUES (?1, ?2, ?3, ?4, 'starting', ?5, ?6, ",
        now_plus!("?7"),
        ", ",
        now_plus!("?8"),
        ", ?9) RETURNING ",
        attempt_columns!()
    ))
    .bind(Uuid::now_v7().to_string())
    .bind(&job_id)
    .bind(attempts + 1)
    .bind(&start.provider)
    .bind(start.hedge)
    .bind(&start.worker)
    .bind(plus(start.lease))
    .bind(plus(start.timeout))
    .bind(&start.upstream_key)
    .fetch_one(&mut *tx)
    .await?;
    let attempt = AttemptRecord::try_from(row)?;
    sqlx::query(concat!(
        "UPDATE jobs SET state = 'running', attempts = attempts + 1, version = version + 1, \
         dispatch_at = NULL, updated_at = ",
        now!(),
        " WHERE id = ?1"
    ))
    .bind(&job_id)
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
    store: &SqliteStore,
    attempt_id: Uuid,
    task_id: Option<&str>,
    hedge_after: Option<Duration>,
) -> Result<bool, StoreError> {
    let mut tx = store.begin_write().await?;
    let job_id: Option<String> = sqlx::query_scalar(concat!(
        "UPDATE attempts SET state = 'running', task_id = COALESCE(?2, task_id), \
         acknowledged_at = ",
        now!(),
        " WHERE id = ?1 AND state = 'starting' RETURNING job_id"
    ))
    .bind(attempt_id.to_string())
    .bind(task_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(job_id) = job_id else {
        return release(tx, false).await;
    };
    if let Some(after) = hedge_after {
        sqlx::query(concat!(
            "UPDATE jobs SET dispatch_at = ",
            now_plus!("?2"),
            ", version = version + 1, updated_at = ",
            now!(),
            " WHERE id = ?1 AND state = 'running'"
        ))
        .bind(&job_id)
        .bind(plus(after))
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    if hedge_after.is_some() {
        store.wake.notify_one();
    }
    Ok(true)
}

pub(super) async fn heartbeat(
    store: &SqliteStore,
    worker: &str,
    lease: Duration,
) -> Result<u64, StoreError> {
    let mut tx = store.begin_write().await?;
    let result = sqlx::query(concat!(
        "UPDATE attempts SET lease_expires_at = ",
        now_plus!("?2"),
        " WHERE worker = ?1 AND state IN ('starting', 'running')"
    ))
    .bind(worker)
    .bind(plus(lease))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(result.rows_affected())
}

async fn attempt_head(
    tx: &mut Transaction<'static, Sqlite>,
    attempt_id: Uuid,
) -> Result<Option<(Uuid, AttemptState)>, StoreError> {
    let row: Option<(String, String)> =
        sqlx::query_as("SELECT job_id, state FROM attempts WHERE id = ?1")
            .bind(attempt_id.to_string())
            .fetch_optional(&mut **tx)
            .await?;
    row.map(|(job, state)| Ok((parse_uuid(&job)?, parse_state(&state)?)))
        .transpose()
}

pub(super) async fn complete(
    store: &SqliteStore,
    attempt_id: Uuid,
    output: &Value,
    by: &Resolution,
) -> Result<Completion, StoreError> {
    for _ in 0..CAS_ROUNDS {
        let mut tx = store.begin_write().await?;
        let Some((job_id, attempt_state)) = attempt_head(&mut tx, attempt_id).await? else {
            return Err(StoreError::Corrupt(format!("no attempt {attempt_id}")));
        };
        if by.only_unknown && attempt_state != AttemptState::Unknown {
            return release(tx, Completion::NotUnknown(attempt_state)).await;
        }
        let (version, job_state, winner): (i64, String, Option<String>) =
            sqlx::query_as("SELECT version, state, completed_by FROM jobs WHERE id = ?1")
                .bind(job_id.to_string())
                .fetch_one(&mut *tx)
                .await?;
        let job_state: JobState = parse_state(&job_state)?;
        let winner = winner.as_deref().map(parse_uuid).transpose()?;
        let open = matches!(
            job_state,
            JobState::Pending | JobState::Running | JobState::Unknown
        );
        if winner.is_some() || !open || attempt_state.is_terminal() {
            sqlx::query(concat!(
                "UPDATE attempts SET state = 'discarded', finished_at = ",
                now!(),
                " WHERE id = ?1 AND state IN ('starting', 'running', 'unknown')"
            ))
            .bind(attempt_id.to_string())
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
        let swapped = sqlx::query(concat!(
            "UPDATE jobs SET state = 'succeeded', result = ?3, completed_by = ?4, error = NULL, \
             version = version + 1, dispatch_at = NULL, updated_at = ",
            now!(),
            " WHERE id = ?1 AND version = ?2 AND completed_by IS NULL \
             AND state IN ('pending', 'running', 'unknown')"
        ))
        .bind(job_id.to_string())
        .bind(version)
        .bind(output.to_string())
        .bind(attempt_id.to_string())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if swapped == 0 {
            tx.rollback().await?;
            continue;
        }
        sqlx::query(concat!(
            "UPDATE attempts SET state = 'succeeded', finished_at = ",
            now!(),
            " WHERE id = ?1"
        ))
        .bind(attempt_id.to_string())
        .execute(&mut *tx)
        .await?;
        let won = by.event(job_id, attempt_id, EventKind::Won, payload_digest(output));
        insert_event(&mut tx, &won).await?;
        tx.commit().await?;
        return Ok(Completion::Won);
    }
    Err(StoreError::Corrupt(
        "the job kept changing during completion".into(),
    ))
}

/// Recomputes a job's state from its attempts (see the PostgreSQL twin).
async fn settle_job(
    tx: &mut Transaction<'static, Sqlite>,
    job_id: Uuid,
    retry: Option<RetryPolicy>,
    error: Option<&Value>,
) -> Result<JobState, StoreError> {
    let id = job_id.to_string();
    let (state, attempts, recoveries): (String, i32, i32) =
        sqlx::query_as("SELECT state, attempts, recoveries FROM jobs WHERE id = ?1")
            .bind(&id)
            .fetch_one(&mut **tx)
            .await?;
    let state: JobState = parse_state(&state)?;
    if matches!(state, JobState::Succeeded | JobState::Cancelled) {
        return Ok(state);
    }
    let states: Vec<String> = sqlx::query_scalar("SELECT state FROM attempts WHERE job_id = ?1")
        .bind(&id)
        .fetch_all(&mut **tx)
        .await?;
    let states = states
        .iter()
        .map(|s| parse_state::<AttemptState>(s))
        .collect::<Result<Vec<_>, _>>()?;
    let may_retry = retry.is_some_and(|r| within_budget(attempts, recoveries, r.max_attempts));
    let next = JobState::settle(states, may_retry);
    let backoff = plus(retry.map(|r| r.backoff).unwrap_or_default());
    let job_error = (next == JobState::Failed).then(|| {
        json!({ "message": "no attempt succeeded", "attempts": attempts, "last_error": error })
            .to_string()
    });
    sqlx::query(concat!(
        "UPDATE jobs SET state = ?2, version = version + 1, updated_at = ",
        now!(),
        ", dispatch_at = CASE WHEN ?2 = 'pending' THEN ",
        now_plus!("?3"),
        " ELSE NULL END, error = ?4 WHERE id = ?1"
    ))
    .bind(&id)
    .bind(next.as_str())
    .bind(backoff)
    .bind(job_error)
    .execute(&mut **tx)
    .await?;
    Ok(next)
}

pub(super) async fn fail(
    store: &SqliteStore,
    attempt_id: Uuid,
    end: Unsuccessful,
    error: &Value,
    retry: RetryPolicy,
    by: &Resolution,
) -> Result<FailOutcome, StoreError> {
    let mut tx = store.begin_write().await?;
    let Some((job_id, attempt_state)) = attempt_head(&mut tx, attempt_id).await? else {
        return Err(StoreError::Corrupt(format!("no attempt {attempt_id}")));
    };
    let job_state: String = sqlx::query_scalar("SELECT state FROM jobs WHERE id = ?1")
        .bind(job_id.to_string())
        .fetch_one(&mut *tx)
        .await?;
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
    let statement = if by.only_unknown {
        concat!(
            "UPDATE attempts SET state = ?2, error = ?3, finished_at = ",
            now!(),
            " WHERE id = ?1 AND state = 'unknown'"
        )
    } else {
        concat!(
            "UPDATE attempts SET state = ?2, error = ?3, finished_at = ",
            now!(),
            " WHERE id = ?1 AND state IN ('starting', 'running', 'unknown')"
        )
    };
    let changed = sqlx::query(statement)
        .bind(attempt_id.to_string())
        .bind(end_state.as_str())
        .bind(error.to_string())
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
    if state == JobState::Pending {
        store.wake.notify_one();
    }
    Ok(FailOutcome::Recorded(state))
}

pub(super) async fn mark_unknown(
    store: &SqliteStore,
    attempt_id: Uuid,
    reason: &str,
) -> Result<bool, StoreError> {
    let mut tx = store.begin_write().await?;
    let Some((job_id, _)) = attempt_head(&mut tx, attempt_id).await? else {
        return release(tx, false).await;
    };
    let (job_state, winner): (String, Option<String>) =
        sqlx::query_as("SELECT state, completed_by FROM jobs WHERE id = ?1")
            .bind(job_id.to_string())
            .fetch_one(&mut *tx)
            .await?;
    let job_state: JobState = parse_state(&job_state)?;
    if winner.is_some() || job_state == JobState::Cancelled {
        let changed = sqlx::query(concat!(
            "UPDATE attempts SET state = 'discarded', error = ?2, finished_at = ",
            now!(),
            " WHERE id = ?1 AND state IN ('starting', 'running')"
        ))
        .bind(attempt_id.to_string())
        .bind(json!({ "reason": reason, "job_state": job_state }).to_string())
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
    let changed = sqlx::query(concat!(
        "UPDATE attempts SET state = 'unknown', error = ?2, unknown_since = ",
        now!(),
        ", reconcile_at = ",
        now!(),
        " WHERE id = ?1 AND state IN ('starting', 'running')"
    ))
    .bind(attempt_id.to_string())
    .bind(json!({ "reason": reason }).to_string())
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
    store: &SqliteStore,
    grace: Duration,
) -> Result<Vec<(Uuid, String)>, StoreError> {
    let rows: Vec<(String, String)> = sqlx::query_as(concat!(
        "SELECT id, provider FROM attempts WHERE state IN ('starting', 'running') AND (lease_expires_at < ",
        now!(),
        " OR deadline_at < ",
        now_plus!("?1"),
        ") ORDER BY started_at LIMIT 100"
    ))
    .bind(minus(grace))
    .fetch_all(store.pool())
    .await?;
    rows.into_iter()
        .map(|(id, provider)| Ok((parse_uuid(&id)?, provider)))
        .collect()
}

pub(super) async fn claim_unknown(
    store: &SqliteStore,
    limit: u32,
    backoff: Duration,
    max_backoff: Duration,
) -> Result<Vec<AttemptRecord>, StoreError> {
    let mut tx = store.begin_write().await?;
    let due: Vec<(String, i32)> = sqlx::query_as(concat!(
        "SELECT id, reconcile_checks FROM attempts WHERE state = 'unknown' AND reconcile_at <= ",
        now!(),
        " ORDER BY reconcile_at LIMIT ?1"
    ))
    .bind(i64::from(limit))
    .fetch_all(&mut *tx)
    .await?;
    let mut claimed = Vec::with_capacity(due.len());
    for (id, checks) in due {
        let wait = backoff
            .saturating_mul(2u32.saturating_pow(checks.clamp(0, 20) as u32))
            .min(max_backoff);
        let row: SqliteAttemptRow = sqlx::query_as(concat!(
            "UPDATE attempts SET reconcile_checks = reconcile_checks + 1, reconcile_at = ",
            now_plus!("?2"),
            " WHERE id = ?1 RETURNING ",
            attempt_columns!()
        ))
        .bind(&id)
        .bind(plus(wait))
        .fetch_one(&mut *tx)
        .await?;
        claimed.push(AttemptRecord::try_from(row)?);
    }
    tx.commit().await?;
    Ok(claimed)
}

pub(super) async fn set_task_id(
    store: &SqliteStore,
    attempt_id: Uuid,
    task_id: &str,
) -> Result<(), StoreError> {
    let mut tx = store.begin_write().await?;
    sqlx::query("UPDATE attempts SET task_id = ?2 WHERE id = ?1 AND task_id IS NULL")
        .bind(attempt_id.to_string())
        .bind(task_id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}
