//! `onejob migrate --database URL`: apply the schema migrations and exit.

use super::DatabaseArgs;
use crate::{app::open_store, store::redact};

/// Runs `onejob migrate`.
pub async fn run(args: DatabaseArgs) -> anyhow::Result<()> {
    let store = open_store(&args.database).await?;
    eprintln!(
        "onejob: {} schema at {} is up to date",
        store.backend(),
        redact(&args.database)
    );
    Ok(())
}
