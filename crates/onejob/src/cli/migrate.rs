//! `onejob migrate [--database URL | --config onejob.toml]`: apply the schema migrations
//! and exit, saying whether the schema was created, upgraded or already up to date. The
//! database is found as the `keys` commands find theirs ([`super::configure::DatabaseArgs`]).

use super::configure::Target;
use crate::{app::migrate_store, store::redact};

/// Runs `onejob migrate` on `target`.
pub async fn run(target: Target) -> anyhow::Result<()> {
    let migrated = migrate_store(&target.database).await?;
    let backend = if target.database.starts_with("sqlite:") {
        "SQLite"
    } else {
        "PostgreSQL"
    };
    let at = redact(&target.database);
    if migrated.created() {
        eprintln!(
            "onejob: created the {backend} schema at {at} ({} migrations)",
            migrated.applied
        );
    } else if migrated.applied > 0 {
        eprintln!(
            "onejob: upgraded the {backend} schema at {at} ({} of {} migrations were new)",
            migrated.applied,
            migrated.before + migrated.applied
        );
    } else {
        eprintln!("onejob: {backend} schema at {at} is up to date");
    }
    Ok(())
}
