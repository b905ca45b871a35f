//! Reading the service's own sources, for the tests that keep a rule over them by scanning
//! (`sql_is_static`, `http_stands_on_jobs`).

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, at any depth.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    collect(dir, &mut out);
    out
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The offending lines of `files` as `path:line: code`, as `offences` finds them in each.
pub fn offending(
    files: impl IntoIterator<Item = PathBuf>,
    offences: impl Fn(&str) -> Vec<(usize, String)>,
) -> Vec<String> {
    let mut all = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, code) in offences(&text) {
            all.push(format!("{}:{line}: {code}", file.display()));
        }
    }
    all
}
