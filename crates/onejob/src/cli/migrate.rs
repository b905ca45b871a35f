//! `onejob migrate [--database URL | --config onejob.toml]`: apply the schema migrations
//! and exit. The database is found as the `keys` commands find theirs
//! ([`super::configure::DatabaseArgs`]).

use super::configure::Target;
use crate::{app::open_store, store::redact};

/// Runs `onejob migrate` on `target`.
pub async fn run(target: Target) -> anyhow::Result<()> {
    let store = open_store(&target.database).await?;
    eprintln!(
        "onejob: {} schema at {} is up to date",
        store.backend(),
        redact(&target.database)
    );
    Ok(())
}
