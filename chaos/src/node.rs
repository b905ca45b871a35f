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

/// The settings a chaos node's `onejob.toml` is written from.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The database URL.
    pub database: String,
    /// The fake providers as `(name, base_url)`, in failover order.
    pub providers: Vec<(String, String)>,
    /// Attempts one process runs at once.
    pub concurrency: usize,
    /// The worker's lease.
    pub lease: Duration,
    /// The worker's fallback poll interval.
    pub poll_interval: Duration,
    /// The kind's attempt timeout.
    pub attempt_timeout: Duration,
}

impl NodeConfig {
    /// Sensible chaos defaults on `database` with one fake provider.
    pub fn new(database: &str, fake_url: &str) -> NodeConfig {
        NodeConfig {
            database: database.to_owned(),
            providers: vec![("fake".into(), fake_url.to_owned())],
            concurrency: 16,
            lease: Duration::from_secs(2),
            poll_interval: Duration::from_millis(200),
            attempt_timeout: Duration::from_secs(30),
        }
    }

    /// The TOML text: `chat.completion` on the fake providers, forwarding an idempotency key.
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
        for (name, url) in &self.providers {
            text.push_str(&format!(
                "[[provider]]\nname = \"{name}\"\nadapter = \"fake\"\nbase_url = \"{url}\"\n\
                 idempotency_header = \"Idempotency-Key\"\n\n"
            ));
        }
        let names: Vec<String> = self
            .providers
            .iter()
            .map(|(n, _)| format!("\"{n}\""))
            .collect();
        text.push_str(&format!(
            "[[kind]]\nname = \"chat.completion\"\nproviders = [{providers}]\n\
             attempt_timeout = \"{timeout}\"\nmax_attempts = 3\nretry_backoff = \"100ms\"\n\n\
             [kind.params_schema]\ntype = \"object\"\nrequired = [\"prompt\"]\n\
             additionalProperties = false\n[kind.params_schema.properties.prompt]\n\
             type = \"string\"\nminLength = 1\n\n\
             [kind.output_schema]\ntype = \"object\"\nrequired = [\"text\"]\n\
             additionalProperties = false\n[kind.output_schema.properties.text]\n\
             type = \"string\"\nminLength = 1\n",
            providers = names.join(", "),
            timeout = ms(self.attempt_timeout),
        ));
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
    child: Child,
}

impl Node {
    /// Starts `onejob` in `role` with the config at `config`; `env` adds variables (such as
    /// `ONEJOB_FAULT`). Its log goes to `log`.
    pub fn start(name: &str, role: Role, config: &Path, env: &[(&str, &str)], log: &Path) -> Node {
        let mut command = Command::new(onejob_binary());
        let addr = match role {
            Role::Worker => {
                command.arg("worker");
                None
            }
            Role::Serve | Role::Api => {
                let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
                command.arg("serve").arg("--listen").arg(addr.to_string());
                if role == Role::Api {
                    command.arg("--no-worker");
                }
                Some(addr)
            }
        };
        let log = std::fs::File::create(log).expect("node log file");
        command
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .kill_on_drop(true);
        let child = command.spawn().expect("start onejob");
        Node {
            name: name.to_owned(),
            addr,
            child,
        }
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
