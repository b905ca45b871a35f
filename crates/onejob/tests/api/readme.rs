//! The README, run top to bottom as a reader runs it: one `onejob serve` on its embedded
//! default, then every block in the order the README shows them, in one state (one server,
//! one database, the variables earlier blocks set), so that a key reused by a later section
//! or a step that needs an earlier one is caught here, not by the reader.
//!
//! * `$ curl …` transcripts must answer the status they show; the lines of `sh` blocks must
//!   succeed, and a `curl` among them must answer no problem.
//! * The SDK and generated-client sections run the repository files their `python` and `js`
//!   blocks show verbatim, and must print what the README says they print.
//! * "Your own PostgreSQL" runs after the demo server is stopped, as one script, against a
//!   database its `createdb` makes on the test server.
//!
//! The only changes are the ones a reader on this machine makes: the server's address (a
//! free port instead of 8080), `KEY` and `JOB` set to the key the server printed and the job
//! it made, and the steps that install tools (`git clone`, `cargo install`, `pip install`,
//! `npm ci`) checked against what `.ci/run` installs instead of run again: the tests use the
//! virtual environments and `node_modules` it made from the same requirement files.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use crate::{
    cli::serve_demo,
    deployment::binaries,
    docs::{Walkthrough, commands, fenced, free_port, page, repository, substitute},
};

/// The job id the README's samples show.
pub(crate) const SAMPLE_JOB: &str = "01a22a98-4599-75a0-b1cb-7cdbcd0f53a7";

/// One command of a `text` transcript: the command (continuation lines joined) and the
/// status its first output line shows, if it shows one.
pub(crate) struct Shown {
    pub(crate) command: String,
    pub(crate) status: Option<u16>,
}

/// The `$ ` commands of a transcript, with the HTTP status each one's output shows.
pub(crate) fn transcript(block: &str) -> Vec<Shown> {
    let mut shown: Vec<Shown> = Vec::new();
    let mut continuing = false;
    for line in block.lines() {
        if let Some(command) = line.strip_prefix("$ ") {
            shown.push(Shown {
                command: command.to_owned(),
                status: None,
            });
            continuing = command.ends_with('\\');
        } else if continuing {
            let last = shown.last_mut().expect("a command before its continuation");
            last.command.push('\n');
            last.command.push_str(line);
            continuing = line.ends_with('\\');
        } else if let Some(last) = shown.last_mut()
            && last.status.is_none()
            && let Some(code) = line.strip_prefix("HTTP/1.1 ")
        {
            last.status = code.split_whitespace().next().and_then(|c| c.parse().ok());
        }
    }
    shown
}

/// What a command printed.
pub(crate) struct Ran {
    pub(crate) ok: bool,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// The reader's shell between commands: its working directory, its variables and the
/// directories an activated virtual environment put first on its `PATH`.
pub(crate) struct Shell {
    pub(crate) cwd: PathBuf,
    pub(crate) vars: HashMap<String, String>,
    pub(crate) path: Vec<PathBuf>,
}

impl Shell {
    /// A shell in `cwd` with `onejob` and `onejob-fake` of this build on its `PATH`.
    pub(crate) fn new(cwd: &Path) -> Shell {
        Shell {
            cwd: cwd.to_owned(),
            vars: HashMap::new(),
            path: vec![binaries()],
        }
    }

