//! The offline checker catches what it claims to: a clean synthetic history passes, and each
//! broken guarantee, planted one at a time, is reported under its rule. (These run in every
//! `cargo test --workspace`; the fault scenarios that produce real histories are in
//! `tests/chaos/`.)

use onejob_chaos::{
    checker::{Report, check},
    history::{Expectation, Record},
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

// The gateway (`POST /v1/chat/completions`): answers name their job in a header, errors
// come in OpenAI's shape, the job's result is the upstream's whole completion; and a
// history may promise more than DESIGN §2 (`Record::Expect`).

fn completion() -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "fake-chat",
           "choices": [{"index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "{\"text\":\"a fox\"}", "refusal": null}}],
           "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}})
}

fn chat_body(stream: bool) -> Value {
    json!({"model": "vanish", "stream": stream, "messages": [{"role": "user", "content": "a fox"}]})
}

fn chat_request(seq: u64, key: &str, body: Value) -> Record {
    Record::Request {
        t_ms: seq,
        seq,
        client: "c".into(),
        node: 0,
        method: "POST".into(),
        path: "/v1/chat/completions".into(),
        key: Some(key.into()),
        body: Some(body),
    }
}

/// A gateway answer: `job` in its `onejob-job-id` header, `Retry-After` on errors that have
/// one.
fn chat_response(seq: u64, status: u16, body: Value, job: Option<&str>) -> Record {
    Record::Response {
        t_ms: seq,
        seq,
        status: Some(status),
        content_type: Some("application/json".into()),
        retry_after: matches!(status, 409 | 503).then(|| "1".into()),
        replayed: None,
        body: Some(body),
        error: None,
        job_id: job.map(Into::into),
    }
}

/// A call whose client went away: no status, where it went in the error.
fn vanished(seq: u64) -> Record {
    Record::Response {
        t_ms: seq,
        seq,
        status: None,
        content_type: None,
        retry_after: None,
        replayed: None,
        body: None,
        error: Some("client went away 2 ms after sending the whole request (after-send)".into()),
        job_id: None,
    }
}

fn gateway_job() -> Value {
    json!({"id": JOB, "kind": "chat.gateway", "state": "succeeded", "result": completion(),
           "completed_by": ATTEMPT})
}

fn all_expectations() -> Record {
    Record::Expect {
        expectations: vec![
            Expectation::EveryKeyAnswered,
            Expectation::OneSideEffectPerKey,
            Expectation::NeverUnknown,
        ],
    }
}

/// A gateway call whose client went away (a stream, request 1), then its retry without the
/// stream answered with the completion (request 10: calls planted between are not the
/// key's last); one upstream call, cached by the fake under the job's key.
fn gateway() -> Vec<Record> {
    let mut chat_attempt = attempt(ATTEMPT, 1, "succeeded", "unused");
    let fields = chat_attempt.as_object_mut().expect("an attempt object");
    fields.remove("task_id");
    fields.insert("provider".into(), json!("chat"));
    vec![
        all_expectations(),
        chat_request(1, "g", chat_body(true)),
        vanished(1),
        chat_request(10, "g", chat_body(false)),
        chat_response(10, 200, completion(), Some(JOB)),
        Record::SideEffect {
            provider: "chat".into(),
            input_hash: "h".into(),
            input: chat_body(false)["messages"].clone(),
            idempotency_key: Some(format!("onejob:{JOB}")),
            task_id: None,
            task: Some(json!({"status": "succeeded", "result": {"text": "a fox"},
                              "answer_id": "chatcmpl-1", "answer": completion()})),
        },
        Record::Listing {
            job_ids: vec![JOB.into()],
        },
        Record::Job {
            key: "g".into(),
            job: gateway_job(),
            attempts: vec![chat_attempt],
            events: vec![
                event(1, "created", None, json!({})),
                event(2, "attempt_started", Some(ATTEMPT), json!({})),
                event(
                    3,
                    "won",
                    Some(ATTEMPT),
                    json!({"sha256": sha(&completion())}),
                ),
            ],
        },
    ]
}

/// Plants a change into the clean gateway history and returns the rules reported.
fn broken_gateway(change: impl FnOnce(&mut Vec<Record>)) -> Vec<&'static str> {
    let mut history = gateway();
    change(&mut history);
    rules(&check(&history))
}

