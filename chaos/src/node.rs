//! onejob nodes as real processes: the `onejob` binary started with `serve` or `worker` on
//! a generated configuration, waited for, killed with SIGKILL or stopped with SIGTERM.

use std::{
    net::{SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use tokio::process::{Child, Command};

/// The `onejob` binary: `$ONEJOB_BIN`, else `onejob` beside the running test's `deps/`
/// directory (where `cargo build -p onejob` puts it, and `chaos/run.sh` builds it).
pub fn onejob_binary() -> PathBuf {
    if let Ok(path) = std::env::var("ONEJOB_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| {
            if deps.ends_with("deps") {
                deps.parent()
            } else {
                Some(deps)
            }
        })
        .expect("target/<profile>");
    let path = profile_dir.join("onejob");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build -p onejob` first (chaos/run.sh does) or set ONEJOB_BIN",
        path.display()
    );
    path
}

/// A free loopback port (bound, then released for the child to take).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// How a chaos node's `[[provider]]` speaks to its fake provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Adapter {
    /// `adapter = "fake"`: the bundled adapter for the fake (task API, lookup by key).
    Fake,
    /// `adapter = "async-task"` on the fake's task API (`/v1/tasks`), submitting the job's
    /// params only; `lookup` adds `lookup_url` (`/v1/tasks?idempotency_key={key}`).
    AsyncTask {
        /// Whether the provider can look tasks up by the forwarded idempotency key.
        lookup: bool,
    },
    /// `adapter = "openai-chat"` on the fake's chat API (`base_url = "<fake>/v1"`).
    OpenAiChat {
        /// The model name sent upstream (the fake answers any).
        model: String,
    },
}

/// One `[[provider]]` of a chaos node: a fake provider's server, spoken to by an adapter.
/// Every provider forwards an idempotency key (`idempotency_header = "Idempotency-Key"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSpec {
    /// Its name (what kinds, attempts and certificates call it).
    pub name: String,
    /// The fake server's base URL, `http://IP:PORT`.
    pub base_url: String,
    /// The adapter.
    pub adapter: Adapter,
}

impl ProviderSpec {
    /// A provider named `name` on the fake at `base_url`.
    pub fn new(name: &str, base_url: &str, adapter: Adapter) -> ProviderSpec {
        ProviderSpec {
            name: name.to_owned(),
            base_url: base_url.trim_end_matches('/').to_owned(),
            adapter,
        }
    }

    /// Its `[[provider]]` table.
    pub fn to_toml(&self) -> String {
        let (name, base) = (&self.name, &self.base_url);
        let head = format!("[[provider]]\nname = \"{name}\"\n");
        let keyed = "idempotency_header = \"Idempotency-Key\"\n\n";
        match &self.adapter {
            Adapter::Fake => {
                format!("{head}adapter = \"fake\"\nbase_url = \"{base}\"\n{keyed}")
            }
            Adapter::AsyncTask { lookup } => {
                let lookup = if *lookup {
                    format!("lookup_url = \"{base}/v1/tasks?idempotency_key={{key}}\"\n")
                } else {
                    String::new()
                };
                format!(
                    "{head}adapter = \"async-task\"\nsubmit_url = \"{base}/v1/tasks\"\n\
                     status_url = \"{base}/v1/tasks/{{task_id}}\"\n\
                     cancel_url = \"{base}/v1/tasks/{{task_id}}/cancel\"\n{lookup}\
                     task_id_pointer = \"/task_id\"\nstatus_pointer = \"/status\"\n\
                     result_pointer = \"/result\"\nsucceeded = [\"succeeded\"]\n\
                     failed = [\"failed\", \"cancelled\"]\n{keyed}"
                )
            }
            Adapter::OpenAiChat { model } => format!(
                "{head}adapter = \"openai-chat\"\nbase_url = \"{base}/v1\"\n\
                 model = \"{model}\"\n{keyed}"
            ),
        }
    }
}

/// The settings a chaos node's `onejob.toml` is written from.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The database URL.
    pub database: String,
    /// The providers, in failover order.
    pub providers: Vec<ProviderSpec>,
    /// Attempts one process runs at once.
    pub concurrency: usize,
    /// The worker's lease.
    pub lease: Duration,
    /// The worker's fallback poll interval.
    pub poll_interval: Duration,
    /// The kind's attempt timeout.
    pub attempt_timeout: Duration,
    /// The kind's wait before the attempt after a definite failure.
    pub retry_backoff: Duration,
    /// More top-level tables, as TOML (such as `[retention]`), written before the providers.
    pub extra: String,
    /// Model names the OpenAI-compatible gateway serves (`POST /v1/chat/completions`): when
    /// any, a second kind, [`GATEWAY_KIND`], serves them on the `openai-chat` providers.
    /// Empty (the default): no gateway kind.
    pub gateway_models: Vec<String>,
}

/// The gateway kind a node serves its [`NodeConfig::gateway_models`] with.
pub const GATEWAY_KIND: &str = "chat.gateway";

impl NodeConfig {
    /// Sensible chaos defaults on `database` with one fake provider (`adapter = "fake"`).
    pub fn new(database: &str, fake_url: &str) -> NodeConfig {
        NodeConfig::with_provider(database, ProviderSpec::new("fake", fake_url, Adapter::Fake))
    }

    /// The same defaults with `provider` as the only provider.
    pub fn with_provider(database: &str, provider: ProviderSpec) -> NodeConfig {
        NodeConfig {
            database: database.to_owned(),
            providers: vec![provider],
            concurrency: 16,
            lease: Duration::from_secs(2),
            poll_interval: Duration::from_millis(200),
            attempt_timeout: Duration::from_secs(30),
            retry_backoff: Duration::from_millis(100),
            extra: String::new(),
            gateway_models: Vec::new(),
        }
    }

    /// The TOML text: `chat.completion` on the providers, each forwarding an idempotency
    /// key, with one contract case (`onejob verify` runs it; nothing else does); and, where
    /// [`NodeConfig::gateway_models`] names any, [`GATEWAY_KIND`] serving them on the
    /// `openai-chat` providers, one attempt per job (nothing upstream fails in the
    /// scenarios that use it: a second upstream call for a job could only be a second
    /// attempt).
    pub fn to_toml(&self) -> String {
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        let mut text = format!(
            "database = \"{database}\"\n\n[worker]\nconcurrency = {concurrency}\nlease = \"{lease}\"\n\
             poll_interval = \"{poll}\"\nshutdown_grace = \"500ms\"\n\n",
            database = self.database,
            concurrency = self.concurrency,
            lease = ms(self.lease),
            poll = ms(self.poll_interval),
        );
        text.push_str(&self.extra);
        text.push('\n');
        for provider in &self.providers {
            text.push_str(&provider.to_toml());
        }
        let names: Vec<String> = self
            .providers
            .iter()
            .map(|p| format!("\"{}\"", p.name))
            .collect();
        text.push_str(&format!(
            "[[kind]]\nname = \"chat.completion\"\nproviders = [{providers}]\n\
             attempt_timeout = \"{timeout}\"\nmax_attempts = 3\nretry_backoff = \"{backoff}\"\n\n\
             [kind.params_schema]\ntype = \"object\"\nrequired = [\"prompt\"]\n\
             additionalProperties = false\n[kind.params_schema.properties.prompt]\n\
             type = \"string\"\nminLength = 1\n\n\
             [kind.output_schema]\ntype = \"object\"\nrequired = [\"text\"]\n\
             additionalProperties = false\n[kind.output_schema.properties.text]\n\
             type = \"string\"\nminLength = 1\n\n\
             [[kind.contract]]\nname = \"describe a fox\"\n\
             params = {{ prompt = \"Describe a red fox.\" }}\nmust_contain = [\"fox\"]\n",
            providers = names.join(", "),
            timeout = ms(self.attempt_timeout),
            backoff = ms(self.retry_backoff),
        ));
        if !self.gateway_models.is_empty() {
            let quoted = |names: Vec<&str>| {
                names
                    .iter()
                    .map(|n| format!("\"{n}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let chat: Vec<&str> = self
                .providers
                .iter()
                .filter(|p| matches!(p.adapter, Adapter::OpenAiChat { .. }))
                .map(|p| p.name.as_str())
                .collect();
            text.push_str(&format!(
                "\n[[kind]]\nname = \"{GATEWAY_KIND}\"\nopenai_models = [{models}]\n\
                 providers = [{providers}]\nattempt_timeout = \"{timeout}\"\nmax_attempts = 1\n",
                models = quoted(self.gateway_models.iter().map(String::as_str).collect()),
                providers = quoted(chat),
                timeout = ms(self.attempt_timeout),
            ));
        }
        text
    }

    /// Writes the TOML to `dir/name.toml` and returns its path.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, self.to_toml()).expect("write node config");
        path
    }
}

/// What a node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `onejob serve`: API and worker.
    Serve,
    /// `onejob serve --no-worker`: API only.
    Api,
    /// `onejob worker`: worker only.
    Worker,
}

/// A running `onejob` process.
pub struct Node {
    /// Its name in logs and histories.
    pub name: String,
    /// Where its API listens (workers have none).
    pub addr: Option<SocketAddr>,
    role: Role,
    config: PathBuf,
    env: Vec<(String, String)>,
    child: Child,
}

impl Node {
    /// Starts `onejob` in `role` with the config at `config`; `env` adds variables (such as
    /// `ONEJOB_FAULT`). Its log goes to `log`.
    pub fn start(name: &str, role: Role, config: &Path, env: &[(&str, &str)], log: &Path) -> Node {
        let addr = match role {
            Role::Worker => None,
            Role::Serve | Role::Api => Some(SocketAddr::from(([127, 0, 0, 1], free_port()))),
        };
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let child = spawn(role, addr, config, &env, log);
        Node {
            name: name.to_owned(),
            addr,
            role,
            config: config.to_owned(),
            env,
            child,
        }
    }

    /// Starts the same process again (same role, configuration, variables and API
    /// address), after it was killed or stopped; its log goes to `log`.
    pub fn restart(&mut self, log: &Path) {
        self.child = spawn(self.role, self.addr, &self.config, &self.env, log);
    }

    /// The process id while it runs (part of its worker id, `host:pid:suffix`).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The API's base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr.expect("an API node"))
    }

    /// Waits until `/healthz` answers (API nodes) or a moment has passed (workers).
    pub async fn wait_ready(&mut self) {
        let Some(addr) = self.addr else {
            return;
        };
        let client = crate::client::http_client(Duration::from_secs(5));
        for _ in 0..600 {
            if let Some(status) = self.child.try_wait().expect("child status") {
                panic!("{} exited at start: {status}", self.name);
            }
            if let Ok(response) = client.get(format!("http://{addr}/healthz")).send().await
                && response.status().is_success()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{} did not become ready", self.name);
    }

    /// Kills the process with SIGKILL and reaps it.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// Waits for the process to exit by itself (as after an armed `ONEJOB_FAULT` abort).
    pub async fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        tokio::time::timeout(within, self.child.wait())
            .await
            .ok()
            .and_then(Result::ok)
    }

    /// Sends SIGTERM and waits for the process to stop.
    pub async fn terminate(&mut self) {
        if let Some(pid) = self.child.id() {
            // `kill(1)` sends SIGTERM without a libc dependency.
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status()
                .await;
            if self.wait_exit(Duration::from_secs(20)).await.is_none() {
                self.kill().await;
            }
        }
    }
}

/// Spawns `onejob` in `role` (an API node listening on `addr`), its output going to `log`.
fn spawn(
    role: Role,
    addr: Option<SocketAddr>,
    config: &Path,
    env: &[(String, String)],
    log: &Path,
) -> Child {
    let mut command = Command::new(onejob_binary());
    match role {
        Role::Worker => {
            command.arg("worker");
        }
        Role::Serve | Role::Api => {
            let addr = addr.expect("an API node has an address");
            command.arg("serve").arg("--listen").arg(addr.to_string());
            if role == Role::Api {
                command.arg("--no-worker");
            }
        }
    }
    let log = std::fs::File::create(log).expect("node log file");
    command
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log handle"))
        .stderr(log)
        .kill_on_drop(true);
    command.spawn().expect("start onejob")
}

/// Creates an API key with `onejob keys create` and returns it.
pub async fn create_key(database: &str, tenant: &str, user: &str, operator: bool) -> String {
    let mut command = Command::new(onejob_binary());
    command
        .args(["keys", "create", "--database", database])
        .args(["--tenant", tenant, "--user", user]);
    if operator {
        command.arg("--operator");
    }
    let output = command.output().await.expect("run onejob keys create");
    assert!(
        output.status.success(),
        "onejob keys create: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("utf-8 key")
        .trim()
        .to_owned()
}

/// Runs `onejob verify --provider P --kind K --config CONFIG --json` (the real binary, so
/// the certificate lands in the configuration's database as an operator's would) and
/// returns whether it passed (its exit status) and the report it printed.
pub async fn verify(config: &Path, provider: &str, kind: &str) -> (bool, serde_json::Value) {
    let output = Command::new(onejob_binary())
        .arg("verify")
        .arg("--config")
        .arg(config)
        .args(["--provider", provider, "--kind", kind, "--json"])
        .env("RUST_LOG", "warn")
        .output()
        .await
        .expect("run onejob verify");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "onejob verify printed no JSON report ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.success(), report)
}
