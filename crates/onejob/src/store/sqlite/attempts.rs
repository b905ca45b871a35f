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
    Acknowledged, AttemptRecord, AttemptStart, Completion, FailOutcome, NewEvent, Resolution,
    RetryPolicy, StartOutcome, StartRefusal, StoreError, UnknownBy, Unsuccessful, payload_digest,
    records::{Exhausted, sibling_discarded, storable, storable_text, with_member, within_budget},
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
) -> Result<Acknowledged, StoreError> {
    let mut tx = store.begin_write().await?;
    let id = attempt_id.to_string();
    // The task id is stored whatever the attempt's state: it is what proves what happened.
    let row: Option<(String, String)> = sqlx::query_as(
        "UPDATE attempts SET task_id = COALESCE(task_id, ?2) WHERE id = ?1 RETURNING job_id, state",
    )
    .bind(&id)
    .bind(task_id.map(storable_text))
    .fetch_optional(&mut *tx)
    .await?;
    let Some((job_id, state)) = row else {
        return Err(StoreError::Corrupt(format!("no attempt {attempt_id}")));
    };
    let state: AttemptState = parse_state(&state)?;
    if state != AttemptState::Starting {
        tx.commit().await?;
        return Ok(Acknowledged::NotStarting(state));
    }
    let job_state: String = sqlx::query_scalar("SELECT state FROM jobs WHERE id = ?1")
        .bind(&job_id)
        .fetch_one(&mut *tx)
        .await?;
    if job_state == "cancelled" {
        sqlx::query(concat!(
            "UPDATE attempts SET state = 'cancelled', key_spent = 1, acknowledged_at = ",
            now!(),
            ", finished_at = ",
            now!(),
            " WHERE id = ?1"
        ))
        .bind(&id)
        .execute(&mut *tx)
        .await?;
        let detail = json!({
            "outcome": "cancelled",
            "note": "the job was cancelled while the attempt was being sent",
        });
        insert_event(
            &mut tx,
            &event(
                parse_uuid(&job_id)?,
                attempt_id,
                EventKind::AttemptResolved,
                detail,
            ),
        )
        .await?;
        tx.commit().await?;
        return Ok(Acknowledged::JobCancelled);
    }
    sqlx::query(concat!(
        "UPDATE attempts SET state = 'running', acknowledged_at = ",
        now!(),
        " WHERE id = ?1"
    ))
    .bind(&id)
    .execute(&mut *tx)
    .await?;
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
    Ok(Acknowledged::Running)
}

pub(super) async fn owns(
    store: &SqliteStore,
    attempt_id: Uuid,
    worker: &str,
    margin: Duration,
) -> Result<bool, StoreError> {
    Ok(sqlx::query_scalar(concat!(
        "SELECT EXISTS (SELECT 1 FROM attempts a JOIN jobs j ON j.id = a.job_id \
         WHERE a.id = ?1 AND a.state = 'starting' AND a.worker = ?2 AND a.lease_expires_at > ",
        now_plus!("?3"),
        " AND j.state <> 'cancelled')"
    ))
    .bind(attempt_id.to_string())
    .bind(worker)
    .bind(plus(margin))
    .fetch_one(store.pool())
    .await?)
}

pub(super) async fn heartbeat(
    store: &SqliteStore,
    worker: &str,
    lease: Duration,
) -> Result<Vec<Uuid>, StoreError> {
    let mut tx = store.begin_write().await?;
    let renewed: Vec<(String, String)> = sqlx::query_as(concat!(
        "UPDATE attempts SET lease_expires_at = ",
        now_plus!("?2"),
        " WHERE worker = ?1 AND state IN ('starting', 'running') RETURNING id, job_id"
    ))
    .bind(worker)
    .bind(plus(lease))
    .fetch_all(&mut *tx)
    .await?;
    let mut cancelled = Vec::new();
    for (attempt_id, job_id) in renewed {
        let state: String = sqlx::query_scalar("SELECT state FROM jobs WHERE id = ?1")
            .bind(&job_id)
            .fetch_one(&mut *tx)
            .await?;
        if state == "cancelled" {
            cancelled.push(parse_uuid(&attempt_id)?);
        }
    }
    tx.commit().await?;
    Ok(cancelled)
}

