//! Database URLs naming several PostgreSQL hosts, and following the one that accepts writes
//! through a failover.
//!
//! sqlx takes one host per URL. libpq's spelling lists several,
//! `postgres://u@h1:5432,h2:5433/db?target_session_attrs=read-write`, and a connection tries
//! them in order and keeps the first whose session matches `target_session_attrs`
//! (`any`, the default; `read-write`; `primary`). [`HostList::parse`] splits such a URL into
//! one [`PgConnectOptions`] per host, each parsed by sqlx from the same URL with only the
//! host changed, so every other parameter (`sslmode`, `sslrootcert`, `options`…) means what
//! it means for one host.
//!
//! A pool opens connections with one set of options. [`Hosts`] chooses the host for every
//! pool of one store: at start the first host that matches ([`Hosts::choose`]), and then a
//! watcher task ([`Hosts::watch`]) holds one connection of its own to that host and checks it
//! every [`WATCH_EVERY`] (two round trips on its own connection, nothing on the statements'
//! path: the session's state, and the commit of an empty write). When that connection
//! breaks, or its server no longer accepts writes (a standby promoted elsewhere, the old
//! primary back as a standby) or no longer commits them (an old primary left running while
//! its synchronous standby was promoted: every commit waits for ever), the watcher tries
//! the hosts in order again, points every pool at the first that matches (`Pool::set_connect_options`:
//! connections opened from then on, including those a waiting acquire is retrying, go
//! there) and records the switch ([`Switches`]). A pooled connection opened before the last
//! switch is closed instead of handed out (the pools' `before_acquire`), so no connection to
//! the old server is reused.
//!
//! A host whose commits did not complete in time is *wedged*: it still says it accepts
//! writes, so by `target_session_attrs` alone it would be chosen again and again. Choosing
//! tries the other hosts first, and tries a wedged host again only [`RECHECK_WEDGED`] after
//! it was found so (each try of it costs [`COMMIT_WITHIN`]), so that a standby promoted
//! meanwhile is found within about [`RETRY_EVERY`]. The store's statements notice a wedged
//! host before the watcher's next check does: each of them is bounded (onejob's `store/bound.rs`),
//! and one that runs out wakes the watcher at once, as a read-only refusal does. One that
//! meets a read-only server before the watcher sees it gets SQLSTATE 25006, which the store
//! answers as unavailable (HTTP 503 with `Retry-After`); the store whose call it was notes
//! it in its own [`Stalls`] (never in anything of the process's, so another
//! store in the same process is not touched), so its connection and every one of that
//! store's connections opened before it are closed instead of handed out again, and its
//! watcher checks its host at once.
//!
//! A URL with one host and `target_session_attrs=any` (the default) gets none of this: the
//! pool connects as before.

use std::{
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use sqlx::{Connection, PgConnection, PgPool, postgres::PgConnectOptions};

use crate::{ConnectError, Stalls};
use crate::{
    tls::TlsSettings,
    tunnel::{self, Tunnel},
};

/// How often the watcher checks the host the pools use.
pub const WATCH_EVERY: Duration = Duration::from_millis(500);

/// How long the watcher waits before trying the hosts again when none matched.
const RETRY_EVERY: Duration = Duration::from_millis(250);

/// How long a host's check (its session's state, and an empty write's commit) may take
/// before the host counts as one that does not commit, wedged (see [`Hosts::choose`]).
const COMMIT_WITHIN: Duration = Duration::from_secs(5);

/// How long a wedged host is passed over before it is checked again.
const RECHECK_WEDGED: Duration = Duration::from_secs(10);

/// The default PostgreSQL port, for a host listed without one.
const DEFAULT_PORT: u16 = 5432;

/// What a session must be to be kept: libpq's `target_session_attrs`, the values that make
/// sense for a service that writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionAttrs {
    /// Any server that accepts the connection (libpq's default).
    Any,
    /// A session that accepts writes (`SHOW transaction_read_only` is `off`).
    ReadWrite,
    /// A server not in recovery (`pg_is_in_recovery()` is false).
    Primary,
}

