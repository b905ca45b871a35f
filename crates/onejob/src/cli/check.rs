//! `onejob config check [--config FILE] [--reach]`: validates a configuration without
//! starting anything, through the same code `serve` and `worker` start with.
//!
//! It finds the file as every command does (`--config`, `$ONEJOB_CONFIG`, `./onejob.toml`),
//! parses it with the `ONEJOB_*` overrides applied, compiles every kind (schema files found
//! and valid JSON Schemas, templates, providers named), builds every provider alone (its
//! adapter's settings, its connect timeout against its kinds' attempt timeouts, the secret
//! named by `api_key_env` set) and checks the database URL's scheme. Nothing is contacted
//! unless `--reach` asks: then each provider's address gets one HTTP request (any HTTP answer
//! counts as reached) and a PostgreSQL database one connection and a ping. Each check prints
//! one line; the exit code says how it ended ([`EXIT_CODES`]).

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::Subcommand;

use crate::{
    config::{Adapter, Config, ProviderConfig, discovery},
    kind::Kinds,
    provider::{Providers, provider_client},
    store::{self, StoreOptions},
};

/// The exit codes of `onejob config check`, as `--help` shows them.
pub const EXIT_CODES: &str = "\
Exit codes:
  0  the configuration is valid (with --reach: and every provider and the database answered)
  1  usage error, or no config file to check
  2  the configuration is invalid: the lines starting with `error` say where
  3  the configuration is valid, but with --reach a provider or the database did not answer";

/// `onejob config …`
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate a config file without starting anything: the file parses, every kind's
    /// schemas and template are found and compile, every provider's settings are valid and
    /// the secrets they name are set; with --reach, the providers and the database answer.
    #[command(after_help = EXIT_CODES)]
    Check(CheckArgs),
}

/// Arguments of `onejob config check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The onejob.toml to check (else `$ONEJOB_CONFIG`, else ./onejob.toml if present).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Also contact each provider (one HTTP request) and a PostgreSQL database (one
    /// connection), and fail with exit code 3 if one does not answer.
    #[arg(long)]
    reach: bool,
}

/// How a check ended, worst last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    Valid,
    Unreachable,
    Invalid,
}

/// The lines printed so far and the worst verdict among them.
#[derive(Debug)]
struct Report {
    verdict: Verdict,
}

impl Report {
    fn ok(&mut self, what: &str, line: impl std::fmt::Display) {
        println!("{what:<9} {line}");
    }

    fn error(&mut self, line: impl std::fmt::Display) {
        println!("error     {line}");
        self.verdict = self.verdict.max(Verdict::Invalid);
    }

    fn unreachable(&mut self, line: impl std::fmt::Display) {
        println!("no answer {line}");
        self.verdict = self.verdict.max(Verdict::Unreachable);
    }
}

/// Runs `onejob config check`.
pub async fn run(command: ConfigCommand) -> anyhow::Result<ExitCode> {
    let ConfigCommand::Check(args) = command;
    let Some((path, how)) = discovery::discover_here(args.config.as_deref()) else {
        eprintln!(
            "onejob: no config file to check: pass --config onejob.toml, set ONEJOB_CONFIG, or \
             put onejob.toml in the working directory"
        );
        return Ok(ExitCode::from(1));
    };
    let mut report = Report {
        verdict: Verdict::Valid,
    };
    let config = match Config::load(Some(&path)) {
        Ok(config) => config,
        Err(error) => {
            report.error(error);
            return Ok(finish(&report));
        }
    };
    report.ok(
        "config",
        format!("{} (found by {})", path.display(), how.describe()),
    );
    database(&mut report, &config.database, args.reach).await;
    match Kinds::compile(&config) {
        Ok(_) => {
            for kind in &config.kinds {
                let models: String = kind
                    .served()
                    .iter()
                    .map(|(endpoint, models)| {
                        format!(
                            "; serves models {} at {}",
                            models.join(", "),
                            endpoint.path()
                        )
                    })
                    .collect();
                let compiled: Vec<&str> = [
                    (kind.params_schema.is_some(), "params schema"),
                    (kind.output_schema.is_some(), "output schema"),
                    (kind.template.is_some(), "template"),
                ]
                .into_iter()
                .filter_map(|(has, what)| has.then_some(what))
                .collect();
                let compiled = match compiled.len() {
                    0 => "no schema or template".to_owned(),
                    1 => format!("{} compiles", compiled[0]),
                    _ => format!("{} compile", compiled.join(", ")),
                };
                report.ok(
                    "kind",
                    format!(
                        "{}: {compiled}; providers {}{models}",
                        kind.name,
                        kind.providers.join(", ")
                    ),
                );
            }
        }
        Err(error) => report.error(error),
    }
    let mut every_provider_built = true;
    for provider in &config.providers {
        let alone = Config {
            providers: vec![provider.clone()],
            ..config.clone()
        };
        match Providers::from_config(&alone).await {
            Ok(_) => {
                let secret = provider
                    .api_key_env
                    .as_ref()
                    .map(|var| format!("; secret {var} set"))
                    .unwrap_or_default();
                report.ok(
                    "provider",
                    format!(
                        "{} ({}): settings valid{secret}",
                        provider.name,
                        adapter_name(provider.adapter)
                    ),
                );
                if args.reach {
                    reach(&mut report, provider).await;
                }
            }
            Err(error) => {
                every_provider_built = false;
                report.error(error);
            }
        }
    }
    // Together, for what only shows among several (a name declared twice).
    if every_provider_built && let Err(error) = Providers::from_config(&config).await {
        report.error(error);
    }
    Ok(finish(&report))
}

