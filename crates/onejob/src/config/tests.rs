//! Configuration loading: defaults, overrides and error messages that point at the problem.

use std::path::{Path, PathBuf};

use super::*;

/// `text` as a configuration file `onejob.toml` in the working directory.
pub(crate) fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml(
        text,
        Path::new("onejob.toml"),
        PathBuf::from("."),
        std::iter::empty(),
    )
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}
#[test]
fn an_empty_file_means_defaults() {
    let config = parse("").unwrap();
    assert_eq!(config.database, DEFAULT_DATABASE);
    assert!(config.kinds.is_empty());
}

#[test]
fn a_syntax_error_names_the_line() {
    let error = parse("listen = \"127.0.0.1:8080\"\ndatabase = \n").unwrap_err();
    let message = error.to_string();
    assert!(message.contains("onejob.toml"), "{message}");
    assert!(message.contains("line 2"), "{message}");
}

#[test]
fn a_wrong_type_names_the_line_and_key() {
    let message = parse("database = \"sqlite://x.db\"\nmax_body_bytes = \"big\"\n")
        .unwrap_err()
        .to_string();
    assert!(message.contains("line 2"), "{message}");
    assert!(message.contains("max_body_bytes"), "{message}");
}

#[test]
fn an_unknown_key_is_refused_by_name() {
    let message = parse("[[kind]]\nname = \"k\"\nmax_attempt = 3\n")
        .unwrap_err()
        .to_string();
    assert!(message.contains("max_attempt"), "{message}");
    assert!(message.contains("line 3"), "{message}");
}

#[test]
fn environment_overrides_win_and_others_are_ignored() {
    let config = Config::from_toml(
        "database = \"sqlite://file.db\"\n",
        Path::new("onejob.toml"),
        PathBuf::from("."),
        env(&[
            ("ONEJOB_DATABASE", "postgres://postgres@127.0.0.1/db"),
            ("ONEJOB_MAX_BODY_BYTES", "2048"),
            ("ONEJOB_WORKER__CONCURRENCY", "3"),
            ("ONEJOB_TEST_SOMETHING_ELSE", "ignored"),
            ("OTHER", "ignored"),
        ]),
    )
    .unwrap();
    assert_eq!(config.database, "postgres://postgres@127.0.0.1/db");
    assert_eq!(config.max_body_bytes, 2048);
    assert_eq!(config.worker.concurrency, 3);
}

#[test]
fn a_bad_environment_override_names_the_variable() {
    let message = Config::from_toml(
        "",
        Path::new("onejob.toml"),
        PathBuf::from("."),
        env(&[("ONEJOB_MAX_BODY_BYTES", "lots")]),
    )
    .unwrap_err()
    .to_string();
    assert!(message.contains("ONEJOB_MAX_BODY_BYTES"), "{message}");
}

#[test]
fn durations_read_as_humans_write_them() {
    let config =
        parse("[[kind]]\nname = \"k\"\nattempt_timeout = \"1m 30s\"\nhedge_after = \"250ms\"\n")
            .unwrap();
    assert_eq!(config.kinds[0].attempt_timeout.as_secs(), 90);
    assert_eq!(config.kinds[0].hedge_after.unwrap().as_millis(), 250);
    assert!(config.kinds[0].settle_unknown_after.is_none());
}

#[test]
fn http_bounds_have_defaults_and_can_be_set_by_file_or_env() {
    let defaults = parse("").unwrap();
    assert_eq!(
        defaults.http.header_read_timeout,
        std::time::Duration::from_secs(10)
    );
    assert_eq!(
        defaults.http.request_timeout,
        std::time::Duration::from_secs(30)
    );
    let set = Config::from_toml(
        "[http]\nheader_read_timeout = \"2s\"\n",
        Path::new("onejob.toml"),
        PathBuf::from("."),
        env(&[("ONEJOB_HTTP__REQUEST_TIMEOUT", "5s")]),
    )
    .unwrap();
    assert_eq!(
        set.http.header_read_timeout,
        std::time::Duration::from_secs(2)
    );
    assert_eq!(set.http.request_timeout, std::time::Duration::from_secs(5));
    assert!(
        parse("[http]\nrequest_timout = \"5s\"\n").is_err(),
        "typos are refused"
    );
}