#[test]
fn a_clean_gateway_history_passes_and_its_keys_count() {
    let report = check(&gateway());
    assert!(report.is_clean(), "{:?}", report.violations);
    assert_eq!(report.stats.keys, 1);
    assert_eq!(report.stats.transport_errors, 1);
    assert_eq!(report.stats.statuses.get(&200), Some(&1));
}

#[test]
fn a_gateway_503_is_checked_in_openais_shape() {
    let unavailable = json!({"error": {"message": "onejob is stopping", "type": "api_error",
                                       "param": null, "code": "unavailable"}});
    // In OpenAI's shape with Retry-After: what the gateway must answer.
    assert!(
        broken_gateway(|h| {
            h.push(chat_request(5, "g", chat_body(false)));
            h.push(chat_response(5, 503, unavailable.clone(), None));
        })
        .is_empty()
    );
    // Without Retry-After, or another code: broken.
    assert_eq!(
        broken_gateway(|h| {
            h.push(chat_request(5, "g", chat_body(false)));
            let mut answer = chat_response(5, 503, unavailable.clone(), None);
            if let Record::Response { retry_after, .. } = &mut answer {
                *retry_after = None;
            }
            h.push(answer);
        }),
        vec!["answers"]
    );
    assert_eq!(
        broken_gateway(|h| {
            h.push(chat_request(5, "g", chat_body(false)));
            h.push(chat_response(
                5,
                503,
                json!({"error": {"code": "internal"}}),
                None,
            ));
        }),
        vec!["answers"]
    );
    // onejob's own API keeps problem+json: OpenAI's shape there is still broken.
    assert!(
        broken(|h| {
            h.push(request(9, "k", body()));
            let mut answer = response(9, 503, unavailable);
            if let Record::Response { retry_after, .. } = &mut answer {
                *retry_after = Some("1".into());
            }
            h.push(answer);
        })
        .contains(&"answers")
    );
}

#[test]
fn a_gateway_200_without_its_job_breaks_the_answers_rule() {
    let report = broken_gateway(|h| {
        for record in h.iter_mut() {
            if let Record::Response { job_id, status, .. } = record
                && *status == Some(200)
            {
                *job_id = None;
            }
        }
    });
    assert!(report.contains(&"answers"), "{report:?}");
}

#[test]
fn gateway_answers_naming_two_jobs_for_a_key_break_one_job_per_key() {
    let report = broken_gateway(|h| {
        h.push(chat_request(5, "g", chat_body(false)));
        h.push(chat_response(
            5,
            409,
            json!({"error": {"code": "invalid-state", "job_id": SECOND, "state": "running"}}),
            Some(SECOND),
        ));
    });
    assert!(report.contains(&"one-job-per-key"), "{report:?}");
}

#[test]
fn a_gateway_call_refused_for_its_stream_alone_breaks_intent() {
    // `stream` is delivery only: the same conversation with another `stream` is the same
    // intent.
    let report = broken_gateway(|h| {
        let mut body = chat_body(false);
        body["stream_options"] = json!({"include_usage": true});
        body["stream"] = json!(true);
        h.push(chat_request(5, "g", body));
        h.push(chat_response(
            5,
            422,
            json!({"error": {"code": "key-reused"}}),
            None,
        ));
    });
    assert_eq!(report, vec!["intent"]);
    // Another conversation under the key is what keys are for.
    let report = broken_gateway(|h| {
        let mut body = chat_body(false);
        body["messages"][0]["content"] = json!("a cat");
        h.push(chat_request(5, "g", body));
        h.push(chat_response(
            5,
            422,
            json!({"error": {"code": "key-reused"}}),
            None,
        ));
    });
    assert!(report.is_empty(), "{report:?}");
}

#[test]
fn a_gateway_200_that_is_not_the_jobs_result_breaks_result_once() {
    let report = broken_gateway(|h| {
        let mut other = completion();
        other["id"] = json!("chatcmpl-2");
        h.push(chat_request(5, "g", chat_body(false)));
        h.push(chat_response(5, 200, other, Some(JOB)));
    });
    assert_eq!(report, vec!["result-once"]);
}

#[test]
fn a_gateway_result_that_is_not_the_upstreams_answer_breaks_winner_output() {
    let report = broken_gateway(|h| {
        for record in h.iter_mut() {
            if let Record::SideEffect {
                task: Some(task), ..
            } = record
            {
                task["answer"]["choices"][0]["message"]["content"] = json!("another answer");
            }
        }
    });
    assert_eq!(report, vec!["winner-output"]);
    // An answer not recorded at all proves nothing either.
    let report = broken_gateway(|h| {
        for record in h.iter_mut() {
            if let Record::SideEffect {
                task: Some(task), ..
            } = record
            {
                task.as_object_mut().unwrap().remove("answer");
            }
        }
    });
    assert_eq!(report, vec!["winner-output"]);
}

