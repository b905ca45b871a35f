//! Agent runs (docs/gateway.md, "Agent runs"): every model call of a run under one
//! Idempotency-Key whose conversation extends the run's is a step of its own, one job per
//! step whoever races for it; a re-run replays every stored step; the same step drifted, or a
//! conversation that is not an extension, is refused naming the step. On PostgreSQL, SQLite
//! and Citus, over HTTP with the fake provider as the upstream.

use std::time::Duration;

use onejob::config::Config;
use serde_json::{Value, json};

use crate::helpers::{Backend, Fakes, TestApp, TestDatabase, json};

onejob_fixtures::every_backend_tests!(
    a_runs_later_calls_under_one_key_are_its_steps_and_a_rerun_replays_them,
    callers_racing_for_one_step_share_its_job,
    a_drifted_step_and_a_conversation_that_does_not_extend_the_run_are_refused,
    responses_and_messages_runs_step_through_their_conversations,
    a_steps_job_page_links_the_steps_before_and_after_it,
);

/// The demo's gateway kinds on the primary fake only, one attempt each.
fn quick(config: &mut Config) {
    for kind in &mut config.kinds {
        if ["chat.fast", "respond.fast", "messages.fast"].contains(&kind.name.as_str()) {
            kind.providers = vec!["fake".into()];
            kind.max_attempts = 1;
        }
    }
}

const WEATHER: &str = "Weather in Oslo? call weather";

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])
}

/// A chat run's conversation after `turns` tool round trips: the user's question, then per
/// turn the assistant's tool call and the tool's result.
fn conversation(turns: usize) -> Vec<Value> {
    let mut messages = vec![json!({"role": "user", "content": WEATHER})];
    for turn in 0..turns {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("call_{turn}"), "type": "function",
             "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}]}));
        messages.push(
            json!({"role": "tool", "tool_call_id": format!("call_{turn}"),
            "content": format!("sunny, day {turn}")}),
        );
    }
    messages
}

fn chat_request(messages: Vec<Value>) -> Value {
    json!({"model": "fast", "messages": messages, "tools": tools()})
}

fn chat_calls(fakes: &Fakes) -> usize {
    fakes
        .primary
        .submissions()
        .requests
        .iter()
        .filter(|r| r.endpoint == "chat")
        .count()
}

async fn called(
    app: &TestApp,
    key: &str,
    body: &Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let response = app.chat(Some(key), body).await;
    let headers = response.headers().clone();
    let (status, body) = json(response).await;
    (status, headers, body)
}

fn job_of(headers: &reqwest::header::HeaderMap) -> String {
    headers["onejob-job-id"].to_str().unwrap().to_owned()
}

async fn a_runs_later_calls_under_one_key_are_its_steps_and_a_rerun_replays_them(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, quick).await;
    let mut jobs = Vec::new();
    for turns in 0..3 {
        let (status, headers, answer) =
            called(&app, "agent-run", &chat_request(conversation(turns))).await;
        assert_eq!(status, 200, "step with {turns} round trips: {answer}");
        assert!(!headers.contains_key("idempotent-replayed"));
        jobs.push(job_of(&headers));
    }
    assert_eq!(chat_calls(&fakes), 3, "one upstream call per step");
    assert_eq!(
        jobs.iter().collect::<std::collections::HashSet<_>>().len(),
        3,
        "each step is a job of its own: {jobs:?}"
    );
    // The steps are listed under the run's key, in order, with their conversations' sizes.
    let (status, first) = json(
        app.get("/v1/jobs?idempotency_key=agent-run")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["id"], jobs[0].as_str());
    let steps: Vec<(i64, String)> = first["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["step"].as_i64().unwrap(),
                s["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        vec![
            (1, jobs[0].clone()),
            (3, jobs[1].clone()),
            (5, jobs[2].clone())
        ]
    );
    let later = app.job(&jobs[2]).await;
    assert_eq!(later["step"], 5, "{later}");
    assert!(first.get("step").is_none(), "{first}");
    let created = &app.events(&jobs[1]).await[0];
    assert_eq!(created["kind"], "created");
    assert_eq!(created["detail"]["step"], 3, "{created}");
    // Running the agent again: every step answered from storage, nothing sent upstream.
    for (turns, job) in jobs.iter().enumerate() {
        let (status, headers, _) =
            called(&app, "agent-run", &chat_request(conversation(turns))).await;
        assert_eq!(status, 200);
        assert_eq!(headers["idempotent-replayed"], "true");
        assert_eq!(&job_of(&headers), job);
    }
    assert_eq!(chat_calls(&fakes), 3, "a re-run makes no upstream call");
    // A re-run that goes further than the first: only the new step is sent.
    let (status, headers, _) = called(&app, "agent-run", &chat_request(conversation(3))).await;
    assert_eq!(status, 200);
    assert!(!jobs.contains(&job_of(&headers)));
    assert_eq!(chat_calls(&fakes), 4);
}

