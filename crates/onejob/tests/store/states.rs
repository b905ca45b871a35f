//! The state machines in the database: for every pair of job states and every pair of
//! attempt states, a raw `UPDATE` (bypassing the store) that changes `state` succeeds
//! exactly when the domain's `can_become` allows the change, on PostgreSQL and SQLite alike.
//! The triggers and the domain are two lists of the same pairs; this file keeps them equal.

use onejob_domain::{AttemptState, JobState};

use crate::support::{Backend, TestDatabase, created, every_backend_tests, start_for, started};

every_backend_tests!(
    the_database_refuses_every_job_state_change_the_machine_does_not_allow,
    the_database_refuses_every_attempt_state_change_the_machine_does_not_allow,
);

/// The message both backends' triggers refuse a change with.
const REFUSAL: &str = "changes only as the state machine allows";

async fn the_database_refuses_every_job_state_change_the_machine_does_not_allow(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let mut checked = 0;
    for from in JobState::ALL {
        for to in JobState::ALL.into_iter().filter(|to| *to != from) {
            // A job whose one attempt has started (the job is `running`), moved to `from`
            // by a change the machine allows, so that only the change under test is new.
            let job = created(&*store, &format!("{from}-to-{to}")).await;
            let attempt = started(&*store, &start_for(job, 0, "a", false)).await;
            if from != JobState::Running {
                db.exec_sql(set_job_state(job, attempt, from, true))
                    .await
                    .unwrap_or_else(|e| panic!("running -> {from}: {e}"));
            }
            // From `succeeded`, only the state changes: the winner and the result stay, so
            // the result's own write-once trigger has nothing to refuse.
            let change = set_job_state(job, attempt, to, from != JobState::Succeeded);
            let outcome = db.exec_sql(change).await;
            if from.can_become(to) {
                assert_eq!(outcome, Ok(1), "{backend:?}: job {from} -> {to} is allowed");
            } else {
                let error = outcome.expect_err(&format!("{backend:?}: job {from} -> {to}"));
                assert!(error.contains(REFUSAL), "job {from} -> {to}: {error}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 30);
}

async fn the_database_refuses_every_attempt_state_change_the_machine_does_not_allow(
    backend: Backend,
) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let mut checked = 0;
    for from in AttemptState::ALL {
        for to in AttemptState::ALL.into_iter().filter(|to| *to != from) {
            let job = created(&*store, &format!("{from}-to-{to}")).await;
            let attempt = started(&*store, &start_for(job, 0, "a", false)).await;
            if from != AttemptState::Starting {
                db.exec_sql(set_attempt_state(attempt, from))
                    .await
                    .unwrap_or_else(|e| panic!("starting -> {from}: {e}"));
            }
            let outcome = db.exec_sql(set_attempt_state(attempt, to)).await;
            if from.can_become(to) {
                assert_eq!(
                    outcome,
                    Ok(1),
                    "{backend:?}: attempt {from} -> {to} is allowed"
                );
            } else {
                let error = outcome.expect_err(&format!("{backend:?}: attempt {from} -> {to}"));
                assert!(error.contains(REFUSAL), "attempt {from} -> {to}: {error}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 42);
}

/// An `UPDATE` that moves the job to `to`, with the columns its checks tie to the state
/// (the winner and result for `succeeded`, the error for `failed`) when `with_columns`.
fn set_job_state(job: uuid::Uuid, attempt: uuid::Uuid, to: JobState, with_columns: bool) -> String {
    if !with_columns {
        return format!("UPDATE jobs SET state = '{to}' WHERE id = '{job}'");
    }
    let succeeded = to == JobState::Succeeded;
    let winner = if succeeded {
        format!("'{attempt}'")
    } else {
        "NULL".into()
    };
    let result = if succeeded { "'{}'" } else { "NULL" };
    let error = if to == JobState::Failed {
        "'{}'"
    } else {
        "NULL"
    };
    format!(
        "UPDATE jobs SET state = '{to}', completed_by = {winner}, result = {result}, \
         error = {error} WHERE id = '{job}'"
    )
}

/// An `UPDATE` that moves the attempt to `to`.
fn set_attempt_state(attempt: uuid::Uuid, to: AttemptState) -> String {
    format!("UPDATE attempts SET state = '{to}' WHERE id = '{attempt}'")
}