    /// Runs `command` with `bash -euo pipefail`, within 2 minutes (a failure's bound,
    /// generous for a loaded machine).
    pub(crate) async fn run(&self, command: &str) -> Ran {
        let path = std::env::join_paths(self.path.iter().cloned().chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )))
        .unwrap();
        let mut bash = tokio::process::Command::new("bash");
        bash.args(["-euo", "pipefail", "-c", command])
            .current_dir(&self.cwd)
            .env("PATH", path)
            .env_remove("ONEJOB_URL")
            .env_remove("ONEJOB_API_KEY")
            .env_remove("ONEJOB_CONFIG")
            .env_remove("ONEJOB_DATABASE")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        for (name, value) in &self.vars {
            bash.env(name, value);
        }
        let out = tokio::time::timeout(Duration::from_secs(120), bash.output())
            .await
            .unwrap_or_else(|_| panic!("within 2 minutes: {command}"))
            .expect("run bash");
        Ran {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// The `"id"` of the JSON object an answer ends with.
fn job_id(answer: &str) -> Option<String> {
    let body = answer.lines().last()?;
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    value["id"].as_str().map(str::to_owned)
}

/// A virtual environment `.ci/run` made from a requirements file, and the variable naming it.
struct Venv {
    requirements: &'static str,
    env: &'static str,
    default: &'static str,
}

const VENVS: [(&str, Venv); 2] = [
    (
        ".venv",
        Venv {
            requirements: "sdk/python/quickstart-requirements.txt",
            env: "ONEJOB_QUICKSTART_VENV",
            default: "/var/cache/onejob/venv-quickstart",
        },
    ),
    (
        ".venv-openapi",
        Venv {
            requirements: "sdk/openapi-python/requirements.txt",
            env: "ONEJOB_OPENAPI_VENV",
            default: "/var/cache/onejob/venv-openapi",
        },
    ),
];

/// What the README's install steps ask for, made by `.ci/run` instead.
struct Installs {
    /// The virtual environment the reader activated last, by its README name.
    active: Option<&'static Venv>,
}

impl Installs {
    /// `python3 -m venv DIR && . DIR/bin/activate`: the venv `.ci/run` made for `DIR`.
    fn activate(&mut self, shell: &mut Shell, command: &str) {
        let (name, venv) = VENVS
            .iter()
            .find(|(name, _)| command == format!("python3 -m venv {name} && . {name}/bin/activate"))
            .unwrap_or_else(|| panic!("a venv the test knows: {command}"));
        let dir = PathBuf::from(std::env::var(venv.env).unwrap_or_else(|_| venv.default.into()));
        let made = std::fs::read_to_string(dir.join(".onejob-installed-requirements"));
        assert_eq!(
            made.ok().as_deref(),
            Some(super::docs::page(venv.requirements).as_str()),
            "the README's {name} is the venv .ci/run makes at {} from {}: run .ci/run's step \
             for it (or set {})",
            dir.display(),
            venv.requirements,
            venv.env
        );
        shell.path.insert(0, dir.join("bin"));
        self.active = Some(venv);
    }

    /// `pip install -r FILE`: the active venv was made from FILE.
    fn pip(&self, command: &str) {
        let venv = self.active.expect("pip install runs in an activated venv");
        assert!(
            command.starts_with(&format!("pip install -r {} ", venv.requirements)),
            "the README installs {} into this venv: {command}",
            venv.requirements
        );
    }
}

/// `npm ci --prefix DIR`: `.ci/run` installed DIR's lock file there.
fn npm_ci(command: &str) {
    let dir = command
        .split_whitespace()
        .skip_while(|word| *word != "--prefix")
        .nth(1)
        .expect("npm ci --prefix DIR");
    let dir = repository().join(dir);
    let installed = std::fs::read_to_string(dir.join("node_modules/.onejob-installed-lock"));
    assert_eq!(
        installed.ok(),
        std::fs::read_to_string(dir.join("package-lock.json")).ok(),
        "{}/node_modules is installed from its package-lock.json (`npm ci --prefix {}` and \
         copy the lock file to node_modules/.onejob-installed-lock, as .ci/run does)",
        dir.display(),
        dir.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_runs_top_to_bottom_in_one_state() {
    let readme = page("README.md");
    let ci = page(".ci/run");
    let demo_dir = tempfile::tempdir().unwrap();
    let (mut server, url, key) = serve_demo(demo_dir.path()).await;
    let generated = tempfile::tempdir().unwrap();
    let mut shell = Shell::new(&repository());
    shell.vars.insert("KEY".into(), key.clone());
    let mut installs = Installs { active: None };
    let mut job = String::new();
    let mut files_run: Vec<String> = Vec::new();
    let mut ran = 0;
    let mut postgres_ran = false;

    for (lang, block) in fenced(&readme) {
        // "Your own PostgreSQL": the demo server is stopped first, as the README says.
        if block.contains("createdb") {
            let _ = server.kill().await;
            postgres(&block, &shell).await;
            postgres_ran = true;
            continue;
        }
        match lang.as_str() {
            "text" => {
                for shown in transcript(&block) {
                    if shown.command == "onejob serve" {
                        assert!(block.contains("onejob is running on http://127.0.0.1:8080"));
                        continue;
                    }
                    let command = substitute(&shown.command, "http://127.0.0.1:8080", &url);
                    let answer = shell.run(&command).await;
                    assert!(answer.ok, "{command}\n{}{}", answer.stdout, answer.stderr);
                    let status = answer
                        .stdout
                        .lines()
                        .next()
                        .and_then(|line| line.strip_prefix("HTTP/1.1 "))
                        .and_then(|rest| rest.split_whitespace().next())
                        .and_then(|code| code.parse::<u16>().ok());
                    assert_eq!(
                        status, shown.status,
                        "the README shows another status for\n{command}\n{}",
                        answer.stdout
                    );
                    if job.is_empty()
                        && let Some(id) = job_id(&answer.stdout)
                    {
                        job = id;
                        shell.vars.insert("JOB".into(), job.clone());
                    }
                    ran += 1;
                }
            }
            "sh" => {
                for command in commands(&block) {
                    let line = command
                        .split("   #")
                        .next()
                        .unwrap_or(&command)
                        .trim()
                        .to_owned();
                    if line.starts_with("git clone") || line == "cd onejob" {
                        continue; // the clone is the repository the test runs in
                    } else if let Some(install) = line.strip_prefix("cargo install ") {
                        assert!(
                            install.starts_with("--locked --path crates/")
                                && ci.contains(&format!("cargo install {install} ")),
                            ".ci/run runs the README's install command as written: {line}"
                        );
                    } else if line.starts_with("cargo run --locked -p onejob -- serve") {
                        continue; // the server this test started
                    } else if line.starts_with("cargo test") {
                        assert!(
                            ci.lines().any(|ci_line| ci_line == line),
                            ".ci/run runs exactly the README's test command: {line}"
                        );
                    } else if line.starts_with("onejob demo") {
                        let dir = tempfile::tempdir().unwrap();
                        let demo = format!(
                            "onejob demo --exit --listen 127.0.0.1:0 --dir {}",
                            dir.path().display()
                        );
                        let out = shell.run(&demo).await;
                        assert!(out.ok, "{demo}\n{}{}", out.stdout, out.stderr);
                    } else if line.starts_with("KEY=oj_") || line.starts_with("JOB=") {
                        continue; // the reader's own key and job are set already
                    } else if line.starts_with("python3 -m venv") {
                        installs.activate(&mut shell, &line);
                    } else if line.starts_with("pip install") {
                        installs.pip(&format!("{line} "));
                    } else if line.starts_with("npm ci") {
                        npm_ci(&line);
                    } else if let Some(assignment) = line.strip_prefix("export ") {
                        let (name, value) = assignment.split_once('=').unwrap();
                        let value = shell.run(&format!("printf %s \"{value}\"")).await.stdout;
                        shell.vars.insert(name.to_owned(), value);
                    } else {
                        let mut command = command.replace("http://127.0.0.1:8080", &url);
                        if command.contains("--output-path onejob_api") {
                            let to = generated.path().join("onejob_api");
                            command = command.replace(
                                "--output-path onejob_api",
                                &format!("--output-path {}", to.display()),
                            );
                        }
                        if let Some(rest) = command.strip_prefix("PYTHONPATH=. ") {
                            command = format!("PYTHONPATH={} {rest}", generated.path().display());
                        }
                        shell.vars.insert("ONEJOB_URL".into(), url.clone());
                        let out = shell.run(&command).await;
                        shell.vars.remove("ONEJOB_URL");
                        assert!(
                            out.ok && !out.stdout.contains("onejob.dev/problems/"),
                            "{command}\n{}{}",
                            out.stdout,
                            out.stderr
                        );
                        // A snippet file: it prints what the README says it prints.
                        if let Some(file) = command
                            .split_whitespace()
                            .find(|word| word.ends_with(".py") || word.ends_with(".mjs"))
                        {
                            let printed = out.stdout.trim_end();
                            assert!(
                                readme.contains(&format!("`{printed}`")),
                                "{file} printed {printed:?}, which the README does not say"
                            );
                            files_run.push(file.to_owned());
                        }
                    }
                    ran += 1;
                }
            }
            "python" | "js" => {
                let file = files_run
                    .iter()
                    .find(|file| page(file) == block)
                    .unwrap_or_else(|| {
                        panic!("a {lang} block is a repository file a command ran:\n{block}")
                    });
                assert!(!file.is_empty());
            }
            other => panic!("a {other:?} block in the README: run it here"),
        }
    }
    assert!(
        !job.is_empty(),
        "the curl session's first answer named a job"
    );
    assert_eq!(files_run.len(), 4, "the four snippets ran: {files_run:?}");
    assert!(postgres_ran, "the PostgreSQL section ran");
    assert!(ran >= 20, "ran {ran} commands");
}

/// "Your own PostgreSQL", as one script like the reader's shell: its `createdb` makes a
/// database of its own on the test server (dropped afterwards), which `ONEJOB_DATABASE`
/// then names; its nodes listen on free ports and are stopped at the end.
async fn postgres(block: &str, shell: &Shell) {
    let admin = crate::helpers::postgres_admin_url();
    let name = format!("onejob_readme_{}", uuid::Uuid::new_v4().simple());
    let mut url = url::Url::parse(&admin).unwrap();
    url.set_path(&name);
    url.set_query(Some("sslmode=prefer"));
    let (api, probes) = (free_port(), free_port());
    let script = substitute(
        block,
        "createdb -h 127.0.0.1 -U postgres onejob",
        &format!("createdb --maintenance-db='{admin}' {name}"),
    );
    let script = substitute(&script, "127.0.0.1:8080", &format!("127.0.0.1:{api}"));
    let script = substitute(&script, "127.0.0.1:9100", &format!("127.0.0.1:{probes}"));
    let walk = Walkthrough::run(
        &script,
        &shell.cwd,
        &[
            ("ONEJOB_DATABASE", url.to_string()),
            ("ONEJOB_LISTEN", format!("127.0.0.1:{api}")),
            ("ONEJOB_WORKER__LISTEN", format!("127.0.0.1:{probes}")),
        ],
    )
    .await;
    walk.stop();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _ = std::process::Command::new("dropdb")
        .args([
            &format!("--maintenance-db={admin}"),
            "--force",
            "--if-exists",
            &name,
        ])
        .status();
    walk.assert_succeeded("the PostgreSQL section");
    let (stdout, context) = (walk.stdout(), walk.context());
    let created = stdout
        .lines()
        .last()
        .and_then(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .unwrap_or_default();
    assert_eq!(created["kind"], "chat.completion", "the job\n{context}");
}

/// The README is the ten-minute introduction; reference material belongs in docs/.
#[test]
fn the_readme_stays_short() {
    let lines = page("README.md").lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines: move reference material into a docs/ page"
    );
}
