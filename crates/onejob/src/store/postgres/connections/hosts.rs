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
//! host before the watcher's next check does: each of them is bounded (`store/bound.rs`),
//! and one that runs out wakes the watcher at once, as a read-only refusal does. One that
//! meets a read-only server before the watcher sees it gets SQLSTATE 25006, which the store
//! answers as unavailable (HTTP 503 with `Retry-After`); the store whose call it was notes
//! it in its own stalls (`store/bound.rs`; never in anything of the process's, so another
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

use super::{
    tls::TlsSettings,
    tunnel::{self, Tunnel},
};
use crate::store::{StoreError, bound::Stalls};

/// How often the watcher checks the host the pools use.
pub(super) const WATCH_EVERY: Duration = Duration::from_millis(500);

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
    pub fn parse(url: &str) -> Result<Self, StoreError> {
        let invalid = |reason: String| StoreError::InvalidUrl {
            url: crate::store::redact(url),
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
    /// (`store/bound.rs`).
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
    /// store whose calls are noted in `stalls` (`store/bound.rs`: calls that ran out of time
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
    pub async fn choose(&self) -> Result<PgConnection, StoreError> {
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
            StoreError::NotWritable(
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
    async fn try_host(&self, index: usize) -> Result<PgConnection, StoreError> {
        let target = &self.list.targets[index];
        let tunnelled = self.tunnels.lock().expect("never poisoned")[index].is_some();
        let mut connection = if tunnelled {
            tokio::time::timeout(
                self.connect_timeout,
                PgConnection::connect_with(&self.target_options(index)),
            )
            .await
            .map_err(|_| StoreError::unavailable(sqlx::Error::PoolTimedOut))??
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
                Err(StoreError::NotWritable(format!(
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
    async fn refusal(&self, connection: &mut PgConnection) -> Result<Option<Refused>, StoreError> {
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
    async fn check(&self, connection: &mut PgConnection) -> Result<Option<String>, StoreError> {
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
    pub(crate) fn watch(hosts: &Arc<Self>) {
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
pub(in crate::store::postgres) async fn probe_write(
    connection: &mut PgConnection,
) -> Result<(), StoreError> {
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
mod tests {
    use super::*;
    use crate::store::bound::{Bound, Bounded};

    fn hosts(list: &HostList) -> Vec<(String, u16)> {
        list.targets
            .iter()
            .map(|t| (t.options.get_host().to_owned(), t.options.get_port()))
            .collect()
    }

    #[test]
    fn a_host_list_gives_one_target_per_host_in_order_with_default_ports() {
        let list = HostList::parse(
            "postgres://onejob:secret@db1:5433,db2,[::1]:6000/jobs?sslmode=disable&target_session_attrs=read-write",
        )
        .unwrap();
        assert_eq!(
            hosts(&list),
            [
                ("db1".to_owned(), 5433),
                ("db2".to_owned(), 5432),
                ("[::1]".to_owned(), 6000)
            ]
        );
        assert_eq!(list.attrs, SessionAttrs::ReadWrite);
        for target in &list.targets {
            assert_eq!(target.options.get_database(), Some("jobs"));
            assert_eq!(target.options.get_username(), "onejob");
            assert!(matches!(
                target.options.get_ssl_mode(),
                sqlx::postgres::PgSslMode::Disable
            ));
        }
        assert!(!list.is_plain());
    }

    #[test]
    fn target_session_attrs_takes_libpqs_values_for_writing() {
        let attrs = |q: &str| HostList::parse(&format!("postgres://u@h/db{q}")).map(|l| l.attrs);
        assert_eq!(attrs("").unwrap(), SessionAttrs::Any);
        assert_eq!(
            attrs("?target_session_attrs=any").unwrap(),
            SessionAttrs::Any
        );
        assert_eq!(
            attrs("?target_session_attrs=primary").unwrap(),
            SessionAttrs::Primary
        );
        assert!(HostList::parse("postgres://u@h/db").unwrap().is_plain());
        for bad in ["standby", "read-only", "writable"] {
            let error = attrs(&format!("?target_session_attrs={bad}")).unwrap_err();
            assert!(matches!(error, StoreError::InvalidUrl { .. }), "{bad}");
            assert!(error.to_string().contains(bad), "{error}");
        }
    }

    #[test]
    fn a_bad_host_list_is_a_clear_error_that_shows_no_password() {
        for (url, says) in [
            ("postgres://u:hunter2@h1:5432,h2:54x2/db", "\"54x2\""),
            ("postgres://u:hunter2@h1,,h2/db", "empty host"),
            ("postgres://u:hunter2@[::1:5432/db", "unclosed"),
            ("postgres://u:hunter2@h1/db?host=a,b", "authority"),
        ] {
            let error = HostList::parse(url).unwrap_err();
            let text = error.to_string();
            assert!(text.contains(says), "{url}: {text}");
            assert!(!text.contains("hunter2"), "{text}");
            assert!(!error.is_retryable());
        }
    }

    #[test]
    fn a_multi_host_url_is_redacted() {
        let redacted = crate::store::redact(
            "postgres://u:hunter2@h1:5432,h2:5433/db?target_session_attrs=primary",
        );
        assert!(!redacted.contains("hunter2"), "{redacted}");
        assert!(redacted.contains("h1:5432,h2:5433"), "{redacted}");
    }

    /// The test server's URL with `hosts` in place of its host (nothing is written).
    fn url_with(hosts: &str, query: &str) -> String {
        let url = std::env::var("ONEJOB_TEST_POSTGRES")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let (scheme, rest) = url.split_once("://").unwrap();
        let (user, rest) = rest.rsplit_once('@').unwrap();
        let path = &rest[rest.find('/').unwrap()..];
        format!("{scheme}://{user}@{hosts}{path}{query}")
    }

    /// The test server's `host:port`.
    fn server() -> String {
        let url = std::env::var("ONEJOB_TEST_POSTGRES")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        HostList::parse(&url).unwrap().targets[0].label.clone()
    }

    #[tokio::test]
    async fn a_host_that_refuses_connections_is_passed_over_for_the_next() {
        // Port 1 on loopback refuses at once: a primary that died.
        let list = HostList::parse(&url_with(
            &format!("127.0.0.1:1,{}", server()),
            "?target_session_attrs=read-write",
        ))
        .unwrap();
        let hosts = Hosts::new(list, Duration::from_secs(5), Arc::default());
        let connection = hosts
            .choose()
            .await
            .expect("the second host accepts writes");
        assert_eq!(hosts.current.load(Ordering::Acquire), 1);
        assert!(hosts.switches.outdated(Duration::from_secs(3600)));
        connection.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_read_only_session_is_refused_when_writes_are_asked_for() {
        let query = "?options=-c%20default_transaction_read_only%3Don";
        let read_write = HostList::parse(&url_with(
            &server(),
            &format!("{query}&target_session_attrs=read-write"),
        ))
        .unwrap();
        let error = Hosts::new(read_write, Duration::from_secs(5), Arc::default())
            .choose()
            .await
            .expect_err("a read-only session was kept");
        assert!(matches!(error, StoreError::NotWritable(_)), "{error}");
        assert!(error.is_retryable());
        // `primary` asks only that the server is not a standby, which this one is not.
        let primary = HostList::parse(&url_with(
            &server(),
            &format!("{query}&target_session_attrs=primary"),
        ))
        .unwrap();
        let mut connection = Hosts::new(primary, Duration::from_secs(5), Arc::default())
            .choose()
            .await
            .unwrap();
        // A write there is refused with 25006, which the store answers as unavailable (503).
        let write = sqlx::query("CREATE TABLE onejob_never_created (x int)")
            .execute(&mut connection)
            .await
            .unwrap_err();
        let error = StoreError::from(write);
        assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
        connection.close().await.unwrap();
    }

    /// What of a store's connections the read-only tests need: its hosts, its bound (whose
    /// stalls are the store's own) and its shared pool, as `connections::connect` makes them.
    struct Follower {
        _hosts: Arc<Hosts>,
        bound: Bound,
        pool: sqlx::PgPool,
    }

    /// A store's connections to the test server with the URL parameters `query`, its pool
    /// of one connection.
    async fn follower(query: &str) -> Follower {
        let bound = Bound::within(Duration::from_secs(30));
        let list = HostList::parse(&url_with(&server(), query)).unwrap();
        let hosts = Hosts::new(list, Duration::from_secs(5), bound.stalls().clone());
        let pool = super::super::held::checked_after_idle(
            sqlx::postgres::PgPoolOptions::new().max_connections(1),
            Some(hosts.switches()),
        )
        .connect_with(hosts.options(&[]))
        .await
        .unwrap();
        Follower {
            bound: bound.following(hosts.moved()),
            _hosts: hosts,
            pool,
        }
    }

    /// The backend pid of the connection `pool` hands out next (given back at once).
    async fn pid(pool: &sqlx::PgPool) -> i32 {
        let mut connection = pool.acquire().await.unwrap();
        sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut *connection)
            .await
            .unwrap()
    }

    /// A write through `store`'s bound, which its read-only session refuses with 25006.
    async fn refused_write(store: &Follower) {
        let error = Bounded::acquire(&store.pool, &store.bound)
            .await
            .unwrap()
            .run("a statement", async |connection| {
                sqlx::query("CREATE TABLE onejob_never_created (x int)")
                    .execute(connection)
                    .await?;
                Ok(())
            })
            .await
            .unwrap_err();
        assert!(error.met_read_only(), "{error:?}");
    }

    const READ_ONLY: &str =
        "?options=-c%20default_transaction_read_only%3Don&target_session_attrs=primary";

    #[tokio::test]
    async fn a_pooled_connection_that_met_a_read_only_server_is_not_reused() {
        let store = follower(READ_ONLY).await;
        // Without the note, this connection (idle for less than `IDLE_CHECK`, on a host the
        // pool has not moved from) would be handed out again unchecked.
        let first = pid(&store.pool).await;
        refused_write(&store).await;
        assert!(
            store
                .bound
                .stalls()
                .read_only_within(Duration::from_secs(3600))
        );
        assert_ne!(
            pid(&store.pool).await,
            first,
            "the connection that met a read-only server came back"
        );
    }

    /// Two stores in one process, one on a read-only session (a standby's, say) and one on
    /// a writable one: the first meeting a read-only server closes its own connections and
    /// wakes its own watcher, never the other's.
    #[tokio::test]
    async fn a_read_only_server_one_store_met_leaves_another_stores_connections_alone() {
        let standby = follower(READ_ONLY).await;
        let primary = follower("?target_session_attrs=primary").await;
        let kept = pid(&primary.pool).await;
        let watcher = primary.bound.stalls().clone();
        let woken = tokio::spawn(async move { watcher.noticed().await });
        tokio::task::yield_now().await;
        refused_write(&standby).await;
        assert!(
            standby
                .bound
                .stalls()
                .read_only_within(Duration::from_secs(3600))
        );
        assert!(
            !primary
                .bound
                .stalls()
                .read_only_within(Duration::from_secs(3600)),
            "the other store noted a read-only server it never met"
        );
        assert_eq!(
            pid(&primary.pool).await,
            kept,
            "the other store's connection was closed for a read-only server it never met"
        );
        assert!(!woken.is_finished(), "the other store's watcher was woken");
        woken.abort();
    }
}
