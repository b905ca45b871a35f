//! The offline checker catches what it claims to: a clean synthetic history passes, and each
//! broken guarantee, planted one at a time, is reported under its rule. (These run in every
//! `cargo test --workspace`; the fault scenarios that produce real histories are in
//! `tests/chaos/`.)

use onejob_chaos::{
    checker::{Report, check},
    history::Record,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const JOB: &str = "01a22a98-4599-75a0-b1cb-7cdbcd0f53a7";
const ATTEMPT: &str = "01a22a98-45a0-7499-8000-000000000001";
const SECOND: &str = "01a22a98-45a0-7499-8000-000000000002";

fn result() -> Value {
    json!({"text": "fake answer: a fox"})
}

fn body() -> Value {
    json!({"kind": "chat.completion", "params": {"prompt": "a fox"}})
}

fn request(seq: u64, key: &str, body: Value) -> Record {
    Record::Request {
        t_ms: seq,
        seq,
        client: "c".into(),
        node: 0,
        method: "POST".into(),
        path: "/v1/jobs".into(),
        key: Some(key.into()),
        body: Some(body),
    }
}

fn response(seq: u64, status: u16, body: Value) -> Record {
    Record::Response {
        t_ms: seq,
        seq,
        status: Some(status),
        content_type: Some("application/json".into()),
        retry_after: None,
        replayed: None,
        body: Some(body),
        error: None,
        job_id: None,
    }
}

fn succeeded_view() -> Value {
    json!({"id": JOB, "state": "succeeded", "result": result(), "completed_by": ATTEMPT})
}

fn attempt(id: &str, number: u64, state: &str, task: &str) -> Value {
    json!({"id": id, "job_id": JOB, "number": number, "provider": "fake", "state": state,
           "hedge": false, "task_id": task, "started_at": "2026-11-30T04:00:00Z",
           "acknowledged_at": "2026-11-30T04:00:01Z", "finished_at": "2026-11-30T04:00:02Z"})
}

fn event(id: i64, kind: &str, attempt: Option<&str>, detail: Value) -> Value {
    json!({"id": id, "kind": kind, "at": "2026-11-30T04:00:00Z", "attempt_id": attempt, "detail": detail})
}

fn sha(value: &Value) -> String {
    hex::encode(Sha256::digest(onejob_domain::fingerprint::canonical_bytes(
        value,
    )))
}

/// One key submitted twice (created, then replayed once it ran), one attempt, one side
/// effect, the read-back and the listing.
fn clean() -> Vec<Record> {
    vec![
        request(1, "k", body()),
        response(1, 201, json!({"id": JOB, "state": "pending"})),
        request(2, "k", body()),
        response(2, 200, succeeded_view()),
        Record::SideEffect {
            provider: "fake".into(),
            input_hash: "h".into(),
            input: body(),
            idempotency_key: Some(format!("onejob:{JOB}")),
            task_id: Some("task_1".into()),
            task: Some(json!({"task_id": "task_1", "status": "succeeded", "result": result()})),
        },
        Record::Listing {
            job_ids: vec![JOB.into()],
        },
        Record::Job {
            key: "k".into(),
            job: succeeded_view(),
            attempts: vec![attempt(ATTEMPT, 1, "succeeded", "task_1")],
            events: vec![
                event(1, "created", None, json!({})),
                event(2, "attempt_started", Some(ATTEMPT), json!({})),
                event(3, "won", Some(ATTEMPT), json!({"sha256": sha(&result())})),
            ],
        },
    ]
}

fn rules(report: &Report) -> Vec<&'static str> {
    report.violations.iter().map(|v| v.rule).collect()
}

/// Plants a change into the clean history and returns the rules the checker reports.
fn broken(change: impl FnOnce(&mut Vec<Record>)) -> Vec<&'static str> {
    let mut history = clean();
    change(&mut history);
    rules(&check(&history))
}

fn job_dump(history: &mut [Record]) -> (&mut Value, &mut Vec<Value>, &mut Vec<Value>) {
    for record in history.iter_mut() {
        if let Record::Job {
            job,
            attempts,
            events,
            ..
        } = record
        {
            return (job, attempts, events);
        }
    }
    panic!("no job dump");
}

