//! The tenants of the jobs and attempts this process created or started lately, by id: on a
//! distributed database (Citus) every statement about one job must name its tenant to run on
//! one shard, and the calls that carry only an id (acknowledge, complete, fail an attempt;
//! start a job's attempt) would otherwise first look the tenant up on every shard. A miss
//! costs only that lookup: the tenant is never taken from here without the statement that
//! uses it also matching the id, so a wrong or stale entry finds no row (and a job's tenant
//! never changes).
//!
//! Bounded by two generations: once the current one holds [`CAPACITY`] ids it becomes the
//! previous one and the one before is dropped, so the ids of the last `CAPACITY` to
//! `2 × CAPACITY` starts are kept, at a few dozen bytes each.

use std::{collections::HashMap, sync::Mutex};

use uuid::Uuid;

/// Ids per generation.
const CAPACITY: usize = 65_536;

/// Tenants by job or attempt id (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct Tenants {
    generations: Mutex<Generations>,
}

#[derive(Debug, Default)]
struct Generations {
    current: HashMap<Uuid, String>,
    previous: HashMap<Uuid, String>,
}

impl Tenants {
    /// Keeps `id`'s tenant.
    pub(crate) fn note(&self, id: Uuid, tenant: &str) {
        let mut generations = self.generations.lock().expect("never poisoned");
        if generations.current.len() >= CAPACITY {
            generations.previous = std::mem::take(&mut generations.current);
        }
        generations.current.insert(id, tenant.to_owned());
    }

    /// `id`'s tenant, if kept.
    pub(crate) fn get(&self, id: Uuid) -> Option<String> {
        let generations = self.generations.lock().expect("never poisoned");
        generations
            .current
            .get(&id)
            .or_else(|| generations.previous.get(&id))
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::{CAPACITY, Tenants};

    /// An id is found until two generations of others came after it.
    #[test]
    fn an_id_is_kept_for_at_least_one_generation() {
        let tenants = Tenants::default();
        let first = Uuid::now_v7();
        tenants.note(first, "acme");
        assert_eq!(tenants.get(first).as_deref(), Some("acme"));
        for _ in 0..CAPACITY {
            tenants.note(Uuid::now_v7(), "other");
        }
        assert_eq!(tenants.get(first).as_deref(), Some("acme"));
        for _ in 0..CAPACITY {
            tenants.note(Uuid::now_v7(), "other");
        }
        assert_eq!(tenants.get(first), None);
    }
}
