//! A local Citus cluster for tests: a coordinator and two worker nodes, each a throwaway
//! PostgreSQL cluster ([`Cluster`]) started with `shared_preload_libraries = 'citus'`, and a
//! fresh database per test on all three, registered as one Citus cluster.
//!
//! Citus is the PostgreSQL extension onejob runs on past one primary (docs/scaling.md). It
//! must be installed in the PostgreSQL server binaries' library directory (CI installs it
//! with `../shared/citus/install.sh`); a missing Citus fails the tests that need it, it is
//! never skipped.
//!
//! Citus turns TLS on with a self-signed X.509 v1 certificate when its extension is created;
//! every URL here asks for `sslmode=disable`, and the coordinator talks to its workers the
//! same way (`citus.node_conninfo`).

use std::{path::PathBuf, process::Command};

use sqlx::{Connection, Executor, PgConnection};

use crate::postgres::{Cluster, StopMode};

/// The settings of every node: Citus loaded, and (on the coordinator) its connections to
/// the workers in plain text. Few shards per table, so that a database is distributed in a
/// moment and its shards still land on both workers. Room for the connections of many
/// tests side by side: each coordinator session may open its own to every worker.
const NODE_SETTINGS: &str = "shared_preload_libraries = 'citus'\n\
                             citus.node_conninfo = 'sslmode=disable'\n\
                             citus.shard_count = 4\n\
                             max_connections = 600\n\
                             max_prepared_transactions = 200\n";

/// A coordinator and its worker nodes, stopped and removed when dropped.
pub struct CitusCluster {
    /// The node onejob connects to.
    pub coordinator: Cluster,
    /// The nodes that hold the shards.
    pub workers: Vec<Cluster>,
}

impl CitusCluster {
    /// Panics with how to install Citus unless the PostgreSQL server binaries have it.
    pub fn require_installed() {
        let bin = Cluster::bin_dir();
        let libdir = Command::new(bin.join("pg_config"))
            .arg("--pkglibdir")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
            .unwrap_or_else(|| bin.join("../lib"));
        assert!(
            libdir.join("citus.so").exists(),
            "Citus is required for these tests and is not installed in {} (no citus.so): \
             run ../shared/citus/install.sh as root (CI's .ci/run does)",
            libdir.display()
        );
    }

    /// Starts a coordinator and `workers` worker nodes on free ports.
    pub fn start(workers: usize) -> CitusCluster {
        Self::require_installed();
        let coordinator = Cluster::start_new_with(NODE_SETTINGS);
        let workers = (0..workers)
            .map(|_| Cluster::start_new_with(NODE_SETTINGS))
            .collect();
        CitusCluster {
            coordinator,
            workers,
        }
    }

    /// Like [`CitusCluster::start`], kept for the life of this process: the nodes stop once
    /// the process has exited ([`Cluster::stop_when_this_process_exits`]).
    pub fn start_for_this_process(workers: usize) -> CitusCluster {
        let cluster = Self::start(workers);
        cluster.coordinator.stop_when_this_process_exits();
        for worker in &cluster.workers {
            worker.stop_when_this_process_exits();
        }
        cluster
    }

    /// The URL of `database` on the coordinator (plain text, see the module doc).
    pub fn url(&self, database: &str) -> String {
        node_url(&self.coordinator, database)
    }

    /// Creates `name` on every node, with the `citus` extension, and makes the workers the
    /// coordinator's worker nodes for it. onejob's `migrate` then distributes its tables.
    pub async fn create_database(&self, name: &str) {
        for node in std::iter::once(&self.coordinator).chain(&self.workers) {
            let mut admin = connect(&node_url(node, "postgres")).await;
            admin
                .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .await
                .unwrap_or_else(|e| panic!("create {name} on port {}: {e}", node.port));
            let _ = admin.close().await;
            let mut db = connect(&node_url(node, name)).await;
            db.execute("CREATE EXTENSION citus")
                .await
                .unwrap_or_else(|e| panic!("CREATE EXTENSION citus on port {}: {e}", node.port));
            let _ = db.close().await;
        }
        let mut db = connect(&self.url(name)).await;
        sqlx::query("SELECT citus_set_coordinator_host('127.0.0.1', $1)")
            .bind(i32::from(self.coordinator.port))
            .execute(&mut db)
            .await
            .expect("citus_set_coordinator_host");
        for worker in &self.workers {
            // A worker busy with other tests' databases may refuse a connection for a moment.
            let mut tries = 0;
            loop {
                let added = sqlx::query("SELECT citus_add_node('127.0.0.1', $1)")
                    .bind(i32::from(worker.port))
                    .execute(&mut db)
                    .await;
                match added {
                    Ok(_) => break,
                    Err(e) if tries < 10 => {
                        tries += 1;
                        eprintln!("citus_add_node port {}: {e}; again", worker.port);
                        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                    }
                    Err(e) => panic!("citus_add_node port {}: {e}", worker.port),
                }
            }
        }
        let _ = db.close().await;
    }

    /// Drops `name` on every node that answers (with its connections).
    pub async fn drop_database(&self, name: &str) {
        for node in std::iter::once(&self.coordinator).chain(&self.workers) {
            if let Ok(mut admin) = PgConnection::connect(&node_url(node, "postgres")).await {
                let _ = admin
                    .execute(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .await;
                let _ = admin.close().await;
            }
        }
    }

    /// Stops worker `index` as a crash would (`immediate`): its shards' tenants lose their
    /// data until [`CitusCluster::start_worker`].
    pub fn stop_worker(&self, index: usize) {
        self.workers[index].stop(StopMode::Immediate);
    }

    /// Starts worker `index` again.
    pub fn start_worker(&self, index: usize) {
        self.workers[index].start();
    }

    /// The tenants among `candidates` whose rows of `table` (distributed by `tenant`) live on
    /// worker `index` of `database`: Citus's own shard placement, read on the coordinator.
    pub async fn tenants_on_worker(
        &self,
        database: &str,
        table: &str,
        index: usize,
        candidates: &[String],
    ) -> Vec<String> {
        let mut db = connect(&self.url(database)).await;
        let port = i32::from(self.workers[index].port);
        let mut on = Vec::new();
        for tenant in candidates {
            let node: i32 = sqlx::query_scalar(
                "SELECT p.nodeport FROM pg_dist_placement pl \
                 JOIN pg_dist_node p ON p.groupid = pl.groupid \
                 WHERE pl.shardid = get_shard_id_for_distribution_column($1::regclass, $2)",
            )
            .bind(table)
            .bind(tenant)
            .fetch_one(&mut db)
            .await
            .expect("shard placement");
            if node == port {
                on.push(tenant.clone());
            }
        }
        let _ = db.close().await;
        on
    }
}

fn node_url(node: &Cluster, database: &str) -> String {
    format!(
        "postgres://postgres@127.0.0.1:{}/{database}?sslmode=disable",
        node.port
    )
}

async fn connect(url: &str) -> PgConnection {
    PgConnection::connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}
