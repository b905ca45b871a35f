//! PostgreSQL for the fault runs: a fresh database on the shared server (dropped
//! afterwards), or a whole throwaway cluster of our own that a run may stop and start.
//!
//! The shared server on 127.0.0.1:5432 serves other tests at the same time; it is never
//! restarted. [`Cluster`] is `initdb` into a temporary directory, run as the `postgres` user
//! (PostgreSQL refuses to run as root) on a free port with its socket in that directory, and
//! removed with everything in it when dropped. [`Cluster::start_standby_of`] adds a
//! streaming standby of such a cluster (`pg_basebackup -R`), for the failover scenario.

use std::{path::PathBuf, process::Command, time::Duration};

use sqlx::{Connection, Executor, PgConnection};

/// The shared server's admin URL (`ONEJOB_TEST_POSTGRES`, as for onejob's own tests).
pub fn shared_admin_url() -> String {
    std::env::var("ONEJOB_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// A fresh database, dropped (with its connections) when this is dropped.
pub struct Database {
    /// Its URL.
    pub url: String,
    admin: String,
    name: String,
}

impl Database {
    /// Creates `onejob_chaos_<random>` on the server at `admin`.
    pub async fn create(admin: &str) -> Database {
        let name = format!("onejob_chaos_{}", uuid::Uuid::now_v7().simple());
        let mut conn = PgConnection::connect(admin)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL is required ({admin}): {e}"));
        conn.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .expect("create the chaos database");
        let mut url = url::Url::parse(admin).expect("admin url");
        url.set_path(&name);
        Database {
            url: url.to_string(),
            admin: admin.to_owned(),
            name,
        }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                if let Ok(mut conn) = PgConnection::connect(&admin).await {
                    let _ = conn
                        .execute(sqlx::AssertSqlSafe(format!(
                            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                        )))
                        .await;
                }
            });
        })
        .join();
    }
}

/// A free port for a cluster: the first free one of `$ONEJOB_PG_PORTS` (`FIRST-LAST`, for
/// machines where each user of the PostgreSQL binaries keeps to a range of ports), else any
/// free port.
pub fn cluster_port() -> u16 {
    let range = std::env::var("ONEJOB_PG_PORTS").ok().and_then(|range| {
        let (first, last) = range.split_once('-')?;
        Some(first.trim().parse::<u16>().ok()?..=last.trim().parse::<u16>().ok()?)
    });
    // Handed out once per process: clusters made side by side must not pick the same one
    // before either has started.
    static TAKEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let Some(range) = range else {
        return crate::node::free_port();
    };
    let mut taken = TAKEN.lock().expect("never poisoned");
    let port = range
        .into_iter()
        .find(|&port| {
            !taken.contains(&port)
                && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
                && std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
        })
        .expect("a free port in ONEJOB_PG_PORTS");
    taken.push(port);
    port
}

/// A PostgreSQL cluster of our own.
pub struct Cluster {
    /// Its port on 127.0.0.1.
    pub port: u16,
    dir: tempfile::TempDir,
    bin: PathBuf,
}

/// How to stop a cluster.
#[derive(Debug, Clone, Copy)]
pub enum StopMode {
    /// `pg_ctl stop -m fast`: sessions are terminated, a clean shutdown.
    Fast,
    /// `pg_ctl stop -m immediate`: like a crash; recovery runs at the next start.
    Immediate,
}

