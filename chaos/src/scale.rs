//! How big a fault run is: `ONEJOB_CHAOS_SCALE=full` for the figures in `RELIABILITY.md`,
//! `quick` (the default) for CI.

/// The size of each scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale {
    /// `"quick"` or `"full"`.
    pub name: &'static str,
    /// Storm: distinct idempotency keys.
    pub storm_keys: usize,
    /// Storm: concurrent submissions of each key.
    pub storm_copies: usize,
    /// Crash: jobs running while workers are killed at random.
    pub crash_jobs: usize,
    /// Crash: random SIGKILLs of the worker.
    pub crash_kills: usize,
    /// Restart: keys the clients submit while PostgreSQL restarts.
    pub restart_keys: usize,
    /// Restart: PostgreSQL restarts.
    pub restarts: usize,
    /// Kill storm: distinct idempotency keys (per adapter run).
    pub killstorm_keys: usize,
    /// Kill storm: concurrent submissions of each key.
    pub killstorm_copies: usize,
    /// Wedged failover: keys the clients submit while the primary stops committing and the
    /// standby is promoted.
    pub wedge_keys: usize,
    /// Vanishing callers: keys whose first call's client goes away mid-call (per store and
    /// process layout).
    pub vanish_keys: usize,
}

impl Scale {
    /// The quick scale (CI).
    pub const QUICK: Scale = Scale {
        name: "quick",
        storm_keys: 200,
        storm_copies: 10,
        crash_jobs: 30,
        crash_kills: 3,
        restart_keys: 300,
        restarts: 1,
        killstorm_keys: 120,
        killstorm_copies: 6,
        wedge_keys: 300,
        vanish_keys: 48,
    };

    /// The full scale (`RELIABILITY.md`).
    pub const FULL: Scale = Scale {
        name: "full",
        storm_keys: 1000,
        storm_copies: 10,
        crash_jobs: 200,
        crash_kills: 8,
        restart_keys: 2000,
        restarts: 3,
        killstorm_keys: 300,
        killstorm_copies: 6,
        wedge_keys: 3000,
        vanish_keys: 400,
    };

    /// From `ONEJOB_CHAOS_SCALE` (`quick` when unset).
    pub fn from_env() -> Scale {
        match std::env::var("ONEJOB_CHAOS_SCALE").as_deref() {
            Ok("full") => Scale::FULL,
            Ok("quick") | Err(_) => Scale::QUICK,
            Ok(other) => panic!("ONEJOB_CHAOS_SCALE={other:?}: use quick or full"),
        }
    }
}