#[test]
fn a_key_whose_last_call_got_no_completion_breaks_every_key_answered() {
    // The retry was told the outcome awaits proof (what a vanished caller left behind before
    // intake ran apart from its caller).
    let awaits_proof = json!({"error": {"code": "invalid-state", "job_id": JOB, "state": "unknown",
                                        "message": "the outcome of its attempt is unknown"}});
    let report = broken_gateway(|h| {
        h.push(chat_request(19, "g", chat_body(false)));
        h.push(chat_response(19, 409, awaits_proof.clone(), Some(JOB)));
    });
    assert_eq!(report, vec!["every-key-answered"]);
    // Its last call vanished, never retried.
    let report = broken_gateway(|h| {
        h.push(chat_request(19, "g", chat_body(true)));
        h.push(vanished(19));
    });
    assert_eq!(report, vec!["every-key-answered"]);
    // A promise the history does not make is not checked.
    let report = broken_gateway(|h| {
        h.retain(|r| !matches!(r, Record::Expect { .. }));
        h.push(chat_request(19, "g", chat_body(false)));
        h.push(chat_response(19, 409, awaits_proof, Some(JOB)));
    });
    assert!(report.is_empty(), "{report:?}");
}

#[test]
fn a_job_without_exactly_one_upstream_call_breaks_one_side_effect_per_key() {
    // None: the intent never reached the upstream.
    let report = broken_gateway(|h| h.retain(|r| !matches!(r, Record::SideEffect { .. })));
    assert!(report.contains(&"one-side-effect-per-key"), "{report:?}");
    // Two: it reached it twice (also more than the job's one attempt).
    let report = broken_gateway(|h| {
        h.push(Record::SideEffect {
            provider: "chat".into(),
            input_hash: "h".into(),
            input: json!([]),
            idempotency_key: Some(format!("onejob:{JOB}:2")),
            task_id: None,
            task: None,
        });
    });
    assert!(
        report.contains(&"one-side-effect-per-key") && report.contains(&"side-effects"),
        "{report:?}"
    );
    // A key with no job at all.
    let report = broken_gateway(|h| {
        h.push(chat_request(9, "lost", chat_body(false)));
        h.push(vanished(9));
    });
    assert!(report.contains(&"one-side-effect-per-key"), "{report:?}");
}

#[test]
fn an_attempt_that_was_ever_unknown_breaks_never_unknown() {
    // Made unknown at its lease's end, then resolved: still a broken promise.
    let report = broken_gateway(|h| {
        let (_, _, events) = job_dump(h);
        events[2]["id"] = json!(4);
        events.insert(
            2,
            event(
                3,
                "attempt_unknown",
                Some(ATTEMPT),
                json!({"reason": "lease"}),
            ),
        );
    });
    assert_eq!(report, vec!["never-unknown"]);
    // Left unknown (no result, no winner).
    let report = broken_gateway(|h| {
        let (job, attempts, events) = job_dump(h);
        *job = json!({"id": JOB, "kind": "chat.gateway", "state": "unknown"});
        attempts[0]["state"] = json!("unknown");
        attempts[0].as_object_mut().unwrap().remove("finished_at");
        events.truncate(2);
        events.push(event(
            5,
            "attempt_unknown",
            Some(ATTEMPT),
            json!({"reason": "lease"}),
        ));
    });
    assert!(
        report.iter().filter(|r| **r == "never-unknown").count() == 3,
        "{report:?}"
    );
}

#[test]
fn histories_written_before_the_gateway_rules_still_read() {
    // A response line without `job_id`, and the new lines, as the recorder writes them.
    let old = r#"{"type":"response","t_ms":1,"seq":1,"status":201,"body":{"id":"j"}}"#;
    let record: Record = serde_json::from_str(old).expect("an old response line");
    assert!(matches!(record, Record::Response { job_id: None, .. }));
    let line = serde_json::to_string(&all_expectations()).unwrap();
    assert_eq!(
        line,
        r#"{"type":"expect","expectations":["every-key-answered","one-side-effect-per-key","never-unknown"]}"#
    );
    assert_eq!(
        serde_json::from_str::<Record>(&line).unwrap(),
        all_expectations()
    );
}
