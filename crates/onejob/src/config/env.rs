//! The `ONEJOB_*` environment overlay: which variables count, how their values are typed,
//! and how they are laid over the parsed file before it is deserialized.
//!
//! `ONEJOB_MAX_BODY_BYTES=2048` sets `max_body_bytes`; a double underscore steps into a
//! table (`ONEJOB_WORKER__CONCURRENCY=3` sets `concurrency` in `[worker]`). Only variables
//! whose first segment is one of the keys passed in count; any other `ONEJOB_*` variable
//! (`ONEJOB_CONFIG`, `ONEJOB_TEST_POSTGRES`, …) is ignored. Values are typed as written:
//! `true`/`false` are booleans, whole numbers integers, numbers with a `.` floats, anything
//! else a string (`5s`, `127.0.0.1:8080`, `postgres://…`).

/// One override: the lower-case key path (`worker__concurrency`) and the raw value.
pub(super) type Override = (String, String);

/// The `ONEJOB_*` pairs of `env` whose top-level key is one of `keys`, in the order given.
pub(super) fn overrides(
    env: impl IntoIterator<Item = (String, String)>,
    keys: &[&str],
) -> Vec<Override> {
    env.into_iter()
        .filter_map(|(name, value)| {
            let key = name.strip_prefix("ONEJOB_")?.to_ascii_lowercase();
            let top = key.split("__").next().unwrap_or_default();
            keys.contains(&top).then_some((key, value))
        })
        .collect()
}

/// Sets each override in `table`, creating tables on the way (a value that stood where a
/// table is needed is replaced), and returns the variables' names for error messages.
pub(super) fn overlay(table: &mut toml::Table, overrides: &[Override]) -> Vec<String> {
    let mut names = Vec::with_capacity(overrides.len());
    for (key, value) in overrides {
        names.push(format!("ONEJOB_{}", key.to_ascii_uppercase()));
        let mut path: Vec<&str> = key.split("__").collect();
        let leaf = path.pop().unwrap_or_default();
        let mut current = &mut *table;
        for segment in path {
            let entry = current
                .entry(segment.to_owned())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if !entry.is_table() {
                *entry = toml::Value::Table(toml::Table::new());
            }
            current = entry.as_table_mut().expect("made a table just above");
        }
        current.insert(leaf.to_owned(), typed(value));
    }
    names
}

/// An environment value as a TOML value: boolean, integer, float (only when written with a
/// `.`), else the string itself.
fn typed(value: &str) -> toml::Value {
    let trimmed = value.trim();
    match trimmed {
        "true" => return toml::Value::Boolean(true),
        "false" => return toml::Value::Boolean(false),
        _ => {}
    }
    if let Ok(integer) = trimmed.parse::<i64>() {
        return toml::Value::Integer(integer);
    }
    if trimmed.contains('.')
        && let Ok(float) = trimmed.parse::<f64>()
        && float.is_finite()
    {
        return toml::Value::Float(float);
    }
    toml::Value::String(value.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_typed_as_written() {
        assert_eq!(typed("3"), toml::Value::Integer(3));
        assert_eq!(typed("-2"), toml::Value::Integer(-2));
        assert_eq!(typed("0.5"), toml::Value::Float(0.5));
        assert_eq!(typed("true"), toml::Value::Boolean(true));
        for text in [
            "5s",
            "127.0.0.1:8080",
            "postgres://u@h/db?sslmode=require",
            "nan",
        ] {
            assert_eq!(typed(text), toml::Value::String(text.into()), "{text}");
        }
    }

    #[test]
    fn a_nested_override_creates_or_joins_its_table() {
        let mut table: toml::Table = toml::from_str("[worker]\nlease = \"30s\"\n").unwrap();
        let names = overlay(
            &mut table,
            &[
                ("worker__concurrency".into(), "3".into()),
                ("http__request_timeout".into(), "5s".into()),
            ],
        );
        assert_eq!(
            names,
            ["ONEJOB_WORKER__CONCURRENCY", "ONEJOB_HTTP__REQUEST_TIMEOUT"]
        );
        assert_eq!(table["worker"]["lease"].as_str(), Some("30s"));
        assert_eq!(table["worker"]["concurrency"].as_integer(), Some(3));
        assert_eq!(table["http"]["request_timeout"].as_str(), Some("5s"));
    }
}
