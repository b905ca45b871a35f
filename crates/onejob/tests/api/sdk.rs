//! The gateway (docs/design.md §9) driven by clients nobody here wrote: OpenAI's own SDKs, the
//! `openai` package from PyPI (`sdk/python/test_gateway.py`) and from npm
//! (`sdk/js/gateway.test.mjs`), and two frameworks over OpenAI's protocol, LangChain's
//! `ChatOpenAI` and `litellm.completion` (`sdk/python/test_frameworks.py`: a call, a
//! stream, a replay and a 422 each), against a real onejob on both databases serving the
//! demo's model `fast` on a fake provider (and `brief`, the same with 1 s timeouts).
//!
//! The two SDK scripts have the same cases, each through the SDK's own calls, errors and
//! retries: a plain completion; one job (one upstream call) for a repeated key; a changed
//! body raised as the SDK's 422 error with onejob's message; the SDK's timeouts and its
//! retries of a 409 re-attaching to the one job; a failed job raised at once, not retried;
//! streams as OpenAI's example loop reads them, two concurrent streams of one upstream
//! call, a broken stream raised with onejob's error; tools and `response_format` reaching
//! the upstream; an unknown model as the SDK's 404 error; a keyless call refused. And the
//! "faithful" ones: the upstream receiving the request as sent (key order); a reasoning
//! model's stream kept whole (reasoning_content, every chunk's logprobs) and replayed whole
//! as JSON and as a stream; a number beyond ±2^53 refused, not rounded; `models.retrieve`
//! and an unserved `/v1` path in OpenAI's error shape; a stream outliving
//! `attempt_timeout` while it produces, and a silent one ending unknown; the upstream's
//! 401 as a 502 naming the provider, its 429 with its Retry-After, its `x-request-id`
//! passed on. (The Python script checks the request id of a success in a case of its own,
//! the npm one in its 429 case: one case more in Python.)
//!
//! The README's "Drop-in for OpenAI SDKs" snippets are `sdk/python/quickstart.py` and
//! `sdk/js/quickstart.mjs`, included verbatim (checked here) and run here against onejob.
//!
//! Beyond chat, `sdk/python/test_beyond.py` drives the endpoints with OpenAI's `openai`
//! package (`embeddings.create`, `responses.create` plain and streamed, `images.generate`,
//! from an async-task image provider too) and Anthropic's
//! `anthropic` package (`messages.create` plain and streamed, `messages.stream`, tools), and
//! `sdk/js/beyond.test.mjs` with OpenAI's npm package: calls, streams, a replay counted as
//! one upstream call at the fake, a changed body as the SDK's 422, refused conversation
//! state, and an SDK timeout whose retries re-attach to the one job.
//!
//! Agent runs (§9 "Agent runs"): agent frameworks send one `Idempotency-Key` for every
//! model call of a run. `sdk/python/test_agents.py` runs an OpenAI Agents SDK agent
//! (`openai-agents`) with one function tool, on its default Responses model and on
//! `OpenAIChatCompletionsModel`, and `sdk/js/agents.test.mjs` the Vercel AI SDK's
//! `generateText` with one tool on `openai.responses`, `openai.chat` and `anthropic`, each
//! against the fake answering like a model in a tool loop: a run is two model calls around
//! the tool under one key; the same run again replays every step (no upstream call); a run
//! whose process died in its tool goes on from the unanswered step (one upstream call).
//!
//! The tools are installed by `.ci/run`: a Python venv (`ONEJOB_SDK_VENV`, default
//! `/var/cache/onejob/venv-sdk`) with `sdk/python/requirements.txt`, and `npm ci --prefix
//! sdk/js`. Without them these tests fail with those instructions; they never skip.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use onejob::gateway::Endpoint;
use serde_json::Value;

use crate::{
    gateway::gateway,
    helpers::{Backend, Fakes, TestApp, TestDatabase, postgres_and_sqlite_tests},
};