async fn callers_racing_for_one_step_share_its_job(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, quick).await;
    let (status, _, _) = called(&app, "raced-run", &chat_request(conversation(0))).await;
    assert_eq!(status, 200);
    // Two steps at once, each asked ten times at once: one job per step.
    let calls = (0..20).map(|i| {
        let app = &app;
        async move {
            let body = chat_request(conversation(1 + i % 2));
            let (status, headers, answer) = called(app, "raced-run", &body).await;
            assert_eq!(status, 200, "{answer}");
            (1 + i % 2, job_of(&headers))
        }
    });
    let answers = futures::future::join_all(calls).await;
    for turns in [1, 2] {
        let ids: std::collections::HashSet<&String> = answers
            .iter()
            .filter(|(t, _)| *t == turns)
            .map(|(_, id)| id)
            .collect();
        assert_eq!(ids.len(), 1, "step of {turns} round trips: {ids:?}");
    }
    assert_eq!(chat_calls(&fakes), 3, "one upstream call per step");
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM jobs").await,
        3,
        "the first job and two steps"
    );
}

async fn a_drifted_step_and_a_conversation_that_does_not_extend_the_run_are_refused(
    backend: Backend,
) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, quick).await;
    for turns in 0..2 {
        let (status, _, _) = called(&app, "strict-run", &chat_request(conversation(turns))).await;
        assert_eq!(status, 200);
    }
    let before = chat_calls(&fakes);
    // The same step (3 items) with another tool result: refused, naming the step.
    let mut drifted = conversation(1);
    drifted[2]["content"] = json!("rainy");
    let (status, _, refused) = called(&app, "strict-run", &chat_request(drifted)).await;
    assert_eq!(status, 422, "{refused}");
    let error = &refused["error"];
    assert_eq!(error["step"], 3, "{refused}");
    assert_eq!(
        error["changed"],
        json!(["/messages/2/content"]),
        "{refused}"
    );
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("step 3 of the agent run"),
        "{refused}"
    );
    // A longer conversation whose earlier item was edited: not an extension of step 3.
    let mut edited = conversation(2);
    edited[2]["content"] = json!("rainy");
    let (status, _, refused) = called(&app, "strict-run", &chat_request(edited)).await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["step"], 3, "{refused}");
    assert_eq!(
        refused["error"]["changed"],
        json!(["/messages/2"]),
        "{refused}"
    );
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("does not continue the run's step 3"),
        "{refused}"
    );
    // Another first message: not an extension of the run's first call.
    let mut other = conversation(2);
    other[0]["content"] = json!("Weather in Bergen? call weather");
    let (status, _, refused) = called(&app, "strict-run", &chat_request(other)).await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(
        refused["error"]["changed"],
        json!(["/messages/0"]),
        "{refused}"
    );
    // The first call rephrased (no more items than the run's first): the classic conflict.
    let mut rephrased = conversation(0);
    rephrased[0]["content"] = json!("Weather in Oslo, please? call weather");
    let (status, _, refused) = called(&app, "strict-run", &chat_request(rephrased)).await;
    assert_eq!(status, 422, "{refused}");
    assert!(refused["error"].get("step").is_none(), "{refused}");
    assert_eq!(chat_calls(&fakes), before, "nothing refused was sent");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM jobs").await, 2);
}

