//! `onejob keys create`: issue an API key and print it, alone, on stdout.

use clap::Subcommand;
use onejob_domain::Principal;

use super::DatabaseArgs;
use crate::{api_key, app::open_store};

/// `onejob keys …`
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create an API key for a tenant's user and print it (only the key, on stdout).
    Create(CreateArgs),
}

/// Arguments of `onejob keys create`.
#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    #[command(flatten)]
    database: DatabaseArgs,
    /// The tenant the key belongs to.
    #[arg(long)]
    tenant: String,
    /// The user inside the tenant.
    #[arg(long)]
    user: String,
    /// Allow operator endpoints (resolving unknown attempts).
    #[arg(long)]
    operator: bool,
}

/// Runs `onejob keys …`.
pub async fn run(command: KeysCommand) -> anyhow::Result<()> {
    match command {
        KeysCommand::Create(args) => {
            anyhow::ensure!(
                !args.tenant.is_empty() && !args.user.is_empty(),
                "--tenant and --user must not be empty"
            );
            let store = open_store(&args.database.database).await?;
            let token = create(
                &*store,
                Principal::new(args.tenant, args.user),
                args.operator,
            )
            .await?;
            println!("{token}");
            Ok(())
        }
    }
}

/// Issues and stores a key; returns the token.
pub async fn create(
    store: &dyn crate::store::Store,
    principal: Principal,
    operator: bool,
) -> Result<String, crate::store::StoreError> {
    let issued = api_key::issue(principal, operator);
    store.insert_api_key(issued.record).await?;
    Ok(issued.token)
}
