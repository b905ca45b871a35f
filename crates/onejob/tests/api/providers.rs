//! The provider adapters against the fake provider's real endpoints: `openai-chat`
//! (messages, template, JSON output, malformed output, hangs) and the generic `async-task`.

use std::time::Duration;

use onejob::{
    config::{Adapter, ContractCase, ProviderConfig},
    verify::{Limits, VerifyReport},
};
use onejob_fake::{Behaviour, Outcome, Rule};
use serde_json::{Value, json};

use crate::helpers::{Backend, Fakes, TestApp, TestDatabase, postgres_and_sqlite_tests};

postgres_and_sqlite_tests!(
    openai_chat_sends_messages_and_reads_json_content,
    openai_chat_renders_the_kinds_template,
    openai_chat_malformed_content_is_a_failed_attempt,
    openai_chat_hang_after_sending_is_running_then_unknown,
    async_task_adapter_follows_pointers_to_the_result,
    an_async_task_status_pointer_that_finds_nothing_is_reported_as_that,
    verify_counts_prompt_tokens_with_tiktoken_or_a_local_tokenizer_json,
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
    assert_eq!(
        attempts[0]["error"],
        json!({"message": "the provider's answer is not usable"}),
        "the owner sees what failed, not the upstream's answer"
    );
    let internal = app.operator_attempts(id).await[0]["error"]["internal"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(internal.contains("not the requested JSON"), "{internal}");
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
        let mut tasks = crate::helpers::fake_task_api("tasks", &base);
        tasks.cancel_url = Some(format!("{base}/v1/tasks/{{task_id}}/cancel"));
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

/// A `status_pointer` that is a valid pointer but finds nothing in the status answers (a
/// typo for `/status`) leaves the job `unknown` at the deadline, as it must (the task may
/// have run), with a reason naming the pointer and the answer's keys, not "still running".
async fn an_async_task_status_pointer_that_finds_nothing_is_reported_as_that(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |config| {
        let base = fakes.primary.base_url();
        let mut tasks = crate::helpers::fake_task_api("tasks", &base);
        tasks.status_pointer = Some("/state".into());
        config.providers.push(tasks);
        config.kinds[0].providers = vec!["tasks".into()];
        config.kinds[0].attempt_timeout = Duration::from_millis(1500);
    })
    .await;
    let body = json!({"kind": "chat.completion", "params": {"prompt": "typo"}});
    let job = app.create("typo", &body).await;
    let id = job["id"].as_str().unwrap();
    app.wait_job(id, WITHIN, |j| j["state"] == "unknown").await;
    let attempts: Vec<Value> = app.operator_attempts(id).await;
    let error = attempts[0]["error"].to_string();
    assert!(
        error.contains(r#"status_pointer \"/state\""#) && error.contains("top-level keys: "),
        "{error}"
    );
    assert!(
        error.contains("status"),
        "the answer's keys are listed: {error}"
    );
    assert!(!error.contains("still running"), "{error}");
}

/// The fake provider has no tokenize endpoint, so `onejob verify` falls back to tiktoken for
/// an OpenAI model name and to the configured `tokenizer.json` for any other model, and
/// refuses a prompt that does not fit the context limit by that count.
async fn verify_counts_prompt_tokens_with_tiktoken_or_a_local_tokenizer_json(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/api/fixtures/tokenizer.json"
    );
    let base_url = format!("{}/v1", fakes.primary.base_url());
    let app = TestApp::running_uncertified(&db, &fakes, |config| {
        for (name, model, tokenizer) in [
            ("openai-model", "gpt-4o-mini", None),
            ("local-model", "gemma-3-270m", Some(fixture)),
        ] {
            let mut chat = provider(name, Adapter::OpenaiChat);
            chat.base_url = Some(base_url.clone());
            chat.model = Some(model.into());
            chat.tokenizer = tokenizer.map(Into::into);
            config.providers.push(chat);
        }
        // One case whose prompt the fixture's vocabulary splits into exactly 4 tokens.
        config.kinds[0].contract = vec![ContractCase {
            name: "fox".into(),
            params: json!({"prompt": "a red fox."}),
            must_contain: Vec::new(),
        }];
    })
    .await;
    let verify = |provider: &'static str, context_limit: u32| {
        let app = &app;
        async move {
            let kind = app.app.jobs.kinds().get("chat.completion").unwrap().clone();
            let adapter = app.app.providers.get(provider).unwrap().clone();
            let limits = Limits {
                context_limit: Some(context_limit),
                max_tokens: None,
            };
            let (report, _): (VerifyReport, _) = app
                .app
                .jobs
                .verify(&kind, provider, &*adapter, limits)
                .await
                .unwrap();
            report
        }
    };

    let tiktoken = verify("openai-model", 1000).await;
    let case = &tiktoken.cases[0];
    assert_eq!(case.tokenizer.as_deref(), Some("tiktoken for gpt-4o-mini"));
    assert!(matches!(case.prompt_tokens, Some(1..=10)), "{case:?}");
    assert!(tiktoken.passed, "{case:?}");

    let local = verify("local-model", 1000).await;
    let case = &local.cases[0];
    assert_eq!(
        case.tokenizer.as_deref(),
        Some(format!("tokenizer.json {fixture}").as_str())
    );
    assert_eq!(case.prompt_tokens, Some(4), "a / red / fox / .");
    assert!(local.passed, "{case:?}");

    let too_small = verify("local-model", 3).await;
    assert!(!too_small.passed);
    assert!(
        too_small.cases[0]
            .problems
            .iter()
            .any(|p| p.contains("the prompt is 4 tokens") && p.contains("context limit of 3")),
        "{:?}",
        too_small.cases[0].problems
    );
}