#[test]
fn a_clean_history_passes() {
    let report = check(&clean());
    assert!(report.is_clean(), "{:?}", report.violations);
    assert_eq!(report.stats.jobs, 1);
    assert_eq!(report.stats.side_effects, 1);
    assert_eq!(report.stats.statuses.get(&201), Some(&1));
}

#[test]
fn a_500_or_a_bare_503_breaks_the_answers_rule() {
    assert!(
        broken(|h| {
            h.push(request(9, "k", body()));
            h.push(response(9, 500, json!("thread panicked at src/x.rs")));
        })
        .contains(&"answers")
    );
    assert!(
        broken(|h| {
            h.push(request(9, "k", body()));
            h.push(response(
                9,
                503,
                json!({"type": "https://onejob.dev/problems/unavailable"}),
            ));
        })
        .contains(&"answers")
    );
}

#[test]
fn a_second_job_for_a_key_breaks_one_job_per_key() {
    assert!(
        broken(|h| {
            h.push(request(9, "k", body()));
            h.push(response(9, 201, json!({"id": SECOND, "state": "pending"})));
        })
        .contains(&"one-job-per-key")
    );
    // A job in the listing that no key reads back.
    assert!(
        broken(|h| {
            for record in h.iter_mut() {
                if let Record::Listing { job_ids } = record {
                    job_ids.push(SECOND.into());
                }
            }
        })
        .contains(&"one-job-per-key")
    );
    // An acknowledged job that is gone.
    assert!(
        broken(|h| h.retain(|r| !matches!(r, Record::Job { .. }))).contains(&"one-job-per-key")
    );
}

#[test]
fn refusing_the_same_body_as_a_conflict_breaks_intent() {
    assert!(
        broken(|h| {
            h.push(request(
                9,
                "k",
                json!({"params": {"prompt": "a fox"}, "kind": "chat.completion"}),
            ));
            h.push(response(
                9,
                422,
                json!({"type": "https://onejob.dev/problems/key-reused"}),
            ));
        })
        .contains(&"intent")
    );
    // A different body refused is what keys are for.
    assert!(
        broken(|h| {
            h.push(request(
                9,
                "k",
                json!({"kind": "chat.completion", "params": {"prompt": "a cat"}}),
            ));
            h.push(response(
                9,
                422,
                json!({"type": "https://onejob.dev/problems/key-reused"}),
            ));
        })
        .is_empty()
    );
}

#[test]
fn an_overwritten_result_breaks_result_once() {
    // A client saw another result than the one the job ends with.
    assert!(
        broken(|h| {
            h.push(request(9, "k", body()));
            let mut view = succeeded_view();
            view["result"] = json!({"text": "another answer"});
            h.push(response(9, 200, view));
        })
        .contains(&"result-once")
    );
    // Two won events.
    assert!(
        broken(|h| {
            let (_, _, events) = job_dump(h);
            events.push(event(
                4,
                "won",
                Some(ATTEMPT),
                json!({"sha256": sha(&result())}),
            ));
        })
        .contains(&"result-once")
    );
    // A pending view with a result.
    assert!(
        broken(|h| {
            h.push(request(9, "k", body()));
            h.push(response(
                9,
                200,
                json!({"id": JOB, "state": "running", "result": result()}),
            ));
        })
        .contains(&"result-once")
    );
}

#[test]
fn a_result_that_is_not_the_winners_output_breaks_winner_output() {
    let report = broken(|h| {
        for record in h.iter_mut() {
            if let Record::SideEffect { task, .. } = record {
                *task = Some(json!({"status": "succeeded", "result": {"text": "other"}}));
            }
        }
    });
    assert!(report.contains(&"winner-output"), "{report:?}");
}