impl Cluster {
    /// The PostgreSQL server binaries: `$ONEJOB_PG_BIN`, else the newest under
    /// `/usr/lib/postgresql`.
    pub fn bin_dir() -> PathBuf {
        if let Ok(dir) = std::env::var("ONEJOB_PG_BIN") {
            return PathBuf::from(dir);
        }
        let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL's server binaries under /usr/lib/postgresql")
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|p| p.join("initdb").exists())
            .collect();
        versions.sort();
        versions.pop().expect("an initdb under /usr/lib/postgresql")
    }

    /// `initdb` and start a cluster on a free port.
    pub fn start_new() -> Cluster {
        Self::start_new_with("")
    }

    /// [`Cluster::start_new`], with these lines added to its `postgresql.auto.conf` before
    /// it starts (e.g. `shared_preload_libraries = 'citus'`).
    pub fn start_new_with(settings: &str) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("onejob-chaos-pg-")
            .tempdir()
            .expect("cluster directory");
        let bin = Self::bin_dir();
        let cluster = Cluster {
            port: cluster_port(),
            dir,
            bin,
        };
        cluster.hand_to_postgres();
        run_as_postgres(
            &[
                &cluster.tool("initdb"),
                "-D",
                &cluster.data(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
            true,
        );
        // Enough connections for three nodes' pools and their listeners.
        std::fs::write(
            format!("{}/postgresql.auto.conf", cluster.data()),
            format!(
                "max_connections = 200\nfsync = off\nlisten_addresses = '127.0.0.1'\n{settings}"
            ),
        )
        .expect("cluster settings");
        cluster.hand_to_postgres();
        cluster.start();
        cluster
    }

    /// As root, gives the directory to the `postgres` user (the server refuses to run as
    /// root); otherwise we already are the user the server runs as.
    fn hand_to_postgres(&self) {
        if is_root() {
            run_as_postgres(&["chown", "-R", "postgres", &self.root()], false);
        }
    }

    fn root(&self) -> String {
        self.dir.path().display().to_string()
    }

    fn data(&self) -> String {
        format!("{}/data", self.root())
    }

    fn tool(&self, name: &str) -> String {
        self.bin.join(name).display().to_string()
    }

    /// The admin URL of this cluster.
    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server and waits until it accepts connections.
    pub fn start(&self) {
        let options = format!("-p {} -k {}", self.port, self.root());
        let log = format!("{}/server.log", self.root());
        run_as_postgres(
            &[
                &self.tool("pg_ctl"),
                "-D",
                &self.data(),
                "-o",
                &options,
                "-l",
                &log,
                "-w",
                "start",
            ],
            true,
        );
    }

    /// Stops the server.
    pub fn stop(&self, mode: StopMode) {
        let mode = match mode {
            StopMode::Fast => "fast",
            StopMode::Immediate => "immediate",
        };
        run_as_postgres(
            &[
                &self.tool("pg_ctl"),
                "-D",
                &self.data(),
                "-m",
                mode,
                "-w",
                "stop",
            ],
            true,
        );
    }

    /// A streaming standby of `primary` (`pg_basebackup -R -X stream`) on a free port,
    /// started; `primary` then waits for it at every commit (`synchronous_standby_names`,
    /// set only now that the standby is up: commits would block until then).
    pub fn start_standby_of(primary: &Cluster) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("onejob-chaos-pg-")
            .tempdir()
            .expect("cluster directory");
        let standby = Cluster {
            port: cluster_port(),
            dir,
            bin: primary.bin.clone(),
        };
        standby.hand_to_postgres();
        run_as_postgres(
            &[
                &standby.tool("pg_basebackup"),
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                "postgres",
                "-D",
                &standby.data(),
                "-R",
                "-X",
                "stream",
                // An immediate checkpoint, not one spread over minutes.
                "--checkpoint=fast",
                "--no-sync",
            ],
            true,
        );
        standby.start();
        primary.set("synchronous_standby_names", "'*'");
        standby
    }

    /// Sets `name = value` in `postgresql.auto.conf` and reloads the server.
    pub fn set(&self, name: &str, value: &str) {
        let path = format!("{}/postgresql.auto.conf", self.data());
        let mut conf = std::fs::read_to_string(&path).expect("postgresql.auto.conf");
        conf.push_str(&format!("{name} = {value}\n"));
        std::fs::write(&path, conf).expect("postgresql.auto.conf");
        run_as_postgres(&[&self.tool("pg_ctl"), "-D", &self.data(), "reload"], true);
    }

    /// Sets `name` to the text `value` ([`Cluster::set`], quoted) and waits until new
    /// sessions see it: the server has reloaded, and told its sessions to.
    pub async fn set_and_wait(&self, name: &str, value: &str) {
        self.set(name, &format!("'{}'", value.replace('\'', "''")));
        // In plain text: the check must not depend on the TLS being set up.
        let url = format!("{}?sslmode=disable", self.admin_url());
        for _ in 0..600 {
            let mut admin = PgConnection::connect(&url)
                .await
                .expect("the cluster answers");
            let now: String = sqlx::query_scalar("SELECT current_setting($1)")
                .bind(name)
                .fetch_one(&mut admin)
                .await
                .expect("current_setting");
            let _ = admin.close().await;
            if now == value {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "the cluster on port {} never reloaded {name} = {value:?}",
            self.port
        );
    }

    /// Serves TLS with this certificate and key (PEM): writes them as the data directory's
    /// `server.crt` and `server.key` (the key readable by the server's user only), turns
    /// `ssl` on and reloads.
    pub fn use_certificate(&self, certificate: &str, key: &str) {
        for (name, contents) in [("server.crt", certificate), ("server.key", key)] {
            let path = format!("{}/{name}", self.data());
            std::fs::write(&path, contents).expect("write the certificate");
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .expect("certificate permissions");
        }
        self.hand_to_postgres();
        self.set("ssl", "on");
    }

    /// SIGKILLs the postmaster (its backends exit when they notice), as a dead machine
    /// would leave it; waits until the port refuses connections.
    pub fn kill(&self) {
        let pid = std::fs::read_to_string(format!("{}/postmaster.pid", self.data()))
            .expect("postmaster.pid");
        let pid = pid.lines().next().expect("pid line").trim().to_owned();
        let _ = Command::new("kill").args(["-KILL", &pid]).output();
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Promotes this standby (`pg_ctl promote -w`: returns once it accepts writes).
    pub fn promote(&self) {
        run_as_postgres(
            &[&self.tool("pg_ctl"), "-D", &self.data(), "-w", "promote"],
            true,
        );
    }

    /// Restarts a killed primary as a standby of `primary` (`standby.signal` and its
    /// `primary_conninfo`): it comes back read-only, as a failover manager brings it back.
    pub fn restart_as_standby_of(&self, primary: &Cluster) {
        // Its backends may outlive the SIGKILLed postmaster for a moment.
        std::thread::sleep(Duration::from_millis(500));
        let _ = std::fs::remove_file(format!("{}/postmaster.pid", self.data()));
        std::fs::write(format!("{}/standby.signal", self.data()), "").expect("standby.signal");
        let path = format!("{}/postgresql.auto.conf", self.data());
        let mut conf = std::fs::read_to_string(&path).expect("postgresql.auto.conf");
        conf.push_str(&format!(
            "primary_conninfo = 'host=127.0.0.1 port={} user=postgres'\n\
             synchronous_standby_names = ''\nrecovery_target_timeline = 'latest'\n",
            primary.port
        ));
        std::fs::write(&path, conf).expect("postgresql.auto.conf");
        self.hand_to_postgres();
        self.start();
    }

    /// Makes sure the server stops, and its directory goes, once this process has exited,
    /// however it exits: for a cluster kept in a `static` (whose `Drop` never runs), shared
    /// by a test process's tests. A small shell watches this process and then stops it.
    pub fn stop_when_this_process_exits(&self) {
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             {stop} -D {data} -m immediate stop >/dev/null 2>&1; rm -rf {root}",
            pid = std::process::id(),
            stop = if is_root() {
                format!("runuser -u postgres -- {}", self.tool("pg_ctl"))
            } else {
                self.tool("pg_ctl")
            },
            data = self.data(),
            root = self.root(),
        );
        let _ = Command::new("setsid")
            .args(["sh", "-c", &script])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }

    /// Waits until a connection succeeds.
    pub async fn wait_accepting(&self) {
        for _ in 0..300 {
            if PgConnection::connect(&self.admin_url()).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the chaos cluster on port {} did not come up", self.port);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let stop = [
            self.tool("pg_ctl"),
            "-D".into(),
            self.data(),
            "-m".into(),
            "immediate".into(),
            "stop".into(),
        ];
        let _ = if is_root() {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .args(&stop)
                .output()
        } else {
            Command::new(&stop[0]).args(&stop[1..]).output()
        };
        // The TempDir removes the directory (we are root, so its owner does not matter).
    }
}

/// Runs a command as the `postgres` user when we are root (PostgreSQL refuses root), else
/// as ourselves; `as_postgres = false` runs it as we are.
fn run_as_postgres(args: &[&str], as_postgres: bool) {
    let mut command = if as_postgres && is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).args(args);
        c
    } else {
        let mut c = Command::new(args[0]);
        c.args(&args[1..]);
        c
    };
    let output = command.output().expect("run a PostgreSQL tool");
    assert!(
        output.status.success(),
        "{args:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout == b"0\n")
}
