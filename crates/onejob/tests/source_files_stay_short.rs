//! No source file of the service crate is longer than 800 lines: a file that grows past it
//! holds more than one thing, and is split where its parts meet (a long unit test module
//! goes to `<module>/tests.rs`).

#[allow(
    dead_code,
    reason = "this test reads files only: `offending` is for the others"
)]
mod sources;

use std::path::Path;

/// The most lines a file under `src/` may have.
const MOST_LINES: usize = 800;

#[test]
fn no_source_file_is_longer_than_800_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = sources::rust_files(&src);
    assert!(files.len() > 100, "found the sources: {}", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|file| {
            let lines = std::fs::read_to_string(file).unwrap().lines().count();
            (lines > MOST_LINES).then(|| format!("{}: {lines} lines", file.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "split these where their parts meet (at most {MOST_LINES} lines each):\n{}",
        long.join("\n")
    );
}