async fn attempt_head(
    tx: &mut Transaction<'static, Sqlite>,
    attempt_id: Uuid,
) -> Result<(Uuid, AttemptState), StoreError> {
    let row: Option<(String, String)> =
        sqlx::query_as("SELECT job_id, state FROM attempts WHERE id = ?1")
            .bind(attempt_id.to_string())
            .fetch_optional(&mut **tx)
            .await?;
    let (job, state) =
        row.ok_or_else(|| StoreError::Corrupt(format!("no attempt {attempt_id}")))?;
    Ok((parse_uuid(&job)?, parse_state(&state)?))
}

pub(super) async fn complete(
    store: &SqliteStore,
    attempt_id: Uuid,
    output: &Value,
    by: &Resolution,
) -> Result<Completion, StoreError> {
    for _ in 0..CAS_ROUNDS {
        // The write lock first (BEGIN IMMEDIATE): nothing changes the attempt or its job
        // between the reads below and the swap.
        let mut tx = store.begin_write().await?;
        let (job_id, attempt_state) = attempt_head(&mut tx, attempt_id).await?;
        if by.only_unknown && attempt_state != AttemptState::Unknown {
            return release(tx, Completion::NotUnknown(attempt_state)).await;
        }
        let (version, job_state, winner): (i64, String, Option<String>) =
            sqlx::query_as("SELECT version, state, completed_by FROM jobs WHERE id = ?1")
                .bind(job_id.to_string())
                .fetch_one(&mut *tx)
                .await?;
        let winner = winner.as_deref().map(parse_uuid).transpose()?;
        if winner == Some(attempt_id) {
            // The winner's own answer again: it already is the result; no race was lost.
            return release(tx, Completion::Won).await;
        }
        let job_state: JobState = parse_state(&job_state)?;
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
        let ended = if swapped == 1 {
            sqlx::query(concat!(
                "UPDATE attempts SET state = 'succeeded', finished_at = ",
                now!(),
                " WHERE id = ?1 AND state IN ('starting', 'running', 'unknown')"
            ))
            .bind(attempt_id.to_string())
            .execute(&mut *tx)
            .await?
            .rows_affected()
        } else {
            0
        };
        if ended == 0 {
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

/// Discards the `unknown` attempts of a job another attempt just won (see the PostgreSQL
/// twin).
async fn discard_unknown_siblings(
    tx: &mut Transaction<'static, Sqlite>,
    job_id: Uuid,
    winner: Uuid,
) -> Result<(), StoreError> {
    let siblings: Vec<String> = sqlx::query_scalar(concat!(
        "UPDATE attempts SET state = 'discarded', finished_at = ",
        now!(),
        " WHERE job_id = ?1 AND id <> ?2 AND state = 'unknown' RETURNING id"
    ))
    .bind(job_id.to_string())
    .bind(winner.to_string())
    .fetch_all(&mut **tx)
    .await?;
    for sibling in siblings {
        insert_event(
            tx,
            &event(
                job_id,
                parse_uuid(&sibling)?,
                EventKind::AttemptResolved,
                sibling_discarded(winner),
            ),
        )
        .await?;
    }
    Ok(())
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
    let error = storable(error);
    let mut tx = store.begin_write().await?;
    let (job_id, attempt_state) = attempt_head(&mut tx, attempt_id).await?;
    if !by.may_end(attempt_state) {
        return release(tx, FailOutcome::NotOpen(attempt_state)).await;
    }
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
    let end_state = end.state();
    sqlx::query(concat!(
        "UPDATE attempts SET state = ?2, error = ?3, key_spent = ?4, finished_at = ",
        now!(),
        " WHERE id = ?1"
    ))
    .bind(attempt_id.to_string())
    .bind(end_state.as_str())
    .bind(error.to_string())
    .bind(end.spends_key())
    .execute(&mut *tx)
    .await?;
    let detail = json!({ "outcome": end_state, "error": &*error, "note": by.note });
    let resolved = by.event(job_id, attempt_id, EventKind::AttemptResolved, detail);
    insert_event(&mut tx, &resolved).await?;
    let state = settle_job(&mut tx, job_id, Some(retry), Some(&error)).await?;
    tx.commit().await?;
    if state == JobState::Pending {
        store.wake.notify_one();
    }
    Ok(FailOutcome::Recorded(state))
}

pub(super) async fn settle_exhausted(
    store: &SqliteStore,
    job_id: Uuid,
    max_attempts: u32,
) -> Result<bool, StoreError> {
    let mut tx = store.begin_write().await?;
    let id = job_id.to_string();
    let row: Option<(String, i32, i32)> =
        sqlx::query_as("SELECT state, attempts, recoveries FROM jobs WHERE id = ?1")
            .bind(&id)
            .fetch_optional(&mut *tx)
            .await?;
    let Some((state, attempts, recoveries)) = row else {
        return release(tx, false).await;
    };
    let open: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM attempts WHERE job_id = ?1 \
         AND state IN ('starting', 'running', 'unknown'))",
    )
    .bind(&id)
    .fetch_one(&mut *tx)
    .await?;
    if state != "pending" || open || within_budget(attempts, recoveries, max_attempts) {
        return release(tx, false).await;
    }
    let exhausted = Exhausted::new(job_id, attempts, max_attempts);
    sqlx::query(concat!(
        "UPDATE jobs SET state = 'failed', dispatch_at = NULL, version = version + 1, \
         updated_at = ",
        now!(),
        ", error = ?2 WHERE id = ?1"
    ))
    .bind(&id)
    .bind(exhausted.job_error().to_string())
    .execute(&mut *tx)
    .await?;
    insert_event(&mut tx, &exhausted.event()).await?;
    tx.commit().await?;
    Ok(true)
}

pub(super) async fn mark_unknown(
    store: &SqliteStore,
    attempt_id: Uuid,
    why: &Value,
    by: UnknownBy,
) -> Result<bool, StoreError> {
    let why = storable(why);
    let mut tx = store.begin_write().await?;
    let (job_id, _) = attempt_head(&mut tx, attempt_id).await?;
    let (job_state, winner): (String, Option<String>) =
        sqlx::query_as("SELECT state, completed_by FROM jobs WHERE id = ?1")
            .bind(job_id.to_string())
            .fetch_one(&mut *tx)
            .await?;
    let job_state: JobState = parse_state(&job_state)?;
    // A rescuer acts only on a lease that is still expired now (see the PostgreSQL twin).
    let grace = match by {
        UnknownBy::Worker => None,
        UnknownBy::Rescuer { grace } => Some(minus(grace)),
    };
    if winner.is_some() || job_state == JobState::Cancelled {
        let changed = sqlx::query(concat!(
            "UPDATE attempts SET state = 'discarded', error = ?2, finished_at = ",
            now!(),
            " WHERE id = ?1 AND state IN ('starting', 'running') AND (?3 IS NULL OR lease_expires_at < ",
            now!(),
            " OR deadline_at < ",
            now_plus!("?3"),
            ")"
        ))
        .bind(attempt_id.to_string())
        .bind(with_member(&why, "job_state", json!(job_state)).to_string())
        .bind(&grace)
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
    let changed = sqlx::query(concat!(
        "UPDATE attempts SET state = 'unknown', error = ?2, unknown_since = ",
        now!(),
        ", reconcile_at = ",
        now!(),
        " WHERE id = ?1 AND state IN ('starting', 'running') AND (?3 IS NULL OR lease_expires_at < ",
        now!(),
        " OR deadline_at < ",
        now_plus!("?3"),
        ")"
    ))
    .bind(attempt_id.to_string())
    .bind(why.to_string())
    .bind(&grace)
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
        .bind(storable_text(task_id))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}
