//! The store's records read from a row of any backend, once: which column becomes which
//! field, and what is corrupt (a state spelled unknown, a hash of the wrong length).

use onejob_domain::{Fingerprint, KeyHash, Principal};
use uuid::Uuid;

use super::{
    ApiKeyRecord, ApiKeySummary, AttemptRecord, CertificateRecord, EventRecord, JobRecord, RunStep,
    StoreError,
    backend::{Backend, Row},
};

/// A state column parsed; an unknown spelling is corrupt data.
pub(crate) fn state<B: Backend, T>(row: &Row<B>, column: &str) -> Result<T, StoreError>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    B::text(row, column)?
        .parse::<T>()
        .map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// A key hash column.
fn key_hash<B: Backend>(row: &Row<B>) -> Result<KeyHash, StoreError> {
    Ok(KeyHash(B::bytes(row, "key_hash")?.try_into().map_err(
        |_| StoreError::Corrupt("key_hash is not 32 bytes".into()),
    )?))
}

/// The key a job is found by (`tenant`, `user_id`, `key_hash`), as the replay cache keeps it.
pub(crate) fn key_of<B: Backend>(row: &Row<B>) -> Result<(String, String, KeyHash), StoreError> {
    Ok((
        B::text(row, "tenant")?,
        B::text(row, "user_id")?,
        key_hash::<B>(row)?,
    ))
}

/// The run a job is a later step of (`run_key`, `step`), where it is one.
fn run_step<B: Backend>(row: &Row<B>) -> Result<Option<RunStep>, StoreError> {
    match (B::opt_bytes(row, "run_key")?, B::opt_int32(row, "step")?) {
        (Some(key), Some(step)) => {
            let key = <[u8; 32]>::try_from(key.as_slice())
                .map_err(|_| StoreError::Corrupt("run_key is not 32 bytes".into()))?;
            Ok(Some(RunStep {
                key: KeyHash(key),
                step,
            }))
        }
        (None, None) => Ok(None),
        _ => Err(StoreError::Corrupt(
            "a job has a run_key without a step, or a step without a run_key".into(),
        )),
    }
}

/// A job (the job columns).
pub(crate) fn job<B: Backend>(row: &Row<B>) -> Result<JobRecord, StoreError> {
    Ok(JobRecord {
        id: B::uuid(row, "id")?,
        owner: Principal::new(B::text(row, "tenant")?, B::text(row, "user_id")?),
        key_hash: key_hash::<B>(row)?,
        kind: B::text(row, "kind")?,
        fingerprint: Fingerprint::from_slice(&B::bytes(row, "fingerprint")?)
            .ok_or_else(|| StoreError::Corrupt("fingerprint is not 32 bytes".into()))?,
        params: B::json(row, "params")?,
        request_body: B::opt_text(row, "request_body")?,
        run: run_step::<B>(row)?,
        state: state::<B, _>(row, "state")?,
        version: B::int(row, "version")?,
        attempts: B::int32(row, "attempts")?,
        recoveries: B::int32(row, "recoveries")?,
        completed_by: B::opt_uuid(row, "completed_by")?,
        result: B::opt_json(row, "result")?,
        error: B::opt_json(row, "error")?,
        created_at: B::time(row, "created_at")?,
        updated_at: B::time(row, "updated_at")?,
    })
}

/// An attempt (the attempt columns).
pub(crate) fn attempt<B: Backend>(row: &Row<B>) -> Result<AttemptRecord, StoreError> {
    Ok(AttemptRecord {
        id: B::uuid(row, "id")?,
        job_id: B::uuid(row, "job_id")?,
        number: B::int32(row, "number")?,
        provider: B::text(row, "provider")?,
        state: state::<B, _>(row, "state")?,
        hedge: B::flag(row, "hedge")?,
        task_id: B::opt_text(row, "task_id")?,
        worker: B::opt_text(row, "worker")?,
        lease_expires_at: B::opt_time(row, "lease_expires_at")?,
        deadline_at: B::opt_time(row, "deadline_at")?,
        started_at: B::time(row, "started_at")?,
        acknowledged_at: B::opt_time(row, "acknowledged_at")?,
        finished_at: B::opt_time(row, "finished_at")?,
        unknown_since: B::opt_time(row, "unknown_since")?,
        upstream_key: B::opt_text(row, "upstream_key")?,
        key_spent: B::flag(row, "key_spent")?,
        error: B::opt_json(row, "error")?,
        reconcile_checks: B::int32(row, "reconcile_checks")?,
    })
}

/// An event (the event columns).
pub(crate) fn event<B: Backend>(row: &Row<B>) -> Result<EventRecord, StoreError> {
    Ok(EventRecord {
        id: B::int(row, "id")?,
        job_id: B::uuid(row, "job_id")?,
        attempt_id: B::opt_uuid(row, "attempt_id")?,
        kind: state::<B, _>(row, "kind")?,
        actor: B::opt_text(row, "actor")?,
        detail: B::json(row, "detail")?,
        at: B::time(row, "at")?,
    })
}

/// An API key's summary (the key columns).
pub(crate) fn key_summary<B: Backend>(row: &Row<B>) -> Result<ApiKeySummary, StoreError> {
    Ok(ApiKeySummary {
        id: B::text(row, "id")?,
        principal: Principal::new(B::text(row, "tenant")?, B::text(row, "user_id")?),
        operator: B::flag(row, "operator")?,
        created_at: B::time(row, "created_at")?,
        revoked_at: B::opt_time(row, "revoked_at")?,
    })
}

/// An API key with its secret's hash.
pub(crate) fn key<B: Backend>(row: &Row<B>) -> Result<ApiKeyRecord, StoreError> {
    Ok(ApiKeyRecord {
        id: B::text(row, "id")?,
        principal: Principal::new(B::text(row, "tenant")?, B::text(row, "user_id")?),
        salt: B::bytes(row, "salt")?,
        secret_hash: B::bytes(row, "secret_hash")?,
        operator: B::flag(row, "operator")?,
    })
}

/// A verification run (the certificate columns).
pub(crate) fn certificate<B: Backend>(row: &Row<B>) -> Result<CertificateRecord, StoreError> {
    Ok(CertificateRecord {
        id: B::uuid(row, "id")?,
        provider: B::text(row, "provider")?,
        kind: B::text(row, "kind")?,
        template_hash: B::text(row, "template_hash")?,
        schema_hash: B::text(row, "schema_hash")?,
        settings_hash: B::text(row, "settings_hash")?,
        passed: B::flag(row, "passed")?,
        report: B::json(row, "report")?,
        created_at: B::time(row, "created_at")?,
    })
}

/// The `id` column of each row.
pub(crate) fn ids<B: Backend>(rows: &[Row<B>]) -> Result<Vec<Uuid>, StoreError> {
    rows.iter().map(|row| B::uuid(row, "id")).collect()
}

/// Each row read by `read`.
pub(crate) fn all<B: Backend, T>(
    rows: &[Row<B>],
    read: fn(&Row<B>) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    rows.iter().map(read).collect()
}