/// Prints the verdict and gives the exit code it means.
fn finish(report: &Report) -> ExitCode {
    match report.verdict {
        Verdict::Valid => println!("ok: the configuration is valid"),
        Verdict::Unreachable => println!(
            "the configuration is valid, but something it names did not answer (see `no answer`)"
        ),
        Verdict::Invalid => println!("the configuration is invalid (see `error`)"),
    }
    ExitCode::from(match report.verdict {
        Verdict::Valid => 0,
        Verdict::Invalid => 2,
        Verdict::Unreachable => 3,
    })
}

fn adapter_name(adapter: Adapter) -> &'static str {
    match adapter {
        Adapter::OpenaiChat => "openai-chat",
        Adapter::AnthropicMessages => "anthropic-messages",
        Adapter::AsyncTask => "async-task",
        Adapter::Fake => "fake",
    }
}

/// Checks the database URL's scheme, and with `reach` connects to a PostgreSQL database.
async fn database(report: &mut Report, url: &str, reach: bool) {
    let shown = store::redact(url);
    if url.starts_with("sqlite:") {
        report.ok(
            "database",
            format!("{shown} (SQLite: a file here, created at start if missing)"),
        );
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        if !reach {
            report.ok(
                "database",
                format!("{shown} (PostgreSQL; --reach connects)"),
            );
            return;
        }
        let options = StoreOptions {
            max_connections: 1,
            acquire_timeout: Duration::from_secs(10),
            ..StoreOptions::default()
        };
        let answered = match store::open(url, &options).await {
            Ok(store) => store.ping().await,
            Err(error) => Err(error),
        };
        match answered {
            Ok(()) => report.ok("database", format!("{shown} (PostgreSQL): answered")),
            Err(error) => {
                report.unreachable(format!("database {shown}: {}", crate::store::Chain(&error)))
            }
        }
    } else {
        report.error(format!(
            "config key `database`: {shown} is neither postgres://… nor sqlite:…"
        ));
    }
}

/// One HTTP request to the address a provider is sent work at: any HTTP answer is an answer.
async fn reach(report: &mut Report, provider: &ProviderConfig) {
    let url = match provider.adapter {
        Adapter::AsyncTask => provider.submit_url.clone(),
        Adapter::OpenaiChat | Adapter::AnthropicMessages | Adapter::Fake => {
            provider.base_url.clone()
        }
    };
    let Some(url) = url else {
        report.ok(
            "reached",
            format!("{}: started in-process, nothing to reach", provider.name),
        );
        return;
    };
    let client = provider_client(
        provider
            .connect_timeout
            .unwrap_or(crate::config::DEFAULT_CONNECT_TIMEOUT),
    );
    match client
        .get(&url)
        .timeout(provider.request_timeout)
        .send()
        .await
    {
        Ok(answer) => report.ok(
            "reached",
            format!(
                "{} at {url}: HTTP {}",
                provider.name,
                answer.status().as_u16()
            ),
        ),
        Err(error) => {
            return report.unreachable(format!(
                "provider {} at {url}: {}",
                provider.name,
                crate::store::Chain(&error)
            ));
        }
    }
    if let (Adapter::AsyncTask, Some(template), Some(pointer)) = (
        provider.adapter,
        &provider.status_url,
        &provider.status_pointer,
    ) {
        status_probe(report, provider, &client, template, pointer).await;
    }
}

/// The task id a status probe asks about: no task has it, so no work is touched.
const PROBE_TASK_ID: &str = "onejob-config-check";

/// Asks an `async-task` provider's status URL about a task that does not exist and says
/// what `status_pointer` found in the answer: a pointer that finds nothing in an error
/// answer may still be right, so this informs and never fails the check.
async fn status_probe(
    report: &mut Report,
    provider: &ProviderConfig,
    client: &reqwest::Client,
    template: &str,
    pointer: &str,
) {
    let url = template.replace("{task_id}", PROBE_TASK_ID);
    let answer = match client
        .get(&url)
        .timeout(provider.request_timeout)
        .send()
        .await
    {
        Ok(answer) => answer,
        Err(error) => {
            return report.unreachable(format!(
                "provider {} status probe at {url}: {}",
                provider.name,
                crate::store::Chain(&error)
            ));
        }
    };
    let status = answer.status().as_u16();
    let found = match answer.json::<serde_json::Value>().await {
        Ok(body) => match body.pointer(pointer) {
            Some(value) => format!("status_pointer {pointer:?} found {value}"),
            None => {
                let keys = match &body {
                    serde_json::Value::Object(fields) => fields
                        .keys()
                        .take(20)
                        .map(String::as_str)
                        .collect::<Vec<_>>()
                        .join(", "),
                    _ => "none: not an object".into(),
                };
                format!("status_pointer {pointer:?} found nothing (top-level keys: {keys})")
            }
        },
        Err(_) => "the answer is not JSON".into(),
    };
    report.ok(
        "probed",
        format!(
            "{} status of task {PROBE_TASK_ID:?} at {url}: HTTP {status}; {found}",
            provider.name
        ),
    );
}