impl SessionAttrs {
    fn parse(value: &str) -> Result<Self, String> {
        match value {
            "any" => Ok(Self::Any),
            "read-write" => Ok(Self::ReadWrite),
            "primary" => Ok(Self::Primary),
            "read-only" | "standby" | "prefer-standby" => Err(format!(
                "target_session_attrs={value} asks for a server that does not accept writes, \
                 and onejob writes: use read-write, primary or any"
            )),
            other => Err(format!(
                "target_session_attrs={other:?} is not one of any, read-write, primary"
            )),
        }
    }
}

/// One host of a [`HostList`].
#[derive(Debug, Clone)]
pub struct Target {
    /// `host:port`, for logs.
    pub label: String,
    /// The URL with only this host (password included: not for logs).
    pub url: String,
    /// The URL's options with this host.
    pub options: PgConnectOptions,
}

/// The hosts a database URL names, in order, and what their session must be.
#[derive(Debug, Clone)]
pub struct HostList {
    /// One entry per host, in the URL's order.
    pub targets: Vec<Target>,
    /// The URL's `target_session_attrs`.
    pub attrs: SessionAttrs,
}

impl HostList {
    /// Parses a `postgres://` URL with one host or several (`h1:5432,h2,[::1]:5433`), and the
    /// `target_session_attrs` parameter; the other parameters are sqlx's.
    pub fn parse(url: &str) -> Result<Self, ConnectError> {
        let invalid = |reason: String| ConnectError::InvalidUrl {
            url: crate::redact(url),
            reason,
        };
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| invalid("no scheme".into()))?;
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let (userinfo, hostlist) = match authority.rfind('@') {
            Some(at) => (&authority[..=at], &authority[at + 1..]),
            None => ("", authority),
        };
        let (path, query) = match tail.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (tail, None),
        };
        let mut attrs = SessionAttrs::Any;
        let mut kept = Vec::new();
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "target_session_attrs" => attrs = SessionAttrs::parse(value).map_err(invalid)?,
                "host" | "port" if value.contains(',') || value.contains("%2C") => {
                    return Err(invalid(format!(
                        "list the hosts in the URL's authority (postgres://u@h1:5432,h2:5432/db), \
                         not in {key}="
                    )));
                }
                _ => kept.push(pair),
            }
        }
        let query = if kept.is_empty() {
            String::new()
        } else {
            format!("?{}", kept.join("&"))
        };
        let mut targets = Vec::new();
        for host in hostlist.split(',') {
            let (name, port) = split_port(host).map_err(invalid)?;
            if name.is_empty() && hostlist.contains(',') {
                return Err(invalid(format!("an empty host in the list {:?}", hostlist)));
            }
            let single = match port {
                Some(port) => format!("{scheme}://{userinfo}{name}:{port}{path}{query}"),
                None if name.is_empty() => format!("{scheme}://{userinfo}{path}{query}"),
                None => format!("{scheme}://{userinfo}{name}:{DEFAULT_PORT}{path}{query}"),
            };
            let options: PgConnectOptions = single
                .parse()
                .map_err(|e: sqlx::Error| invalid(e.to_string()))?;
            targets.push(Target {
                label: format!("{name}:{}", port.unwrap_or(DEFAULT_PORT)),
                url: single,
                options,
            });
        }
        Ok(Self { targets, attrs })
    }

    /// True when a plain pool on the one host does what the URL asks.
    pub fn is_plain(&self) -> bool {
        self.targets.len() == 1 && self.attrs == SessionAttrs::Any
    }
}