postgres_and_sqlite_tests!(
    the_python_sdk_gets_one_job_per_key_and_onejobs_answers,
    the_js_sdk_gets_one_job_per_key_and_onejobs_answers,
    langchain_and_litellm_get_one_job_per_key_and_onejobs_answers,
    the_python_sdks_get_one_job_per_key_beyond_chat,
    the_js_sdk_gets_one_job_per_key_beyond_chat,
    the_openai_agents_sdk_runs_a_tool_loop_under_one_key,
    the_ai_sdk_runs_a_tool_loop_under_one_key,
);

/// `[gateway] wait` for these tests: short, so that a `409` still running is cheap to see.
const WAIT: Duration = Duration::from_secs(2);

/// The cases of `sdk/python/test_gateway.py`.
const PYTHON_CASES: u32 = 22;

/// The cases of `sdk/python/test_frameworks.py` (LangChain's ChatOpenAI and litellm).
const FRAMEWORK_CASES: u32 = 8;

/// The cases of `sdk/python/test_beyond.py` (the endpoints beyond chat).
const PYTHON_BEYOND_CASES: u32 = 23;

/// The cases of `sdk/js/beyond.test.mjs`.
const JS_BEYOND_CASES: u32 = 12;

/// The cases of `sdk/js/gateway.test.mjs`.
const JS_CASES: u32 = 21;

/// The cases of `sdk/python/test_agents.py`: three for each of the Agents SDK's two models.
const PYTHON_AGENTS_CASES: u32 = 6;

/// The cases of `sdk/js/agents.test.mjs`: three for each of the AI SDK's three models.
const JS_AGENTS_CASES: u32 = 9;

/// How long one script may take.
const WITHIN: Duration = Duration::from_secs(180);

const DEFAULT_VENV: &str = "/var/cache/onejob/venv-sdk";

pub(crate) fn repository() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

pub(crate) fn sdk(path: &str) -> PathBuf {
    repository().join("sdk").join(path)
}

pub(crate) fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The README's quickstart requirements install only what its quickstarts import, at the
/// versions the SDK tests (`requirements.txt`) pin, so what a reader installs is what the
/// tests ran.
#[test]
fn the_quickstart_requirements_pin_the_tested_sdks_and_no_framework() {
    let pins = |file: &str| -> std::collections::BTreeMap<String, String> {
        read(&sdk(file))
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| line.split_once("=="))
            .map(|(name, version)| (name.trim().to_lowercase(), version.trim().to_owned()))
            .collect()
    };
    let quickstart = pins("python/quickstart-requirements.txt");
    let tested = pins("python/requirements.txt");
    for package in ["openai", "anthropic"] {
        assert_eq!(quickstart.get(package), tested.get(package), "{package}");
    }
    for framework in [
        "litellm",
        "langchain-openai",
        "openai-agents",
        "boto3",
        "tokenizers",
    ] {
        assert!(
            !quickstart.contains_key(framework),
            "{framework} is not a quickstart's"
        );
    }
    assert!(
        quickstart.len() < 25,
        "{} packages: {quickstart:?}",
        quickstart.len()
    );
    let imported = ["quickstart.py", "beyond.py"]
        .map(|script| read(&sdk(&format!("python/{script}"))))
        .join("\n");
    for line in imported
        .lines()
        .filter(|l| l.starts_with("from ") || l.starts_with("import "))
    {
        let module = line.split_whitespace().nth(1).unwrap_or_default();
        assert!(
            module == "os" || quickstart.contains_key(module),
            "{module} is imported by a quickstart: pin it in quickstart-requirements.txt"
        );
    }
}

/// The packages whose pinned versions the venv must have (the scripts' own clients).
const PYTHON_PACKAGES: [&str; 2] = ["openai", "openai-agents"];

