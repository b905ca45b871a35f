//! The statement interface on PostgreSQL: the SQL the written-once transitions run.
//!
//! A transition's exclusion is the job's row lock: `lock_job` takes `FOR UPDATE`, and a
//! start's `lock_due_job` takes `FOR UPDATE SKIP LOCKED`, so a second starter skips a job
//! another is starting instead of queueing behind it. Under READ COMMITTED each statement
//! after the lock sees what the previous holder committed.

use std::time::Duration;

use async_trait::async_trait;
use onejob_domain::{AttemptState, JobState, Principal};
use serde_json::Value;
use sqlx::{Postgres, types::Json};
use uuid::Uuid;

use super::{PgAttemptRow, PgJobRow, PgStore, insert_event, parse_state, secs};
use crate::store::{
    AttemptRecord, AttemptStart, JobRecord, NewEvent, StoreError,
    records::{storable, storable_text},
    statements::{JobHead, Statements, Tx},
};

type Row = (String, i64, i32, i32, Option<Uuid>);

fn head((state, version, attempts, recoveries, completed_by): Row) -> Result<JobHead, StoreError> {
    Ok(JobHead {
        state: parse_state(&state)?,
        version,
        attempts,
        recoveries,
        completed_by,
    })
}

#[async_trait]
impl Statements for PgStore {
    type Db = Postgres;

    async fn begin(&self) -> Result<Tx<Self>, StoreError> {
        Ok(self.pool.begin().await?)
    }

    fn dispatch_changed(&self) {
        // The jobs table's trigger notifies every node's LISTEN when dispatch_at is set.
    }

    async fn lock_due_job(
        tx: &mut Tx<Self>,
        job_id: Uuid,
    ) -> Result<Option<(JobHead, bool)>, StoreError> {
        let row: Option<(String, i64, i32, i32, Option<Uuid>, bool)> = sqlx::query_as(
            "SELECT state, version, attempts, recoveries, completed_by, \
             COALESCE(dispatch_at <= now(), false) FROM jobs WHERE id = $1 FOR UPDATE SKIP LOCKED",
        )
        .bind(job_id)
        .fetch_optional(&mut **tx)
        .await?;
        row.map(
            |(state, version, attempts, recoveries, completed_by, due)| {
                Ok((
                    head((state, version, attempts, recoveries, completed_by))?,
                    due,
                ))
            },
        )
        .transpose()
    }

