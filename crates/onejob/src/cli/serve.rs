//! `onejob serve`: the API and a worker in one process (`--no-worker` for the API alone).
//!
//! With no config file found and no database given (or with `--demo`) it runs the built-in
//! demo configuration (`sqlite://onejob.db` unless told another database) and prints an
//! operator API key, kept beside a SQLite database (`onejob.db.key`) so that every start
//! prints the same one, with a curl line to try. With a config file, on a database that
//! holds no usable API key, it says how to make one (`onejob keys create --config …`).

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
};

use anyhow::Context;
use onejob_domain::Principal;

use super::{Chosen, ConfigArgs};
use crate::{app::App, store, verify};

/// Arguments of `onejob serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub(super) config: ConfigArgs,
    /// Override the listen address.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Override the database URL (without a config file, needs `--demo`).
    #[arg(long)]
    pub(super) database: Option<String>,
    /// Serve the API only; run workers separately with `onejob worker`.
    #[arg(long)]
    no_worker: bool,
}

/// Runs `onejob serve`.
pub async fn run(args: ServeArgs, chosen: Chosen) -> anyhow::Result<()> {
    let Chosen {
        mut config,
        demo,
        file,
        database_given,
        ..
    } = chosen;
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    let app = App::open(config).await?;
    let listener = app.bind().await?;
    let addr = listener.local_addr().context("reading the bound address")?;
    tracing::info!(%addr, database = app.store.backend(), "onejob serving");
    if demo {
        certify_bundled_fakes(&app).await?;
        let keys = app.jobs.api_keys();
        let kept = match sqlite_file(&app.config.database) {
            Some(file) => {
                let path = key_file(&file);
                let (token, _) = super::keys::kept_operator_key(&keys, &path).await?;
                (token, Some(path))
            }
            None => (
                keys.issue(Principal::new("demo", "demo"), true).await?,
                None,
            ),
        };
        print_welcome(addr, &store::redact(&app.config.database), kept);
    } else if !app
        .jobs
        .api_keys()
        .any_usable()
        .await
        .context("listing the API keys")?
    {
        tracing::warn!(
            "{}",
            no_key_hint(
                file.as_deref(),
                database_given,
                &store::redact(&app.config.database)
            )
        );
    }
    let worker = (!args.no_worker).then(|| app.spawn_worker());
    app.serve(listener, shutdown_signal()).await?;
    if let Some(worker) = worker {
        worker.shutdown().await;
    }
    Ok(())
}

/// What `serve` says on a database without a usable API key: the `keys create` line that
/// writes one where this server reads it (the same `--config`, or the same `--database`).
fn no_key_hint(file: Option<&std::path::Path>, database_given: bool, database: &str) -> String {
    let target = match file {
        Some(path) if !database_given => {
            let path = path.display().to_string();
            if path.contains(char::is_whitespace) {
                format!("--config '{path}'")
            } else {
                format!("--config {path}")
            }
        }
        _ => "--database URL".to_owned(),
    };
    format!(
        "no API key in {database}: every request will get 401 until you make one with \
         `onejob keys create {target} --tenant TENANT --user USER` (add --operator for the \
         operator endpoints){}",
        if target.starts_with("--database") {
            ", URL being the database this server uses"
        } else {
            ""
        }
    )
}

/// Runs every demo kind's contract against each of its (bundled fake) providers, so the
/// demo's failover and hedging have certificates, earned the same way real providers earn
/// theirs.
pub(super) async fn certify_bundled_fakes(app: &App) -> anyhow::Result<()> {
    let kinds = app.jobs.kinds();
    for name in kinds.names() {
        let kind = kinds.get(name).expect("listed kind").clone();
        for provider_name in &kind.providers {
            let Some(provider) = app.providers.get(provider_name) else {
                continue;
            };
            let limits = verify::Limits::of(&app.config, provider_name);
            let (report, _) = app
                .jobs
                .verify(&kind, provider_name, &**provider, limits)
                .await?;
            tracing::info!(
                provider = %provider_name,
                kind = %kind.name,
                passed = report.passed,
                "verified the demo contract"
            );
        }
    }
    Ok(())
}

/// The file of a `sqlite:` database URL, if it names one (not `:memory:`).
fn sqlite_file(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or_default();
    (!path.is_empty() && path != ":memory:").then(|| path.into())
}

/// Where a bare `serve` keeps its operator key: beside the database file, `onejob.db.key`.
fn key_file(database: &Path) -> PathBuf {
    let mut name = database.as_os_str().to_owned();
    name.push(".key");
    name.into()
}

fn print_welcome(addr: SocketAddr, database: &str, (token, kept): (String, Option<PathBuf>)) {
    let kept = match kept {
        Some(path) => format!("kept in {}", path.display()),
        None => "a new one each start".into(),
    };
    println!(
        "onejob is running on http://{addr} (demo config, database {database})\n\
         API key (tenant demo, user demo, operator; {kept}): {token}\n\n\
         Try it:\n  \
         curl -i http://{addr}/v1/jobs \\\n    \
         -H 'Authorization: Bearer {token}' \\\n    \
         -H 'Idempotency-Key: order-42:caption' \\\n    \
         -H 'Content-Type: application/json' \\\n    \
         -d '{{\"kind\": \"chat.completion\", \"params\": {{\"prompt\": \"Describe a red fox.\"}}}}'\n"
    );
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down");
}