/// The venv's Python, with the versions of [`PYTHON_PACKAGES`] that
/// `sdk/python/requirements.txt` pins. Fails (never skips) with how to install it.
fn python() -> PathBuf {
    let venv =
        PathBuf::from(std::env::var("ONEJOB_SDK_VENV").unwrap_or_else(|_| DEFAULT_VENV.to_owned()));
    let install = format!(
        "create it with `python3 -m venv {venv} && {venv}/bin/pip install -r \
         sdk/python/requirements.txt` at the repository root (.ci/run does this; \
         ONEJOB_SDK_VENV names another venv)",
        venv = venv.display()
    );
    let python = venv.join("bin/python");
    assert!(
        python.is_file(),
        "the OpenAI SDK tests need a Python venv at {}: {install}",
        venv.display()
    );
    let requirements = read(&sdk("python/requirements.txt"));
    for package in PYTHON_PACKAGES {
        let pinned = requirements
            .lines()
            .find_map(|line| line.trim().strip_prefix(&format!("{package}==")))
            .unwrap_or_else(|| panic!("sdk/python/requirements.txt pins {package}"));
        let found = std::process::Command::new(&python)
            .args([
                "-c",
                "import importlib.metadata, sys; print(importlib.metadata.version(sys.argv[1]))",
                package,
            ])
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
        assert_eq!(
            found.as_deref(),
            Some(pinned),
            "the venv at {} must have {package} {pinned} (sdk/python/requirements.txt): \
             {install}",
            venv.display()
        );
    }
    python
}

/// The npm packages whose locked versions `sdk/js/node_modules` must have.
const NODE_PACKAGES: [&str; 4] = ["openai", "ai", "@ai-sdk/openai", "@ai-sdk/anthropic"];

/// `sdk/js`, with `node_modules` holding the versions of [`NODE_PACKAGES`] its lock pins.
/// Fails (never skips) with how to install it.
fn node_sdk() -> PathBuf {
    let dir = sdk("js");
    let install = "install it with `npm ci --prefix sdk/js` at the repository root (.ci/run \
                   does this), with Node.js 20 or later on PATH";
    let lock: Value = serde_json::from_str(&read(&dir.join("package-lock.json"))).unwrap();
    for package in NODE_PACKAGES {
        let pinned = lock["packages"][format!("node_modules/{package}")]["version"]
            .as_str()
            .unwrap_or_else(|| panic!("sdk/js/package-lock.json pins {package}"));
        let installed =
            std::fs::read_to_string(dir.join("node_modules").join(package).join("package.json"))
                .ok()
                .and_then(|text| serde_json::from_str::<Value>(&text).ok());
        assert_eq!(
            installed.as_ref().and_then(|p| p["version"].as_str()),
            Some(pinned),
            "the OpenAI SDK tests need sdk/js/node_modules with {package} {pinned}: {install}"
        );
    }
    assert!(
        std::process::Command::new("node")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
        "the OpenAI SDK tests need Node.js (`node`) on PATH: {install}"
    );
    dir
}

/// onejob serving the demo's `chat.fast` (model `fast`) on the primary fake, and model
/// `brief`: the same kind as `chat.brief`, whose `attempt_timeout` and
/// `stream_idle_timeout` are 1 s.
async fn serving(db: &TestDatabase, fakes: &Fakes) -> TestApp {
    TestApp::running(db, fakes, |config| {
        gateway(config);
        config.gateway.wait = WAIT;
        let mut brief = config
            .kinds
            .iter()
            .find(|k| k.name == "chat.fast")
            .expect("the demo serves model fast")
            .clone();
        brief.name = "chat.brief".into();
        brief.openai_models = vec!["brief".into()];
        brief.attempt_timeout = Duration::from_secs(1);
        brief.stream_idle_timeout = Duration::from_secs(1);
        config.kinds.push(brief);
    })
    .await
}