#[test]
fn an_attempt_started_beside_a_live_one_breaks_the_guard() {
    let report = broken(|h| {
        let (_, attempts, events) = job_dump(h);
        attempts.push(attempt(SECOND, 2, "discarded", "task_2"));
        // The second starts while the first is still live (before its `won`).
        *events = vec![
            event(1, "created", None, json!({})),
            event(2, "attempt_started", Some(ATTEMPT), json!({})),
            event(3, "attempt_started", Some(SECOND), json!({})),
            event(4, "won", Some(ATTEMPT), json!({"sha256": sha(&result())})),
            event(5, "race_lost", Some(SECOND), json!({})),
        ];
    });
    assert!(report.contains(&"guard"), "{report:?}");
    // After the first has ended, it is allowed.
    let report = broken(|h| {
        let (_, attempts, events) = job_dump(h);
        attempts.push(attempt(SECOND, 2, "discarded", "task_2"));
        events.push(event(7, "attempt_started", Some(SECOND), json!({})));
        events.push(event(8, "race_lost", Some(SECOND), json!({})));
    });
    assert!(!report.contains(&"guard"), "{report:?}");
}

#[test]
fn more_side_effects_than_attempts_breaks_side_effects() {
    let report = broken(|h| {
        h.push(Record::SideEffect {
            provider: "fake".into(),
            input_hash: "h".into(),
            input: body(),
            idempotency_key: Some(format!("onejob:{JOB}")),
            task_id: Some("task_9".into()),
            task: None,
        });
    });
    assert!(report.contains(&"side-effects"), "{report:?}");
}

#[test]
fn a_failed_attempt_whose_task_succeeded_breaks_proof() {
    let report = broken(|h| {
        let (_, attempts, events) = job_dump(h);
        attempts.insert(0, attempt(SECOND, 1, "failed", "task_0"));
        attempts[1]["number"] = json!(2);
        *events = vec![
            event(1, "created", None, json!({})),
            event(2, "attempt_started", Some(SECOND), json!({})),
            event(3, "attempt_unknown", Some(SECOND), json!({})),
            event(
                4,
                "attempt_resolved",
                Some(SECOND),
                json!({"outcome": "failed"}),
            ),
            event(5, "attempt_started", Some(ATTEMPT), json!({})),
            event(6, "won", Some(ATTEMPT), json!({"sha256": sha(&result())})),
        ];
        h.push(Record::SideEffect {
            provider: "fake".into(),
            input_hash: "h".into(),
            input: body(),
            idempotency_key: Some(format!("onejob:{JOB}")),
            task_id: Some("task_0".into()),
            task: Some(json!({"task_id": "task_0", "status": "succeeded", "result": result()})),
        });
    });
    assert_eq!(report, vec!["proof"], "only the proof rule is broken");
}

/// A synchronous (chat) winner has no task id: it is checked against the answer its upstream
/// cached under the job's key, the one side effect carrying that key.
fn synchronous(history: &mut [Record]) {
    for record in history.iter_mut() {
        match record {
            Record::SideEffect {
                provider,
                task_id,
                task,
                ..
            } => {
                *provider = "chat".into();
                *task_id = None;
                *task = Some(
                    json!({"status": "succeeded", "result": result(), "answer_id": "chatcmpl-1"}),
                );
            }
            Record::Job { attempts, .. } => {
                let attempt = attempts[0].as_object_mut().expect("an attempt object");
                attempt.remove("task_id");
                attempt.insert("provider".into(), json!("chat"));
            }
            _ => {}
        }
    }
}

#[test]
fn a_synchronous_winner_is_checked_against_the_answer_cached_under_its_key() {
    assert!(broken(|h| synchronous(h)).is_empty());
    let report = broken(|h| {
        synchronous(h);
        for record in h.iter_mut() {
            if let Record::SideEffect { task, .. } = record {
                *task = Some(json!({"status": "succeeded", "result": {"text": "other"}}));
            }
        }
    });
    assert_eq!(report, vec!["winner-output"], "{report:?}");
    // A second answer under the job's key: which one won is unknowable, and one too many ran.
    let report = broken(|h| {
        synchronous(h);
        h.push(Record::SideEffect {
            provider: "chat".into(),
            input_hash: "h".into(),
            input: body(),
            idempotency_key: Some(format!("onejob:{JOB}:2")),
            task_id: None,
            task: Some(json!({"status": "succeeded", "result": result()})),
        });
    });
    assert!(
        report.contains(&"winner-output") && report.contains(&"side-effects"),
        "{report:?}"
    );
}
