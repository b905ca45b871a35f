//! The provider adapters against the fake provider's real endpoints: `openai-chat`
//! (messages, template, JSON output, malformed output, hangs) and the generic `async-task`.

use std::time::Duration;

use onejob::config::{Adapter, ProviderConfig};
use onejob_fake::{Behaviour, Outcome, Rule};
use serde_json::{Value, json};

use crate::helpers::{Backend, Fakes, TestApp, TestDatabase, backend_tests};

backend_tests!(
    openai_chat_sends_messages_and_reads_json_content,
    openai_chat_renders_the_kinds_template,
    openai_chat_malformed_content_is_a_failed_attempt,
    openai_chat_hang_after_sending_is_running_then_unknown,
    async_task_adapter_follows_pointers_to_the_result,
);

const WITHIN: Duration = Duration::from_secs(15);

fn provider(name: &str, adapter: Adapter) -> ProviderConfig {
    ProviderConfig::new(name, adapter)
}

/// Routes `chat.completion` to an `openai-chat` provider on the primary fake, with the
/// backup fake behind it.
fn chat_api(fakes: &Fakes) -> impl FnOnce(&mut onejob::config::Config) + '_ {
    move |config| {
        let mut chat = provider("chat-api", Adapter::OpenaiChat);
        chat.base_url = Some(format!("{}/v1", fakes.primary.base_url()));
        chat.model = Some("fake-model".into());
        config.providers.push(chat);
        config.kinds[0].providers = vec!["chat-api".into(), "fake-backup".into()];
        config.kinds[0].attempt_timeout = Duration::from_millis(600);
    }
}

async fn openai_chat_sends_messages_and_reads_json_content(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, chat_api(&fakes)).await;
    let body = json!({"kind": "chat.completion", "params": {
        "prompt": "Describe a red fox.", "system": "Be brief.", "temperature": 0.0}});
    let job = app.create("chat-1", &body).await;
    let id = job["id"].as_str().unwrap();
    let job = app
        .wait_job(id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    assert_eq!(
        job["result"],
        json!({"text": "fake answer: Describe a red fox."})
    );
    let seen = fakes.primary.submissions();
    assert_eq!(seen.total, 1);
    assert_eq!(seen.requests[0].endpoint, "chat");
    assert_eq!(
        seen.requests[0].input,
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Describe a red fox."}
        ])
    );
    let attempts = app.attempts(id).await;
    assert!(
        attempts[0]["acknowledged_at"].is_string(),
        "sent counts as acknowledged"
    );
}

async fn openai_chat_renders_the_kinds_template(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("chat.jinja"),
        "Describe {{ prompt }} in {{ words }} words.",
    )
    .unwrap();
    let app = TestApp::running(&db, &fakes, |config| {
        chat_api(&fakes)(config);
        config.base_dir = dir.path().to_owned();
        let kind = &mut config.kinds[0];
        kind.template = Some("chat.jinja".into());
        kind.params_schema = None;
    })
    .await;
    let body = json!({"kind": "chat.completion", "params": {"prompt": "a fox", "words": 5}});
    let job = app.create("tpl", &body).await;
    app.wait_job(job["id"].as_str().unwrap(), WITHIN, |j| {
        j["state"] == "succeeded"
    })
    .await;
    let input = &fakes.primary.submissions().requests[0].input;
    assert_eq!(input[0]["content"], "Describe a fox in 5 words.");
}

async fn openai_chat_malformed_content_is_a_failed_attempt(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(Rule {
        matches: Some("garbled".into()),
        times: None,
        behaviour: Behaviour {
            outcome: Outcome::Malformed,
            ..Default::default()
        },
    });
    let app = TestApp::running(&db, &fakes, chat_api(&fakes)).await;
    let body = json!({"kind": "chat.completion", "params": {"prompt": "garbled"}});
    let job = app.create("garbled", &body).await;
    let id = job["id"].as_str().unwrap();
    app.wait_job(id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    let attempts = app.attempts(id).await;
    assert_eq!(attempts[0]["state"], "failed");
    let message = attempts[0]["error"]["message"].as_str().unwrap();
    assert!(message.contains("not the requested JSON"), "{message}");
    assert_eq!(attempts[1]["provider"], "fake-backup");
}

async fn openai_chat_hang_after_sending_is_running_then_unknown(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(Rule {
        matches: Some("silent".into()),
        times: None,
        behaviour: Behaviour {
            hang_after_ack: true,
            ..Default::default()
        },
    });
    let app = TestApp::running(&db, &fakes, chat_api(&fakes)).await;
    let body = json!({"kind": "chat.completion", "params": {"prompt": "silent"}});
    let job = app.create("silent", &body).await;
    let id = job["id"].as_str().unwrap();
    app.wait_attempts(id, WITHIN, |a| a.len() == 1 && a[0]["state"] == "running")
        .await;
    app.wait_job(id, WITHIN, |j| j["state"] == "unknown").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(app.attempts(id).await.len(), 1);
    assert_eq!(fakes.total(), 1);
}

async fn async_task_adapter_follows_pointers_to_the_result(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    fakes.primary.add_rule(Rule {
        matches: None,
        times: None,
        behaviour: Behaviour {
            run_ms: 150,
            output: Some(json!({"text": "from the task api"})),
            ..Default::default()
        },
    });
    let app = TestApp::running(&db, &fakes, |config| {
        let base = fakes.primary.base_url();
        let mut tasks = provider("tasks", Adapter::AsyncTask);
        tasks.submit_url = Some(format!("{base}/v1/tasks"));
        tasks.status_url = Some(format!("{base}/v1/tasks/{{task_id}}"));
        tasks.cancel_url = Some(format!("{base}/v1/tasks/{{task_id}}/cancel"));
        tasks.task_id_pointer = Some("/task_id".into());
        tasks.status_pointer = Some("/status".into());
        tasks.result_pointer = Some("/result".into());
        tasks.succeeded = vec!["succeeded".into()];
        tasks.failed = vec!["failed".into()];
        config.providers.push(tasks);
        config.kinds[0].providers = vec!["tasks".into()];
    })
    .await;
    let body = json!({"kind": "chat.completion", "params": {"prompt": "via tasks"}});
    let job = app.create("tasks", &body).await;
    let id = job["id"].as_str().unwrap();
    let job = app
        .wait_job(id, WITHIN, |j| j["state"] == "succeeded")
        .await;
    assert_eq!(job["result"], json!({"text": "from the task api"}));
    let seen = fakes.primary.submissions();
    assert_eq!(
        seen.requests[0].input,
        json!({"prompt": "via tasks"}),
        "the body is the params"
    );
    let attempts: Vec<Value> = app.attempts(id).await;
    assert_eq!(
        attempts[0]["task_id"].as_str(),
        seen.requests[0].task_id.as_deref()
    );
}