    async fn job_exists(tx: &mut Tx<Self>, job_id: Uuid) -> Result<bool, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM jobs WHERE id = $1)")
                .bind(job_id)
                .fetch_one(&mut **tx)
                .await?,
        )
    }

    async fn lock_job(tx: &mut Tx<Self>, job_id: Uuid) -> Result<Option<JobHead>, StoreError> {
        let row: Option<Row> = sqlx::query_as(
            "SELECT state, version, attempts, recoveries, completed_by FROM jobs \
             WHERE id = $1 FOR UPDATE",
        )
        .bind(job_id)
        .fetch_optional(&mut **tx)
        .await?;
        row.map(head).transpose()
    }

    async fn lock_owned_job(
        tx: &mut Tx<Self>,
        owner: &Principal,
        job_id: Uuid,
    ) -> Result<Option<JobRecord>, StoreError> {
        let row: Option<PgJobRow> = sqlx::query_as(concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE id = $1 AND tenant = $2 AND user_id = $3 FOR UPDATE"
        ))
        .bind(job_id)
        .bind(&owner.tenant)
        .bind(&owner.user)
        .fetch_optional(&mut **tx)
        .await?;
        row.map(JobRecord::try_from).transpose()
    }

    async fn reload_job(tx: &mut Tx<Self>, job_id: Uuid) -> Result<JobRecord, StoreError> {
        let row: PgJobRow = sqlx::query_as(concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE id = $1"
        ))
        .bind(job_id)
        .fetch_one(&mut **tx)
        .await?;
        JobRecord::try_from(row)
    }

    async fn job_of(tx: &mut Tx<Self>, attempt_id: Uuid) -> Result<Option<Uuid>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT job_id FROM attempts WHERE id = $1")
                .bind(attempt_id)
                .fetch_optional(&mut **tx)
                .await?,
        )
    }

    async fn attempt_state(
        tx: &mut Tx<Self>,
        attempt_id: Uuid,
    ) -> Result<AttemptState, StoreError> {
        let state: String = sqlx::query_scalar("SELECT state FROM attempts WHERE id = $1")
            .bind(attempt_id)
            .fetch_one(&mut **tx)
            .await?;
        parse_state(&state)
    }

    async fn open_attempts(
        tx: &mut Tx<Self>,
        job_id: Uuid,
    ) -> Result<Vec<(Uuid, AttemptState)>, StoreError> {
        let open: Vec<(Uuid, String)> = sqlx::query_as(
            "SELECT id, state FROM attempts WHERE job_id = $1 \
             AND state IN ('starting', 'running', 'unknown') ORDER BY number",
        )
        .bind(job_id)
        .fetch_all(&mut **tx)
        .await?;
        open.into_iter()
            .map(|(id, state)| Ok((id, parse_state(&state)?)))
            .collect()
    }

    async fn attempt_states(
        tx: &mut Tx<Self>,
        job_id: Uuid,
    ) -> Result<Vec<AttemptState>, StoreError> {
        let states: Vec<String> =
            sqlx::query_scalar("SELECT state FROM attempts WHERE job_id = $1")
                .bind(job_id)
                .fetch_all(&mut **tx)
                .await?;
        states.iter().map(|s| parse_state(s)).collect()
    }

    async fn live_attempts(
        tx: &mut Tx<Self>,
        job_id: Uuid,
    ) -> Result<Vec<AttemptRecord>, StoreError> {
        let live: Vec<PgAttemptRow> = sqlx::query_as(concat!(
            "SELECT ",
            attempt_columns!(),
            " FROM attempts WHERE job_id = $1 AND state IN ('starting', 'running') ORDER BY number"
        ))
        .bind(job_id)
        .fetch_all(&mut **tx)
        .await?;
        live.into_iter().map(AttemptRecord::try_from).collect()
    }

    async fn last_provider(tx: &mut Tx<Self>, job_id: Uuid) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT provider FROM attempts WHERE job_id = $1 ORDER BY number DESC LIMIT 1",
        )
        .bind(job_id)
        .fetch_optional(&mut **tx)
        .await?)
    }

    async fn insert_attempt(
        tx: &mut Tx<Self>,
        start: &AttemptStart,
        number: i32,
    ) -> Result<AttemptRecord, StoreError> {
        let row: PgAttemptRow = sqlx::query_as(concat!(
            "INSERT INTO attempts (id, job_id, number, provider, state, hedge, worker, \
             lease_expires_at, deadline_at, upstream_key) VALUES ($1, $2, $3, $4, 'starting', $5, \
             $6, now() + make_interval(secs => $7), now() + make_interval(secs => $8), $9) RETURNING ",
            attempt_columns!()
        ))
        .bind(Uuid::now_v7())
        .bind(start.job_id)
        .bind(number)
        .bind(&start.provider)
        .bind(start.hedge)
        .bind(&start.worker)
        .bind(secs(start.lease))
        .bind(secs(start.timeout))
        .bind(&start.upstream_key)
        .fetch_one(&mut **tx)
        .await?;
        AttemptRecord::try_from(row)
    }

    async fn mark_job_started(tx: &mut Tx<Self>, job_id: Uuid) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE jobs SET state = 'running', attempts = attempts + 1, version = version + 1, \
             dispatch_at = NULL, updated_at = now() WHERE id = $1",
        )
        .bind(job_id)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    async fn keep_task_id(
        tx: &mut Tx<Self>,
        attempt_id: Uuid,
        task_id: Option<&str>,
    ) -> Result<AttemptState, StoreError> {
        let state: String = sqlx::query_scalar(
            "UPDATE attempts SET task_id = COALESCE(task_id, $2) WHERE id = $1 RETURNING state",
        )
        .bind(attempt_id)
        .bind(task_id.map(storable_text))
        .fetch_one(&mut **tx)
        .await?;
        parse_state(&state)
    }

    async fn mark_running(tx: &mut Tx<Self>, attempt_id: Uuid) -> Result<(), StoreError> {
        sqlx::query("UPDATE attempts SET state = 'running', acknowledged_at = now() WHERE id = $1")
            .bind(attempt_id)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    async fn cancel_acknowledged(tx: &mut Tx<Self>, attempt_id: Uuid) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE attempts SET state = 'cancelled', key_spent = true, acknowledged_at = now(), \
             finished_at = now() WHERE id = $1",
        )
        .bind(attempt_id)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    async fn schedule_hedge(
        tx: &mut Tx<Self>,
        job_id: Uuid,
        after: Duration,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE jobs SET dispatch_at = now() + make_interval(secs => $2), \
             version = version + 1, updated_at = now() WHERE id = $1 AND state = 'running'",
        )
        .bind(job_id)
        .bind(secs(after))
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    async fn discard_attempt(tx: &mut Tx<Self>, attempt_id: Uuid) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE attempts SET state = 'discarded', finished_at = now() \
             WHERE id = $1 AND state IN ('starting', 'running', 'unknown')",
        )
        .bind(attempt_id)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    async fn swap_result(
        tx: &mut Tx<Self>,
        job_id: Uuid,
        version: i64,
        output: &Value,
        attempt_id: Uuid,
    ) -> Result<bool, StoreError> {
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
        .execute(&mut **tx)
        .await?
        .rows_affected();
        if swapped != 1 {
            return Ok(false);
        }
        let ended = sqlx::query(
            "UPDATE attempts SET state = 'succeeded', finished_at = now() \
             WHERE id = $1 AND state IN ('starting', 'running', 'unknown')",
        )
        .bind(attempt_id)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        Ok(ended == 1)
    }

    async fn discard_unknown_siblings(
        tx: &mut Tx<Self>,
        job_id: Uuid,
        winner: Uuid,
    ) -> Result<Vec<Uuid>, StoreError> {
        Ok(sqlx::query_scalar(
            "UPDATE attempts SET state = 'discarded', finished_at = now() \
             WHERE job_id = $1 AND id <> $2 AND state = 'unknown' RETURNING id",
        )
        .bind(job_id)
        .bind(winner)
        .fetch_all(&mut **tx)
        .await?)
    }

    async fn end_attempt(
        tx: &mut Tx<Self>,
        attempt_id: Uuid,
        state: AttemptState,
        error: &Value,
        key_spent: bool,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE attempts SET state = $2, error = $3, key_spent = $4, finished_at = now() \
             WHERE id = $1",
        )
        .bind(attempt_id)
        .bind(state.as_str())
        .bind(Json(&*storable(error)))
        .bind(key_spent)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    async fn set_job_state(
        tx: &mut Tx<Self>,
        job_id: Uuid,
        state: JobState,
        backoff: Duration,
        error: Option<&Value>,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE jobs SET state = $2, version = version + 1, updated_at = now(), \
             dispatch_at = CASE WHEN $2 = 'pending' THEN now() + make_interval(secs => $3) ELSE NULL END, \
             error = $4 WHERE id = $1",
        )
        .bind(job_id)
        .bind(state.as_str())
        .bind(secs(backoff))
        .bind(error.map(Json))
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    async fn fail_job(tx: &mut Tx<Self>, job_id: Uuid, error: &Value) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE jobs SET state = 'failed', dispatch_at = NULL, version = version + 1, \
             updated_at = now(), error = $2 WHERE id = $1",
        )
        .bind(job_id)
        .bind(Json(error))
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    async fn discard_live(
        tx: &mut Tx<Self>,
        attempt_id: Uuid,
        error: &Value,
        grace: Option<Duration>,
    ) -> Result<bool, StoreError> {
        let changed = sqlx::query(
            "UPDATE attempts SET state = 'discarded', error = $2, finished_at = now() \
             WHERE id = $1 AND state IN ('starting', 'running') AND ($3::float8 IS NULL \
             OR lease_expires_at < now() OR deadline_at < now() - make_interval(secs => $3))",
        )
        .bind(attempt_id)
        .bind(Json(error))
        .bind(grace.map(secs))
        .execute(&mut **tx)
        .await?
        .rows_affected();
        Ok(changed > 0)
    }

    async fn make_unknown(
        tx: &mut Tx<Self>,
        attempt_id: Uuid,
        why: &Value,
        grace: Option<Duration>,
    ) -> Result<bool, StoreError> {
        let changed = sqlx::query(
            "UPDATE attempts SET state = 'unknown', error = $2, unknown_since = now(), \
             reconcile_at = now() WHERE id = $1 AND state IN ('starting', 'running') \
             AND ($3::float8 IS NULL OR lease_expires_at < now() \
             OR deadline_at < now() - make_interval(secs => $3))",
        )
        .bind(attempt_id)
        .bind(Json(why))
        .bind(grace.map(secs))
        .execute(&mut **tx)
        .await?
        .rows_affected();
        Ok(changed > 0)
    }

    async fn cancel_job_row(tx: &mut Tx<Self>, job_id: Uuid) -> Result<Vec<Uuid>, StoreError> {
        sqlx::query(
            "UPDATE jobs SET state = 'cancelled', dispatch_at = NULL, version = version + 1, \
             updated_at = now() WHERE id = $1",
        )
        .bind(job_id)
        .execute(&mut **tx)
        .await?;
        Ok(sqlx::query_scalar(
            "UPDATE attempts SET state = 'cancelled', finished_at = now() \
             WHERE job_id = $1 AND state = 'unknown' RETURNING id",
        )
        .bind(job_id)
        .fetch_all(&mut **tx)
        .await?)
    }

    async fn recover_job_row(tx: &mut Tx<Self>, job_id: Uuid) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE jobs SET state = 'pending', error = NULL, recoveries = recoveries + 1, \
             dispatch_at = now(), version = version + 1, updated_at = now() WHERE id = $1",
        )
        .bind(job_id)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    async fn insert_event(tx: &mut Tx<Self>, event: &NewEvent) -> Result<(), StoreError> {
        insert_event(tx, event).await
    }
}