/// onejob serving the demo's kinds beyond chat (`embed`, …) on the primary fake only, and
/// model `draw-polled`: images from an `async-task` provider, the primary fake's task API.
async fn serving_beyond(db: &TestDatabase, fakes: &Fakes) -> TestApp {
    let base = fakes.primary.base_url();
    TestApp::running(db, fakes, |config| {
        config.gateway.wait = WAIT;
        for kind in &mut config.kinds {
            if kind
                .served()
                .iter()
                .any(|(endpoint, _)| *endpoint != Endpoint::Chat)
            {
                kind.providers = vec!["fake".into()];
            }
        }
        config
            .providers
            .push(crate::helpers::fake_task_api("tasks", &base));
        let mut polled = config
            .kinds
            .iter()
            .find(|k| k.name == "image.draw")
            .expect("the demo serves model draw")
            .clone();
        polled.name = "image.polled".into();
        polled.image_models = vec!["draw-polled".into()];
        polled.providers = vec!["tasks".into()];
        polled.contract.clear();
        config.kinds.push(polled);
    })
    .await
}

/// onejob serving the demo's conversation endpoints on the primary fake only, with one
/// attempt per job: model `fast` (chat), `respond` (Responses) and `converse` (Anthropic's
/// Messages), as the agent frameworks call them.
async fn serving_agents(db: &TestDatabase, fakes: &Fakes) -> TestApp {
    TestApp::running(db, fakes, |config| {
        gateway(config);
        config.gateway.wait = WAIT;
        for kind in &mut config.kinds {
            if kind
                .served()
                .iter()
                .any(|(endpoint, _)| matches!(endpoint, Endpoint::Responses | Endpoint::Messages))
            {
                kind.providers = vec!["fake".into()];
            }
        }
    })
    .await
}