async fn responses_and_messages_runs_step_through_their_conversations(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |config| {
        quick(config);
        config.gateway.wait = Duration::from_secs(10);
    })
    .await;
    // The Responses API: text input first, then the items an SDK sends on the next call.
    let first = json!({"model": "respond", "input": "Weather in Oslo?"});
    let next = json!({"model": "respond", "input": [
        {"role": "user", "content": "Weather in Oslo?"},
        {"type": "function_call", "call_id": "call_1", "name": "weather",
         "arguments": "{\"city\":\"Oslo\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]});
    // Anthropic's Messages API.
    let question = json!({"role": "user", "content": "Weather in Oslo?"});
    let asked = json!({"model": "converse", "max_tokens": 64, "messages": [question]});
    let answered = json!({"model": "converse", "max_tokens": 64, "messages": [question,
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
            "name": "weather", "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
            "content": "sunny"}]}]});
    for (path, key, first, next) in [
        ("/v1/responses", "responses-run", &first, &next),
        ("/v1/messages", "messages-run", &asked, &answered),
    ] {
        let mut ids = Vec::new();
        for body in [first, next, first, next] {
            let response = app.call(path, key, body).await;
            let id = job_of(response.headers());
            let (status, answer) = json(response).await;
            assert_eq!(status, 200, "{path}: {answer}");
            ids.push(id);
        }
        assert_ne!(ids[0], ids[1], "{path}: the next call is a step of its own");
        assert_eq!(ids[0], ids[2], "{path}: replayed");
        assert_eq!(ids[1], ids[3], "{path}: replayed");
        assert_eq!(app.job(&ids[1]).await["step"], 3, "{path}");
    }
    let upstream = fakes.primary.submissions();
    for endpoint in ["responses", "messages"] {
        let calls = upstream
            .requests
            .iter()
            .filter(|r| r.endpoint == endpoint)
            .count();
        assert_eq!(calls, 2, "{endpoint}: one upstream call per step");
    }
}

/// The dashboard's job page of a run's step names its step and links the steps before and
/// after it (the run's first job links its next step only, the last its previous only).
async fn a_steps_job_page_links_the_steps_before_and_after_it(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, quick).await;
    let mut ids = Vec::new();
    for turns in 0..3 {
        let (status, headers, _) =
            called(&app, "paged-run", &chat_request(conversation(turns))).await;
        assert_eq!(status, 200);
        ids.push(job_of(&headers));
    }
    let page = |id: &str| {
        let request = reqwest::Client::new()
            .get(app.url(&format!("/ui/jobs/{id}")))
            .header("cookie", format!("onejob_ui={}", app.token));
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200);
            response.text().await.unwrap()
        }
    };
    let link = |id: &str, step: i32, rel: &str| {
        let arrow = if rel == "previous" {
            format!("← step {step}")
        } else {
            format!("step {step} →")
        };
        format!("<a id=\"run-{rel}\" href=\"/ui/jobs/{id}\">{arrow}</a>")
    };
    let first = page(&ids[0]).await;
    assert!(first.contains("step 1"), "{first}");
    assert!(first.contains(&link(&ids[1], 3, "next")), "{first}");
    assert!(!first.contains("run-previous"), "{first}");
    let middle = page(&ids[1]).await;
    assert!(middle.contains("step 3"), "{middle}");
    assert!(middle.contains(&link(&ids[0], 1, "previous")), "{middle}");
    assert!(middle.contains(&link(&ids[2], 5, "next")), "{middle}");
    let last = page(&ids[2]).await;
    assert!(last.contains(&link(&ids[1], 3, "previous")), "{last}");
    assert!(!last.contains("run-next"), "{last}");
    // A job in no run shows none of it.
    let (status, headers, _) = called(&app, "lonely", &chat_request(conversation(0))).await;
    assert_eq!(status, 200);
    let lonely = page(&job_of(&headers)).await;
    assert!(!lonely.contains("run-step"), "{lonely}");
}