/// Splits `host[:port]` (`[v6]:port` too) into the host and its port, if given.
fn split_port(host: &str) -> Result<(&str, Option<u16>), String> {
    let (name, port) = if let Some(v6) = host.strip_prefix('[') {
        let close = v6
            .find(']')
            .ok_or_else(|| format!("an unclosed [ in host {host:?}"))?;
        let after = &v6[close + 1..];
        let port = match after.strip_prefix(':') {
            Some(port) => Some(port),
            None if after.is_empty() => None,
            None => return Err(format!("unexpected {after:?} after host {host:?}")),
        };
        (&host[..close + 2], port)
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    let port = match port {
        Some("") | None => None,
        Some(port) => Some(
            port.parse::<u16>()
                .map_err(|_| format!("port {port:?} of host {name:?} is not a port number"))?,
        ),
    };
    Ok((name, port))
}

/// When the pools of one store last moved to another host, or one of its calls last met a
/// read-only server: connections opened before are not reused.
#[derive(Debug)]
pub struct Switches {
    last: Mutex<Option<Instant>>,
    /// The store's stalls, where its calls that met a read-only server are noted
    /// ([`Stalls`]).
    stalls: Arc<Stalls>,
}

impl Switches {
    /// True when a connection `age` old was opened before the last switch, or before a
    /// statement last met a read-only server.
    pub fn outdated(&self, age: Duration) -> bool {
        let before = |at: &Mutex<Option<Instant>>| {
            at.lock()
                .expect("never poisoned")
                .is_some_and(|at| at.elapsed() < age)
        };
        before(&self.last) || self.stalls.read_only_within(age)
    }

    fn record(&self) {
        *self.last.lock().expect("never poisoned") = Some(Instant::now());
    }
}

/// A pool kept on the chosen host, and the session settings it adds to the host's options.
type Follower = (PgPool, Vec<(String, String)>);

/// The hosts of one store, the one its pools use, and those pools.
#[derive(Debug)]
pub struct Hosts {
    list: HostList,
    current: AtomicUsize,
    switches: Arc<Switches>,
    /// Every pool of the store, with the session settings it adds to the host's options.
    pools: Mutex<Vec<Follower>>,
    /// How long one connection attempt to one host may take.
    connect_timeout: Duration,
    /// Told on every switch (the LISTEN connection reconnects).
    moved: tokio::sync::watch::Sender<usize>,
    /// Per host, when a check last found it wedged (not committing in time), until a check
    /// finds it committing again.
    wedged: Mutex<Vec<Option<Instant>>>,
    /// Per host, the last reason it was not used that was logged.
    noted: Mutex<Vec<Option<String>>>,
    /// Per host, the TLS tunnel it is reached through, once its certificate turned out to
    /// be one rustls cannot read (`tunnel.rs`).
    tunnels: Mutex<Vec<Option<Arc<Tunnel>>>>,
}

/// Why a host's session does not match.
#[derive(Debug)]
struct Refused {
    why: String,
    /// Its check did not complete in time: the host is wedged.
    wedged: bool,
}

impl Hosts {
    /// The hosts of `list`, none chosen yet (the first until [`Hosts::choose`]), for the
    /// store whose calls are noted in `stalls` ([`Stalls`]: calls that ran out of time
    /// or met a read-only server).
    pub fn new(list: HostList, connect_timeout: Duration, stalls: Arc<Stalls>) -> Arc<Self> {
        Arc::new(Self {
            wedged: Mutex::new(vec![None; list.targets.len()]),
            noted: Mutex::new(vec![None; list.targets.len()]),
            tunnels: Mutex::new(vec![None; list.targets.len()]),
            list,
            current: AtomicUsize::new(0),
            switches: Arc::new(Switches {
                last: Mutex::default(),
                stalls,
            }),
            pools: Mutex::default(),
            connect_timeout,
            moved: tokio::sync::watch::channel(0).0,
        })
    }

    /// The switches, for the pools' `before_acquire`.
    pub fn switches(&self) -> Arc<Switches> {
        self.switches.clone()
    }

    /// The options of the host in use, plus session `settings`.
    pub fn options(&self, settings: &[(&str, &str)]) -> PgConnectOptions {
        let current = self.current.load(Ordering::Acquire);
        self.target_options(current)
            .options(settings.iter().copied())
    }

    /// How to connect to host `index`: its options, or its tunnel's if it has one.
    fn target_options(&self, index: usize) -> PgConnectOptions {
        let options = &self.list.targets[index].options;
        match &self.tunnels.lock().expect("never poisoned")[index] {
            Some(tunnel) => tunnel.options(options),
            None => options.clone(),
        }
    }

    /// Keeps `pool`, whose sessions add `settings` to the host's options, on the chosen
    /// host from now on (pointing it there first, in case the host moved since the pool was
    /// made).
    pub fn follow(&self, pool: &PgPool, settings: &[(&str, &str)]) {
        let mut pools = self.pools.lock().expect("never poisoned");
        pool.set_connect_options(self.options(settings));
        let settings = settings
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        pools.push((pool.clone(), settings));
    }

    /// A receiver told each time the pools moved to another host.
    pub fn moved(&self) -> tokio::sync::watch::Receiver<usize> {
        self.moved.subscribe()
    }

    /// Tries the hosts in order, those found wedged last (and those found so within
    /// [`RECHECK_WEDGED`] not at all), and makes the first that matches the one in use;
    /// returns a connection to it, or the last host's error when none matched.
    pub async fn choose(&self) -> Result<PgConnection, ConnectError> {
        let mut last = None;
        for index in self.order() {
            let target = &self.list.targets[index];
            match self.try_host(index).await {
                Ok(connection) => {
                    self.use_host(index);
                    return Ok(connection);
                }
                Err(error) => {
                    // Once per change: the watcher tries again every few hundred ms.
                    let said = error.to_string();
                    let mut noted = self.noted.lock().expect("never poisoned");
                    if noted[index].as_ref() != Some(&said) {
                        tracing::info!(host = %target.label, %error, "database host not used");
                        noted[index] = Some(said);
                    }
                    last = Some(error);
                }
            }
        }
        Err(last.unwrap_or_else(|| {
            ConnectError::NotWritable(
                "every host was found not committing a moment ago; checking again soon".into(),
            )
        }))
    }

    /// The hosts to try, in order: those not wedged in the URL's order, then the wedged ones
    /// last found so at least [`RECHECK_WEDGED`] ago.
    fn order(&self) -> Vec<usize> {
        let wedged = self.wedged.lock().expect("never poisoned");
        let healthy = (0..wedged.len()).filter(|&at| wedged[at].is_none());
        let due = (0..wedged.len())
            .filter(|&at| wedged[at].is_some_and(|since| since.elapsed() >= RECHECK_WEDGED));
        healthy.chain(due).collect()
    }

    /// Notes whether host `index`'s check found it wedged.
    fn mark(&self, index: usize, wedged: bool) {
        self.wedged.lock().expect("never poisoned")[index] = wedged.then(Instant::now);
    }

    /// Opens a connection to host `index` and keeps it if its session matches.
    async fn try_host(&self, index: usize) -> Result<PgConnection, ConnectError> {
        let target = &self.list.targets[index];
        let tunnelled = self.tunnels.lock().expect("never poisoned")[index].is_some();
        let mut connection = if tunnelled {
            tokio::time::timeout(
                self.connect_timeout,
                PgConnection::connect_with(&self.target_options(index)),
            )
            .await
            .map_err(|_| ConnectError::TimedOut)??
        } else {
            let tls = TlsSettings::of(&target.url, &target.options);
            let (connection, tunnel) =
                tunnel::connect(&target.options, &tls, self.connect_timeout).await?;
            if tunnel.is_some() {
                self.tunnels.lock().expect("never poisoned")[index] = tunnel;
            }
            connection
        };
        match self.refusal(&mut connection).await {
            Ok(None) => {
                self.mark(index, false);
                self.noted.lock().expect("never poisoned")[index] = None;
                Ok(connection)
            }
            Ok(Some(refused)) => {
                self.mark(index, refused.wedged);
                // Dropped, not closed: a connection whose commit hangs would hang its close.
                drop(connection);
                Err(ConnectError::NotWritable(format!(
                    "{}: {}",
                    target.label, refused.why
                )))
            }
            Err(error) => Err(error),
        }
    }

    /// Why the session on `connection` does not match, if it does not: a standby, a
    /// read-only session, or a server whose commits do not complete (two round trips, none
    /// for `any`), the whole check within [`COMMIT_WITHIN`].
    async fn refusal(
        &self,
        connection: &mut PgConnection,
    ) -> Result<Option<Refused>, ConnectError> {
        match tokio::time::timeout(COMMIT_WITHIN, self.check(connection)).await {
            Ok(Ok(None)) => Ok(None),
            Ok(Ok(Some(why))) => Ok(Some(Refused { why, wedged: false })),
            Ok(Err(error)) => Err(error),
            Err(_) => Ok(Some(Refused {
                why: format!(
                    "its check did not complete within {COMMIT_WITHIN:?} (a write did not \
                     commit: a synchronous standby it waits for is gone; or the host stopped \
                     answering)"
                ),
                wedged: true,
            })),
        }
    }

    /// [`Hosts::refusal`], unbounded: why the session does not match, if it does not.
    async fn check(&self, connection: &mut PgConnection) -> Result<Option<String>, ConnectError> {
        let (recovery, read_only): (bool, bool) =
            match self.list.attrs {
                SessionAttrs::Any => return Ok(None),
                _ => sqlx::query_as(
                    "SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'",
                )
                .fetch_one(&mut *connection)
                .await?,
            };
        let refused = match self.list.attrs {
            SessionAttrs::Primary if recovery => Some("the server is a standby".into()),
            SessionAttrs::ReadWrite if read_only || recovery => {
                Some("the session is read-only".into())
            }
            _ => None,
        };
        if refused.is_some() {
            return Ok(refused);
        }
        probe_write(connection).await?;
        Ok(None)
    }

    /// Points every pool at host `index` (if it is not already the one in use).
    fn use_host(&self, index: usize) {
        let before = self.current.swap(index, Ordering::AcqRel);
        if before == index {
            return;
        }
        let target = &self.list.targets[index];
        tracing::warn!(
            from = %self.list.targets[before].label,
            to = %target.label,
            "the database moved: new connections go to another host"
        );
        self.switches.record();
        let options = self.target_options(index);
        for (pool, settings) in self.pools.lock().expect("never poisoned").iter() {
            pool.set_connect_options(
                options
                    .clone()
                    .options(settings.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
            );
        }
        self.moved.send_replace(index);
    }

    /// Starts the watcher (ends when the store's last handle on `hosts` is dropped); a call
    /// of the store that runs out of time or meets a read-only server (its stalls, given to
    /// [`Hosts::new`]) has it check its host at once.
    pub fn watch(hosts: &Arc<Self>) {
        let stalls = hosts.switches.stalls.clone();
        tokio::spawn(watch(Arc::downgrade(hosts), stalls));
    }
}

/// A write on `connection` that must commit (unbounded: the caller bounds it). An old
/// primary that was not stopped keeps accepting sessions and writes, but with its
/// synchronous standby promoted away, every commit waits for it for ever.
///
/// The write is a transactional logical message (`pg_logical_emit_message`, prefix
/// `onejob.host-check`, empty): it needs no table and writes WAL, so its commit waits for the
/// synchronous standby like any other (a transaction that only took an id writes none and
/// would not wait); any role may emit one by default. Where the function is missing or not
/// granted (SQLSTATE 42883, 42501), the check is skipped rather than the host refused; any
/// other refusal (a read-only server's 25006) is the answer.
pub async fn probe_write(connection: &mut PgConnection) -> Result<(), ConnectError> {
    let mut transaction = connection.begin().await?;
    let message = sqlx::query("SELECT pg_logical_emit_message(true, 'onejob.host-check', '')")
        .execute(&mut *transaction)
        .await;
    match message {
        Ok(_) => transaction.commit().await?,
        Err(sqlx::Error::Database(refused))
            if matches!(refused.code().as_deref(), Some("42883" | "42501")) =>
        {
            tracing::debug!(error = %refused, "cannot check that commits complete here");
            transaction.rollback().await?;
        }
        Err(error) => return Err(error.into()),
    }
    Ok(())
}

/// The watcher: checks the host in use every [`WATCH_EVERY`] on a connection of its own,
/// and when that fails or no longer matches, chooses again.
async fn watch(hosts: Weak<Hosts>, stalls: Arc<Stalls>) {
    let mut sentinel: Option<PgConnection> = None;
    loop {
        let Some(strong) = hosts.upgrade() else {
            if let Some(connection) = sentinel {
                let _ = connection.close().await;
            }
            return;
        };
        let pause = match sentinel.as_mut() {
            Some(connection) => match strong.refusal(connection).await {
                Ok(None) => WATCH_EVERY,
                Ok(Some(refused)) => {
                    let why = refused.why;
                    tracing::warn!(%why, "the database host in use no longer accepts writes");
                    let current = strong.current.load(Ordering::Acquire);
                    strong.mark(current, refused.wedged);
                    sentinel = None;
                    Duration::ZERO
                }
                Err(error) => {
                    tracing::warn!(%error, "lost the database host in use; choosing again");
                    sentinel = None;
                    Duration::ZERO
                }
            },
            None => match strong.choose().await {
                Ok(connection) => {
                    sentinel = Some(connection);
                    WATCH_EVERY
                }
                Err(_) => RETRY_EVERY,
            },
        };
        drop(strong);
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = stalls.noticed() => {}
        }
    }
}

#[cfg(test)]
mod tests;
