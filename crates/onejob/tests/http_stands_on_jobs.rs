//! The HTTP adapter (the API, the gateway's endpoints and the dashboard) and the CLI reach
//! the store only through the use cases in `src/jobs/`: no `store()` accessor, no `Store`
//! trait, no `dyn Store` anywhere under `src/http/` or `src/cli/`. A handler that needs
//! something new asks for a use case, which answers a domain error the handler maps to a
//! problem.

mod sources;

use std::path::Path;

/// The lines of `text` that reach for the store itself rather than a use case.
fn offences(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        let names_the_trait = code
            .match_indices("Store")
            .any(|(at, _)| !code[at + "Store".len()..].starts_with(char::is_alphanumeric))
            && (code.contains("store::") || code.contains("dyn Store") || code.contains("Store,"));
        if code.contains("store()") || code.contains("dyn Store") || names_the_trait {
            found.push((number + 1, line.trim().to_owned()));
        }
    }
    found
}

#[test]
fn no_handler_reaches_past_the_use_cases_to_the_store() {
    let http = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/http");
    let files = sources::rust_files(&http);
    assert!(
        files.len() > 20,
        "found the adapter's sources: {}",
        files.len()
    );
    let offending = sources::offending(files, offences);
    assert!(
        offending.is_empty(),
        "src/http/ reaches the store directly; add a use case in src/jobs/ instead:\n{}",
        offending.join("\n")
    );
}

/// The CLI's commands, `onejob verify`'s runs and the certificates' rules stand on the use
/// cases too; only start-up (`src/app.rs`) opens and migrates a database, and the worker's
/// loop talks to the store's transitions on purpose (the crate's layout, `src/lib.rs`).
#[test]
fn the_cli_verify_and_certification_stand_on_the_use_cases() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = sources::rust_files(&src.join("cli"));
    assert!(files.len() > 10, "found the CLI's sources: {}", files.len());
    files.push(src.join("verify.rs"));
    files.push(src.join("certification.rs"));
    let offending = sources::offending(files, offences);
    assert!(
        offending.is_empty(),
        "reaches the store directly; add a use case in src/jobs/ instead:\n{}",
        offending.join("\n")
    );
}

#[test]
fn the_check_sees_each_way_of_reaching_the_store() {
    assert_eq!(offences("let store = state.jobs.store();").len(), 1);
    assert_eq!(offences("fn f(store: &dyn Store) {}").len(), 1);
    assert_eq!(offences("use crate::store::{Store, StoreError};").len(), 1);
    assert_eq!(offences("use crate::store::Store;").len(), 1);
    assert!(offences("use crate::store::{JobRecord, StoreError};").is_empty());
    assert!(offences("ListingError::Store(error) => error.into(),").is_empty());
    assert!(offences("// the store() accessor is gone").is_empty());
}
