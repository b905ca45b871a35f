//! The OpenAPI document proved on a real generator: `openapi-python-client` (PyPI, the
//! version `sdk/openapi-python/requirements.txt` pins) generates a Python client from the
//! `/openapi.json` a running onejob serves, with `--fail-on-warning` (a document it cannot
//! fully turn into code fails here), and `sdk/openapi-python/test_generated_client.py` uses
//! that client against the same server on both databases: submit, replay under the same key
//! (same job), the same key with other params (`422` key-reused, as the generated `Problem`),
//! the job read back by id and by key (`listJobs` answering one `JobView`), and refusals.
//!
//! The README's snippet, `sdk/openapi-python/quickstart.py`, is included verbatim (checked
//! here) and run here against `onejob serve`'s demo with a client generated from the
//! committed `openapi.json`.
//!
//! The generator is installed by `.ci/run` into a venv (`ONEJOB_OPENAPI_VENV`, default
//! `/var/cache/onejob/venv-openapi`). Without it these tests fail with how to install it;
//! they never skip.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
};

use crate::{
    helpers::{Backend, Fakes, TestApp, TestDatabase, postgres_and_sqlite_tests},
    sdk::{Target, count_after, in_dir, read, repository, run},
};

postgres_and_sqlite_tests!(a_generated_python_client_submits_replays_and_reads_jobs);

/// The cases `test_generated_client.py` has.
const CASES: u32 = 4;

const DEFAULT_VENV: &str = "/var/cache/onejob/venv-openapi";

fn dir() -> PathBuf {
    repository().join("sdk/openapi-python")
}

/// The venv with the `openapi-python-client` version the requirements pin. Fails (never
/// skips) with how to install it.
fn venv() -> PathBuf {
    let venv = PathBuf::from(
        std::env::var("ONEJOB_OPENAPI_VENV").unwrap_or_else(|_| DEFAULT_VENV.to_owned()),
    );
    let install = format!(
        "create it with `python3 -m venv {venv} && {venv}/bin/pip install -r \
         sdk/openapi-python/requirements.txt` at the repository root (.ci/run does this; \
         ONEJOB_OPENAPI_VENV names another venv)",
        venv = venv.display()
    );
    let requirements = read(&dir().join("requirements.txt"));
    let pinned = requirements
        .lines()
        .find_map(|line| line.trim().strip_prefix("openapi-python-client=="))
        .expect("sdk/openapi-python/requirements.txt pins openapi-python-client");
    let found = std::process::Command::new(venv.join("bin/python"))
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('openapi-python-client'))",
        ])
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    assert_eq!(
        found.as_deref(),
        Some(pinned),
        "the generated-client test needs openapi-python-client {pinned} in the venv at {}: \
         {install}",
        venv.display()
    );
    venv
}

/// Generates the client of `document` as the package `onejob_api` in `dir`, failing on any
/// warning of the generator.
async fn generate(venv: &Path, document: &Path, dir: &Path) {
    let package = dir.join("onejob_api");
    // The generator formats what it wrote with ruff, from the same venv.
    let path = format!(
        "{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let generated = tokio::process::Command::new(venv.join("bin/openapi-python-client"))
        .arg("generate")
        .arg("--path")
        .arg(document)
        .args(["--meta", "none", "--fail-on-warning", "--output-path"])
        .arg(&package)
        .env("PATH", &path)
        .env("NO_COLOR", "1")
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("openapi-python-client runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&generated.stdout),
        String::from_utf8_lossy(&generated.stderr)
    );
    assert!(
        generated.status.success() && !said.contains("Warning"),
        "openapi-python-client refused onejob's document or warned ({}):\n{said}",
        generated.status
    );
    for module in [
        "api/jobs/submit_job.py",
        "api/jobs/list_jobs.py",
        "models/problem.py",
    ] {
        assert!(
            package.join(module).is_file(),
            "the client has {module}:\n{said}"
        );
    }
}

async fn a_generated_python_client_submits_replays_and_reads_jobs(backend: Backend) {
    let venv = venv();
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |_| {}).await;
    let work = tempfile::tempdir().unwrap();

    // The document as served, not as committed (a test compares those two).
    let served = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(served.status(), 200);
    let document = work.path().join("openapi.json");
    std::fs::write(&document, served.bytes().await.unwrap()).unwrap();

    generate(&venv, &document, work.path()).await;

    let mut script = in_dir(
        venv.join("bin/python"),
        &dir(),
        &["test_generated_client.py"],
    );
    script.env("PYTHONPATH", work.path());
    let printed = run(
        script,
        &Target {
            url: app.url(""),
            api_key: app.token.clone(),
            fake_url: None,
        },
    )
    .await;
    // unittest's summary, on standard error: "Ran 4 tests in 1.2s", then "OK".
    let ran = count_after(&printed.stderr, "Ran ");
    assert!(
        ran == Some(CASES) && printed.stderr.lines().any(|l| l == "OK"),
        "all {CASES} cases ran and passed:\n{}",
        printed.stderr
    );
}

/// What the README says the snippet prints against the demo.
const QUICKSTART_PRINTS: &str = "succeeded {'text': 'fake answer: Describe a red fox.'}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_snippet_runs_a_job_through_the_generated_client() {
    let venv = venv();
    let work = tempfile::tempdir().unwrap();
    generate(&venv, &repository().join("openapi.json"), work.path()).await;
    let demo = tempfile::tempdir().unwrap();
    let (mut server, url, api_key) = crate::cli::serve_demo(demo.path()).await;
    let mut script = in_dir(venv.join("bin/python"), &dir(), &["quickstart.py"]);
    script.env("PYTHONPATH", work.path());
    let printed = run(
        script,
        &Target {
            url,
            api_key,
            fake_url: None,
        },
    )
    .await;
    assert_eq!(printed.stdout.trim_end(), QUICKSTART_PRINTS);
    let _ = server.kill().await;
}

#[test]
fn the_readme_includes_the_generated_client_snippet_verbatim() {
    let readme = read(&repository().join("README.md"));
    let snippet = read(&dir().join("quickstart.py"));
    assert!(
        readme.contains(&format!("```python\n{snippet}```\n")),
        "README.md must include sdk/openapi-python/quickstart.py verbatim:\n{snippet}"
    );
    assert!(readme.contains(&format!("`{QUICKSTART_PRINTS}`")));
    let pinned = read(&dir().join("requirements.txt"))
        .lines()
        .find_map(|line| {
            line.strip_prefix("openapi-python-client==")
                .map(str::to_owned)
        })
        .unwrap();
    assert!(
        readme.contains(&format!("openapi-python-client=={pinned}")),
        "README.md installs the pinned generator ({pinned})"
    );
}