/// What a script printed.
pub(crate) struct Printed {
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Where a script sends its calls: `ONEJOB_URL`, `ONEJOB_API_KEY` and (for the test
/// scripts) `ONEJOB_FAKE_URL`.
pub(crate) struct Target {
    pub(crate) url: String,
    pub(crate) api_key: String,
    pub(crate) fake_url: Option<String>,
}

impl Target {
    fn of(app: &TestApp, fakes: &Fakes) -> Target {
        Target {
            url: app.url(""),
            api_key: app.token.clone(),
            fake_url: Some(fakes.primary.base_url()),
        }
    }
}

/// Runs a script against `target`, asserting it exits 0; on failure the assertion shows
/// everything it printed.
pub(crate) async fn run(mut command: tokio::process::Command, target: &Target) -> Printed {
    command
        .env("ONEJOB_URL", &target.url)
        .env("ONEJOB_API_KEY", &target.api_key)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        // The SDKs would add these to every request.
        .env_remove("OPENAI_ORG_ID")
        .env_remove("OPENAI_PROJECT_ID")
        .env_remove("OPENAI_LOG")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if let Some(fake_url) = &target.fake_url {
        command.env("ONEJOB_FAKE_URL", fake_url);
    }
    let shown = format!("{command:?}");
    let output = tokio::time::timeout(WITHIN, command.output())
        .await
        .unwrap_or_else(|_| panic!("{shown} did not finish within {WITHIN:?}"))
        .unwrap_or_else(|e| panic!("{shown} could not start: {e}"));
    let printed = Printed {
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    assert!(
        output.status.success(),
        "{shown} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        output.status,
        printed.stdout,
        printed.stderr
    );
    // Shown with --nocapture: what each case did and how long it took.
    println!("{}{}", printed.stdout, printed.stderr);
    printed
}

/// The number in the line of `text` that starts with `prefix` (a test runner's summary).
pub(crate) fn count_after(text: &str, prefix: &str) -> Option<u32> {
    text.lines()
        .find_map(|line| line.strip_prefix(prefix))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

pub(crate) fn in_dir(
    program: impl AsRef<std::ffi::OsStr>,
    dir: &Path,
    args: &[&str],
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(program);
    command.args(args).current_dir(dir);
    command
}

/// Runs the unittest script `script` of `sdk/python` against onejob on `backend`, asserting
/// that all its `cases` ran and passed.
async fn python_suite(backend: Backend, script: &str, cases: u32) {
    let python = python();
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = match script {
        "test_beyond.py" => serving_beyond(&db, &fakes).await,
        "test_agents.py" => serving_agents(&db, &fakes).await,
        _ => serving(&db, &fakes).await,
    };
    let printed = run(
        in_dir(&python, &sdk("python"), &[script]),
        &Target::of(&app, &fakes),
    )
    .await;
    // unittest's summary, on standard error: "Ran 22 tests in 9.1s", then "OK".
    let ran = count_after(&printed.stderr, "Ran ");
    assert!(
        ran == Some(cases) && printed.stderr.lines().any(|l| l == "OK"),
        "all {cases} cases of {script} ran and passed:\n{}",
        printed.stderr
    );
}

async fn the_python_sdk_gets_one_job_per_key_and_onejobs_answers(backend: Backend) {
    python_suite(backend, "test_gateway.py", PYTHON_CASES).await;
}

async fn langchain_and_litellm_get_one_job_per_key_and_onejobs_answers(backend: Backend) {
    python_suite(backend, "test_frameworks.py", FRAMEWORK_CASES).await;
}

async fn the_python_sdks_get_one_job_per_key_beyond_chat(backend: Backend) {
    python_suite(backend, "test_beyond.py", PYTHON_BEYOND_CASES).await;
}

async fn the_openai_agents_sdk_runs_a_tool_loop_under_one_key(backend: Backend) {
    python_suite(backend, "test_agents.py", PYTHON_AGENTS_CASES).await;
}

async fn the_ai_sdk_runs_a_tool_loop_under_one_key(backend: Backend) {
    let dir = node_sdk();
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = serving_agents(&db, &fakes).await;
    node_suite(&dir, &app, &fakes, "agents.test.mjs", JS_AGENTS_CASES).await;
}

async fn the_js_sdk_gets_one_job_per_key_and_onejobs_answers(backend: Backend) {
    let dir = node_sdk();
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = serving(&db, &fakes).await;
    node_suite(&dir, &app, &fakes, "gateway.test.mjs", JS_CASES).await;
}

async fn the_js_sdk_gets_one_job_per_key_beyond_chat(backend: Backend) {
    let dir = node_sdk();
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = serving_beyond(&db, &fakes).await;
    node_suite(&dir, &app, &fakes, "beyond.test.mjs", JS_BEYOND_CASES).await;
}

/// Runs the `node --test` script `script` of `sdk/js` against `app`, asserting that all its
/// `cases` ran and passed.
async fn node_suite(dir: &Path, app: &TestApp, fakes: &Fakes, script: &str, cases: u32) {
    let printed = run(
        in_dir("node", dir, &["--test", script]),
        &Target::of(app, fakes),
    )
    .await;
    // node --test's summary: "# pass 14", "# fail 0".
    let passed = count_after(&printed.stdout, "# pass ");
    assert!(
        passed == Some(cases) && count_after(&printed.stdout, "# fail ") == Some(0),
        "all {cases} cases of {script} ran and passed:\n{}",
        printed.stdout
    );
}

/// What the README says both snippets print against `onejob serve`'s demo.
const QUICKSTART_PRINTS: &str = "{\"text\":\"fake answer: Describe a red fox.\"}";

/// The README's snippets, run as shown against `onejob serve` with no configuration (the
/// demo, model `fast` on the bundled fake): they send the same call under the same key, so
/// the second SDK's call is answered from the first one's job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_quickstarts_run_against_the_demo_and_make_one_job() {
    let (python, js) = (python(), node_sdk());
    let dir = tempfile::tempdir().unwrap();
    let (mut server, url, api_key) = crate::cli::serve_demo(dir.path()).await;
    let target = Target {
        url,
        api_key,
        fake_url: None,
    };
    let from_python = run(in_dir(&python, &sdk("python"), &["quickstart.py"]), &target)
        .await
        .stdout;
    assert_eq!(from_python.trim_end(), QUICKSTART_PRINTS);
    let from_js = run(in_dir("node", &js, &["quickstart.mjs"]), &target)
        .await
        .stdout;
    assert_eq!(from_js.trim_end(), QUICKSTART_PRINTS);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let job: Value = client
        .get(format!(
            "{}/v1/jobs?idempotency_key=order-44:caption",
            target.url
        ))
        .bearer_auth(&target.api_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(job["kind"], "chat.fast", "{job}");
    assert_eq!(job["state"], "succeeded", "{job}");
    assert_eq!(
        job["attempts"], 1,
        "one key, one job, one upstream call: {job}"
    );
    let _ = server.kill().await;
}

#[test]
fn the_readme_includes_the_quickstarts_verbatim() {
    let readme = includes_verbatim("README.md", ["python/quickstart.py", "js/quickstart.mjs"]);
    assert!(
        readme.contains(&format!("`{QUICKSTART_PRINTS}`")),
        "README.md says what the snippets print: `{QUICKSTART_PRINTS}`"
    );
}

/// What docs/gateway.md's agent run snippets print against `onejob serve`'s demo: the demo
/// fake's answer, quoting the tool's result.
const AGENT_RUN_PRINTS: &str =
    "fake answer: How heavy is the fox? call weigh_fox (tool result: the fox weighs 7 kg)";

/// docs/gateway.md's "Agent runs" snippets, run as shown against `onejob serve` with no
/// configuration (the demo, model `respond` on the bundled fake), twice each: the first run
/// makes its two steps, the second is answered from them (the same jobs, each with its one
/// attempt).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_run_snippets_run_against_the_demo_and_replay_when_run_again() {
    let (python, js) = (python(), node_sdk());
    let dir = tempfile::tempdir().unwrap();
    let (mut server, url, api_key) = crate::cli::serve_demo(dir.path()).await;
    let target = Target {
        url,
        api_key,
        fake_url: None,
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let run_of = |key: &'static str| {
        let client = client.clone();
        let (url, api_key) = (target.url.clone(), target.api_key.clone());
        async move {
            let job: Value = client
                .get(format!("{url}/v1/jobs?idempotency_key={key}"))
                .bearer_auth(api_key)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            job
        }
    };
    for (command, dir, script, key) in [
        (
            python.as_os_str(),
            sdk("python"),
            "agent_run.py",
            "order-45:weigh",
        ),
        (
            std::ffi::OsStr::new("node"),
            js.clone(),
            "agent_run.mjs",
            "order-45:weigh-js",
        ),
    ] {
        let mut runs = Vec::new();
        for _ in 0..2 {
            let printed = run(in_dir(command, &dir, &[script]), &target).await.stdout;
            assert_eq!(printed.trim_end(), AGENT_RUN_PRINTS, "{script}");
            runs.push(run_of(key).await);
        }
        let steps = runs[0]["steps"]
            .as_array()
            .unwrap_or_else(|| panic!("{}", runs[0]));
        assert_eq!(
            steps.len(),
            2,
            "{script}: two model calls, two steps: {}",
            runs[0]
        );
        assert_eq!(
            runs[0], runs[1],
            "{script}: the second run replayed the first's steps"
        );
        for step in steps {
            let id = step["id"].as_str().unwrap();
            let job: Value = client
                .get(format!("{}/v1/jobs/{id}", target.url))
                .bearer_auth(&target.api_key)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(
                job["attempts"], 1,
                "{script}: one upstream call per step: {job}"
            );
        }
    }
    let _ = server.kill().await;
}

#[test]
fn the_gateway_page_includes_the_agent_run_snippets_verbatim() {
    includes_verbatim(
        "docs/gateway.md",
        ["python/agent_run.py", "js/agent_run.mjs"],
    );
}

/// The page at `page` (from the repository's root), which must include each of `snippets`
/// (a Python and a JS file under `sdk/`) verbatim in a fenced block of its language.
fn includes_verbatim(page: &str, snippets: [&str; 2]) -> String {
    let text = read(&repository().join(page));
    for file in snippets {
        let fence = if file.starts_with("python/") {
            "python"
        } else {
            "js"
        };
        let snippet = read(&sdk(file));
        assert!(
            text.contains(&format!("```{fence}\n{snippet}```\n")),
            "{page} must include sdk/{file} verbatim in a ```{fence} block:\n{snippet}"
        );
    }
    text
}
