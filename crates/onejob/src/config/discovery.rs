//! Where the configuration file comes from (docs/design.md §8): `--config`, else
//! `$ONEJOB_CONFIG`, else `./onejob.toml` when it exists. What to do when none is found
//! (the demo, or a refusal) is the command line's decision, not this module's.

use std::path::{Path, PathBuf};

/// The file looked for in the working directory when no path is given.
pub const WORKING_DIR_FILE: &str = "onejob.toml";

/// The environment variable that names the config file.
pub const CONFIG_ENV: &str = "ONEJOB_CONFIG";

/// How a config file was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// Given with `--config`.
    Flag,
    /// Named by `$ONEJOB_CONFIG`.
    Env,
    /// `./onejob.toml`, found in the working directory.
    WorkingDir,
}

impl Found {
    /// How a person would name the source (`--config`, `ONEJOB_CONFIG`, `./onejob.toml`).
    pub fn describe(self) -> &'static str {
        match self {
            Found::Flag => "--config",
            Found::Env => CONFIG_ENV,
            Found::WorkingDir => "./onejob.toml",
        }
    }
}

/// The config file to use: `flag`, else `env` (the value of `$ONEJOB_CONFIG`; empty counts
/// as unset), else `onejob.toml` in `working_dir` if it is a file. `None` when there is none.
pub fn discover(
    flag: Option<&Path>,
    env: Option<&std::ffi::OsStr>,
    working_dir: &Path,
) -> Option<(PathBuf, Found)> {
    if let Some(path) = flag {
        return Some((path.to_owned(), Found::Flag));
    }
    if let Some(path) = env.filter(|value| !value.is_empty()) {
        return Some((PathBuf::from(path), Found::Env));
    }
    let local = working_dir.join(WORKING_DIR_FILE);
    local.is_file().then_some((local, Found::WorkingDir))
}

/// [`discover`] with this process's `$ONEJOB_CONFIG` and working directory.
pub fn discover_here(flag: Option<&Path>) -> Option<(PathBuf, Found)> {
    let env = std::env::var_os(CONFIG_ENV);
    discover(flag, env.as_deref(), Path::new("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_wins_then_the_environment_then_the_working_directory() {
        let dir = tempfile::tempdir().unwrap();
        let env = std::ffi::OsStr::new("/etc/onejob.toml");
        assert_eq!(discover(None, None, dir.path()), None);
        assert_eq!(discover(None, Some("".as_ref()), dir.path()), None);
        std::fs::write(dir.path().join("onejob.toml"), "").unwrap();
        assert_eq!(
            discover(None, None, dir.path()),
            Some((dir.path().join("onejob.toml"), Found::WorkingDir))
        );
        assert_eq!(
            discover(None, Some(env), dir.path()),
            Some((PathBuf::from("/etc/onejob.toml"), Found::Env))
        );
        assert_eq!(
            discover(Some("a.toml".as_ref()), Some(env), dir.path()),
            Some((PathBuf::from("a.toml"), Found::Flag))
        );
    }

    #[test]
    fn a_directory_named_onejob_toml_is_not_a_config_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("onejob.toml")).unwrap();
        assert_eq!(discover(None, None, dir.path()), None);
    }
}
