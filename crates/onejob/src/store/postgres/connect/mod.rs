//! How the PostgreSQL store opens its pools: on the connections of `onejob-pg-connect`
//! (multi-host URLs that follow the host accepting writes, TLS, keepalives), each bounded
//! by the store's [`Bound`], and nothing about what runs on them.
//!
//! * here: opening a store's pool ([`connect`]), and the small side pools of its hot paths
//!   ([`side_pool`]), following the same hosts;
//! * [`held`]: connections checked only after they sat idle, in the shared pool and held by
//!   one serial writer across its uses.
//!
//! Bounding each statement in time (`store/bound.rs`) is the store's, for both databases.

use std::sync::Arc;

use onejob_pg_connect::{HostList, tls::TlsSettings, tunnel};
use sqlx::{Connection, PgConnection, PgPool, postgres::PgPoolOptions};

use crate::store::{StoreError, StoreOptions, bound::Bound};

pub(super) mod held;
#[cfg(test)]
mod tests;

pub(super) use onejob_pg_connect::{Hosts, Tunnel, probe_write, tcp};

/// A store's database, reached: its pool, bounded by `bound`, and what keeps the pool where
/// the writes go.
#[derive(Debug)]
pub(super) struct Connected {
    /// The shared pool.
    pub(super) pool: PgPool,
    /// How long each statement and commit may take; it gives a call up when the store moves
    /// to another host.
    pub(super) bound: Bound,
    /// The hosts of a URL naming several (or asking for a writable session), which keep
    /// every pool of the store on the host that accepts writes; `None` for a plain URL.
    pub(super) hosts: Option<Arc<Hosts>>,
    /// The TLS tunnel to a single host whose certificate rustls cannot read, if it needs
    /// one (with several hosts, [`Hosts`] keeps theirs). Held, not read.
    pub(super) tunnel: Option<Arc<Tunnel>>,
}

/// Connects a pool to `url` and checks that one connection can be opened, first running
/// `inspect` on that one connection (which is closed after).
///
/// `url` may list several hosts, `postgres://u@h1:5432,h2:5432/db`, with libpq's
/// `target_session_attrs` (`any`, `read-write`, `primary`): the pool then uses the first
/// host whose session matches and follows a failover ([`Hosts`]).
pub(super) async fn connect<T>(
    url: &str,
    options: &StoreOptions,
    inspect: impl AsyncFnOnce(&mut PgConnection) -> Result<T, StoreError>,
) -> Result<(Connected, T), StoreError> {
    let list = HostList::parse(url)?;
    let bound = Bound::within(options.write_timeout);
    let followed = (!list.is_plain()).then(|| {
        Hosts::new(
            list.clone(),
            options.acquire_timeout,
            bound.stalls().clone(),
        )
    });
    let first = &list.targets[0];
    let tls = TlsSettings::of(&first.url, &first.options);
    tls.check_root_cert()?;
    // One direct connection first: a pool would retry until its timeout and then report
    // only that it timed out, hiding why (refused, unknown host, bad password, a
    // certificate not trusted…).
    let (mut probe, tunnel) = match &followed {
        Some(hosts) => (hosts.choose().await?, None),
        None => tunnel::connect(&first.options, &tls, options.acquire_timeout).await?,
    };
    let inspected = inspect(&mut probe).await?;
    probe.close().await?;
    let connect = match (&followed, &tunnel) {
        (Some(hosts), _) => hosts.options(&[]),
        (None, Some(tunnel)) => tunnel.options(&first.options),
        (None, None) => first.options.clone(),
    };
    let pool = held::checked_after_idle(
        tcp::pool_options(),
        followed.as_ref().map(|hosts| hosts.switches()),
    )
    .max_connections(options.max_connections)
    .acquire_timeout(options.acquire_timeout)
    .connect_with(connect)
    .await?;
    let bound = match &followed {
        Some(hosts) => {
            hosts.follow(&pool, &[]);
            Hosts::watch(hosts);
            bound.following(hosts.moved())
        }
        None => bound,
    };
    let connected = Connected {
        pool,
        bound,
        hosts: followed,
        tunnel,
    };
    Ok((connected, inspected))
}

/// A small pool of its own for one hot path, with `pool`'s connection settings plus the
/// session `settings`, built from `base` (e.g. with an `after_connect` hook); its connections
/// open on first use. With `hosts`, it follows them as `pool` does (its `before_acquire` is
/// then the one that drops connections opened before a failover).
pub(super) fn side_pool(
    base: PgPoolOptions,
    pool: &PgPool,
    hosts: Option<&Arc<Hosts>>,
    connections: u32,
    settings: &[(&str, &str)],
) -> PgPool {
    let options = (*pool.connect_options())
        .clone()
        .options(settings.iter().copied());
    let base = match hosts {
        Some(hosts) => {
            let switches = hosts.switches();
            base.before_acquire(move |_, meta| {
                let current = !switches.outdated(meta.age);
                Box::pin(async move { Ok(current) })
            })
        }
        None => base,
    };
    let side = base
        .max_connections(connections)
        .acquire_timeout(pool.options().get_acquire_timeout())
        .connect_lazy_with(options);
    if let Some(hosts) = hosts {
        hosts.follow(&side, settings);
    }
    side
}

/// `host:port` of the server `pool` connects to now, for messages.
pub(super) fn label(pool: &PgPool) -> String {
    let options = pool.connect_options();
    format!("{}:{}", options.get_host(), options.get_port())
}
