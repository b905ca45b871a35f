//! No SQL is built by string formatting (docs/design.md §2.9, RELIABILITY.md "Security").
//!
//! With sqlx 0.9 this is structural: `query`, `query_as`, `query_scalar`, `raw_sql` and
//! `Executor::execute` take only an `impl SqlSafeStr`, implemented for `&'static str` (a
//! literal or `concat!` of literals) and for `AssertSqlSafe(..)`, the explicit escape hatch.
//! A `format!`ed string cannot reach the database without `AssertSqlSafe`. This test keeps
//! the hatch closed: no `AssertSqlSafe` in any crate's `src/` (tests, the test fixtures'
//! crate and the fault suite's database set-up may use it for `CREATE DATABASE`), and no
//! `format!` whose text starts like a SQL statement.

mod sources;

use std::path::{Path, PathBuf};

const SQL_STARTS: [&str; 8] = [
    "SELECT ", "INSERT ", "UPDATE ", "DELETE ", "CREATE ", "ALTER ", "DROP ", "WITH ",
];

/// The crate under `crates/` that is test set-up only (it creates and drops databases).
const TEST_FIXTURES: &str = "onejob-fixtures";

/// Every `.rs` file under `crates/*/src`, but the test fixtures'.
fn service_sources() -> Vec<PathBuf> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for krate in std::fs::read_dir(&crates).unwrap().flatten() {
        if krate.file_name() == TEST_FIXTURES {
            continue;
        }
        let src = krate.path().join("src");
        if src.is_dir() {
            files.extend(sources::rust_files(&src));
        }
    }
    assert!(files.len() > 50, "found the sources: {}", files.len());
    files
}

/// The offending lines of `text`: `AssertSqlSafe`, or a `format!` that starts a statement.
fn offences(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        let formats_sql = code.match_indices("format!(").any(|(at, _)| {
            let rest = code[at + "format!(".len()..].trim_start();
            let literal = rest
                .trim_start_matches('r')
                .trim_start_matches('#')
                .trim_start_matches('"');
            SQL_STARTS
                .iter()
                .any(|start| literal.to_ascii_uppercase().starts_with(start))
        });
        if code.contains("AssertSqlSafe") || formats_sql {
            found.push((number + 1, line.trim().to_owned()));
        }
    }
    found
}

#[test]
fn no_sql_is_built_by_string_formatting() {
    let all = sources::offending(service_sources(), offences);
    assert!(
        all.is_empty(),
        "SQL built from strings:\n{}",
        all.join("\n")
    );
}

#[test]
fn the_scan_catches_what_it_forbids() {
    let planted = r#"
        let sql = format!("SELECT * FROM jobs WHERE id = '{id}'");
        sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&pool).await?;
        let fine = format!("job {id}"); // SELECT in a comment is fine
    "#;
    let found: Vec<usize> = offences(planted).into_iter().map(|(n, _)| n).collect();
    assert_eq!(found, vec![2, 3]);
}
