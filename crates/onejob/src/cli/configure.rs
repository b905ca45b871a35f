//! Which configuration `serve`, `worker` and `verify` run with (docs/design.md §8): the
//! file found by [`crate::config::discovery`], or the built-in demo configuration —
//! silently never.
//!
//! Only a bare `onejob serve` (no config file found, no database given) falls back to the
//! demo, and says so. A `worker`, a `verify` or a `serve` pointed at a database runs the demo
//! kinds and their fake providers only when told `--demo`: otherwise real jobs of those
//! kinds could run against the fakes.

use std::path::PathBuf;

use anyhow::{Context, bail};

use crate::config::{
    Config, LogFormat,
    discovery::{self, Found},
};

/// The database environment variable: setting it points a command at a database.
const DATABASE_ENV: &str = "ONEJOB_DATABASE";

/// Where the configuration comes from, for the commands that run kinds.
#[derive(Debug, clap::Args)]
pub struct ConfigArgs {
    /// The onejob.toml to use (else `$ONEJOB_CONFIG`, else ./onejob.toml if present).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Run the built-in demo configuration (demo kinds, bundled fake providers) even though
    /// a database is given or this is not `serve`.
    #[arg(long)]
    pub demo: bool,
}

/// The command asking, which decides whether the demo may be a silent default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    /// `onejob serve`.
    Serve,
    /// `onejob worker`.
    Worker,
    /// `onejob verify`.
    Verify,
}

impl Runner {
    fn name(self) -> &'static str {
        match self {
            Runner::Serve => "onejob serve",
            Runner::Worker => "onejob worker",
            Runner::Verify => "onejob verify",
        }
    }
}

/// The configuration chosen, and whether it is the demo.
#[derive(Debug)]
pub struct Chosen {
    /// The configuration, `--database` applied.
    pub config: Config,
    /// Whether it is the built-in demo configuration.
    pub demo: bool,
    /// The config file it was read from (`None` for the demo).
    pub file: Option<PathBuf>,
    /// Whether `--database` replaced the file's `database`.
    pub database_given: bool,
    /// What to tell the user once logging is up.
    notice: Option<String>,
}

impl Chosen {
    /// Logs how the configuration was chosen (a warning for the demo).
    pub fn announce(&self) {
        if let Some(notice) = &self.notice {
            tracing::warn!("{notice}");
        }
    }
}

/// Chooses the configuration of `runner`, given its `--config`/`--demo` and `--database`.
pub fn choose(args: &ConfigArgs, database: Option<&str>, runner: Runner) -> anyhow::Result<Chosen> {
    let found = discovery::discover_here(args.config.as_deref());
    let database_given =
        database.is_some() || std::env::var_os(DATABASE_ENV).is_some_and(|value| !value.is_empty());
    let mut chosen = match (found, args.demo) {
        (Some((path, how)), false) => Chosen {
            config: Config::load(Some(&path))
                .with_context(|| format!("loading the config file named by {}", how.describe()))?,
            demo: false,
            file: Some(path),
            database_given: false,
            notice: None,
        },
        (Some((path, Found::Flag | Found::Env)), true) => bail!(
            "--demo runs the built-in demo configuration, but a config file was given ({}): \
             drop one of them",
            path.display()
        ),
        (Some((_, Found::WorkingDir)), true) => demo(
            "--demo: running the built-in demo configuration (demo kinds, bundled fake \
             providers); ./onejob.toml is ignored",
        )?,
        (None, true) => demo(
            "--demo: running the built-in demo configuration (demo kinds, bundled fake \
             providers)",
        )?,
        (None, false) if runner == Runner::Serve && !database_given => demo(
            "no config file (--config, ONEJOB_CONFIG or ./onejob.toml): running the built-in \
             demo configuration (sqlite://onejob.db, demo kinds, bundled fake providers)",
        )?,
        (None, false) => bail!(
            "no config file found for {}: pass --config onejob.toml, set ONEJOB_CONFIG, or put \
             onejob.toml in the working directory; to run the built-in demo kinds (with their \
             fake providers){}, pass --demo",
            runner.name(),
            if database_given {
                " against this database"
            } else {
                ""
            }
        ),
    };
    if let Some(database) = database {
        chosen.config.database = database.to_owned();
        chosen.database_given = true;
    }
    Ok(chosen)
}

fn demo(notice: &str) -> anyhow::Result<Chosen> {
    Ok(Chosen {
        config: Config::load(None)?,
        demo: true,
        file: None,
        database_given: false,
        notice: Some(notice.to_owned()),
    })
}

/// Which database `migrate` and the `keys` commands work on: `--database` (or
/// `ONEJOB_DATABASE`), else the `database` of the config file found as every command finds
/// it. With neither they refuse: a schema or a key written to a guessed `sqlite://onejob.db`
/// would serve nothing.
#[derive(Debug, clap::Args)]
pub struct DatabaseArgs {
    /// Database URL (`sqlite://onejob.db`, `postgres://user@host:5432/db?sslmode=require`);
    /// overrides the config file's `database`.
    #[arg(long, env = DATABASE_ENV)]
    database: Option<String>,
    /// The onejob.toml whose `database` to use (else `$ONEJOB_CONFIG`, else ./onejob.toml if
    /// present).
    #[arg(long, short)]
    config: Option<PathBuf>,
}

/// The database a command works on, resolved before logging starts.
#[derive(Debug)]
pub struct Target {
    /// The database URL.
    pub database: String,
    /// The config file's `log_format`, if a file was read.
    pub log_format: Option<LogFormat>,
}

impl DatabaseArgs {
    /// The database (and the config file's log format) to work on.
    pub fn target(&self) -> anyhow::Result<Target> {
        let file =
            match discovery::discover_here(self.config.as_deref()) {
                Some((path, how)) => Some(Config::load(Some(&path)).with_context(|| {
                    format!("loading the config file named by {}", how.describe())
                })?),
                None => None,
            };
        let log_format = file.as_ref().map(|config| config.log_format);
        let database = match (&self.database, file) {
            (Some(database), _) => database.clone(),
            (None, Some(config)) => config.database,
            (None, None) => bail!(
                "which database? pass --database URL (or set ONEJOB_DATABASE), or --config \
                 onejob.toml (or set ONEJOB_CONFIG, or put onejob.toml in the working \
                 directory) to use its `database`"
            ),
        };
        Ok(Target {
            database,
            log_format,
        })
    }
}
