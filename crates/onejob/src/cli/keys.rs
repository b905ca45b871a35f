//! `onejob keys create | list | revoke`: issue an API key (printed alone on stdout), list
//! the keys, revoke one.
//!
//! The database is `--database` (or `ONEJOB_DATABASE`), else the `database` of the config
//! file found as every command finds it (`--config`, `ONEJOB_CONFIG`, `./onejob.toml`).
//! With neither, the commands refuse: a key written to a guessed `sqlite://onejob.db`
//! would authenticate nothing.

use anyhow::{Context, bail};
use clap::Subcommand;
use onejob_domain::Principal;

use super::{
    configure::{DatabaseArgs, Target},
    display::timestamp,
};
use crate::{
    api_key,
    app::open_existing_store,
    jobs::keys::ApiKeys,
    store::{ApiKeySummary, Revocation},
};

/// `onejob keys …`
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create an API key for a tenant's user and print it (only the key, on stdout).
    Create(CreateArgs),
    /// List the API keys: id, tenant, user, operator, created, revoked (never secrets).
    List(ListArgs),
    /// Revoke an API key: API nodes refuse it once their key cache expires
    /// (`[http] key_cache_ttl`, 30 s by default).
    Revoke(RevokeArgs),
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

/// Arguments of `onejob keys list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    database: DatabaseArgs,
}

/// Arguments of `onejob keys revoke`.
#[derive(Debug, clap::Args)]
pub struct RevokeArgs {
    #[command(flatten)]
    database: DatabaseArgs,
    /// The key's id (the hex part after `oj_`), or the whole key.
    key_id: String,
}

impl KeysCommand {
    /// Where this command looks for its database.
    pub fn database(&self) -> &DatabaseArgs {
        match self {
            KeysCommand::Create(args) => &args.database,
            KeysCommand::List(args) => &args.database,
            KeysCommand::Revoke(args) => &args.database,
        }
    }
}

/// Runs `onejob keys …` on `target`.
pub async fn run(command: KeysCommand, target: Target) -> anyhow::Result<()> {
    match command {
        KeysCommand::Create(args) => {
            anyhow::ensure!(
                !args.tenant.is_empty() && !args.user.is_empty(),
                "--tenant and --user must not be empty"
            );
            let keys = ApiKeys::new(open_existing_store(&target.database).await?);
            let token = keys
                .issue(Principal::new(args.tenant, args.user), args.operator)
                .await?;
            println!("{token}");
            Ok(())
        }
        KeysCommand::List(_) => {
            let keys = ApiKeys::new(open_existing_store(&target.database).await?);
            print!("{}", table(&keys.list().await?));
            Ok(())
        }
        KeysCommand::Revoke(args) => {
            let id = api_key::parse(&args.key_id).map_or(args.key_id.as_str(), |(id, _)| id);
            let keys = ApiKeys::new(open_existing_store(&target.database).await?);
            match keys.revoke(id).await? {
                Revocation::Revoked(key) => {
                    println!(
                        "revoked key {} (tenant {}, user {}); API nodes refuse it once their \
                         key cache expires ([http] key_cache_ttl, 30s by default)",
                        key.id, key.principal.tenant, key.principal.user
                    );
                    Ok(())
                }
                Revocation::AlreadyRevoked(key) => {
                    println!(
                        "key {} was already revoked at {}",
                        key.id,
                        key.revoked_at.map(timestamp).unwrap_or_default()
                    );
                    Ok(())
                }
                Revocation::Unknown => {
                    bail!("no API key has the id {id:?} (see `onejob keys list`)")
                }
            }
        }
    }
}

/// A timestamp to the second (the table's columns keep one width).
fn seconds(at: time::OffsetDateTime) -> String {
    timestamp(at.replace_nanosecond(0).unwrap_or(at))
}

/// The keys as aligned columns under a header line.
fn table(keys: &[ApiKeySummary]) -> String {
    let header = ["ID", "TENANT", "USER", "OPERATOR", "CREATED", "REVOKED"].map(str::to_owned);
    let rows: Vec<[String; 6]> = keys
        .iter()
        .map(|key| {
            [
                key.id.clone(),
                key.principal.tenant.clone(),
                key.principal.user.clone(),
                if key.operator { "yes" } else { "no" }.to_owned(),
                seconds(key.created_at),
                key.revoked_at.map_or_else(|| "-".to_owned(), seconds),
            ]
        })
        .collect();
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The demo principal's operator key kept in the file `path`: the one written there if it
/// still authenticates an operator in `keys`, else a new one, written there (readable by
/// the owner only). `true` when kept. The database keeps only a key's hash, so a key to
/// print again on the next start has to be kept somewhere: `onejob demo` keeps it in its
/// directory, a bare `onejob serve` beside its SQLite file.
pub(super) async fn kept_operator_key(
    keys: &ApiKeys,
    path: &std::path::Path,
) -> anyhow::Result<(String, bool)> {
    if let Ok(text) = std::fs::read_to_string(path) {
        let token = text.trim();
        if keys
            .authenticated(token)
            .await?
            .is_some_and(|record| record.operator)
        {
            return Ok((token.to_owned(), true));
        }
    }
    let token = keys.issue(Principal::new("demo", "demo"), true).await?;
    write_private(path, &format!("{token}\n"))
        .with_context(|| format!("keeping the operator key in {}", path.display()))?;
    Ok((token, false))
}

/// Writes `text` to `path`, readable and writable by the owner only (on Unix).
fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    #[test]
    fn the_table_aligns_its_columns_and_marks_revoked_keys() {
        let key = |id: &str, user: &str, revoked| ApiKeySummary {
            id: id.to_owned(),
            principal: Principal::new("acme", user),
            operator: user == "ops",
            created_at: datetime!(2026-12-01 10:00:00 UTC),
            revoked_at: revoked,
        };
        let text = table(&[
            key("0011223344556677", "alice", None),
            key(
                "8899aabbccddeeff",
                "ops",
                Some(datetime!(2026-12-02 11:30:00 UTC)),
            ),
        ]);
        assert_eq!(
            text,
            "ID                TENANT  USER   OPERATOR  CREATED               REVOKED\n\
             0011223344556677  acme    alice  no        2026-12-01T10:00:00Z  -\n\
             8899aabbccddeeff  acme    ops    yes       2026-12-01T10:00:00Z  2026-12-02T11:30:00Z\n"
        );
    }
}
