//! Which providers are certified for which kinds, right now.
//!
//! A certificate is a passing `onejob verify` run; it is valid for failover and hedging
//! while its template and output-schema hashes equal the kind's current ones and its
//! settings hash equals the provider's current one, so changing a kind's template or schema,
//! or what is sent to the provider, invalidates every certificate it had (invariant 8).
//! Among the runs made against the current template, schema and settings, the newest
//! decides: a failing re-verification revokes an earlier pass.
//!
//! A valid certificate may also prove that its provider deduplicates by idempotency key
//! (`onejob verify` sent one case twice under one key and got the same task or answer
//! back, under the header recorded in its report): the reconciler then may re-send an
//! unknown attempt under its same key, as long as the provider still forwards keys in that
//! header.
//!
//! Only the rules are here, over the runs given ([`Certified::from_records`]); reading the
//! stored runs is a use case (`jobs/certificates.rs`: [`Certified::load`]).

use std::collections::{HashMap, HashSet};

use uuid::Uuid;

use crate::{
    kind::{Kind, Kinds},
    store::CertificateRecord,
};

/// Each provider's current settings hash, by name (see
/// [`crate::config::ProviderConfig::settings_hash`]).
#[derive(Debug, Clone, Default)]
pub struct ProviderHashes(HashMap<String, String>);

impl ProviderHashes {
    /// Records `provider`'s settings hash.
    pub fn insert(&mut self, provider: &str, hash: String) {
        self.0.insert(provider.to_owned(), hash);
    }

    /// `provider`'s settings hash, if it is configured.
    pub fn get(&self, provider: &str) -> Option<&str> {
        self.0.get(provider).map(String::as_str)
    }
}

/// The valid certificates at one moment.
#[derive(Debug, Clone, Default)]
pub struct Certified {
    pairs: HashSet<(String, String)>,
    valid: HashSet<Uuid>,
    /// (provider, kind) → the idempotency header under which the valid certificate proved
    /// that the provider deduplicates.
    dedupe: HashMap<(String, String), String>,
}

impl Certified {
    /// Computes validity from the stored runs against the current kinds: per provider and
    /// kind, the newest run made against the kind's current template and schema and the
    /// provider's current settings decides.
    pub fn from_records(
        records: &[CertificateRecord],
        kinds: &Kinds,
        providers: &ProviderHashes,
    ) -> Self {
        let mut newest: HashMap<(&str, &str), &CertificateRecord> = HashMap::new();
        for record in records {
            let current = kinds
                .get(&record.kind)
                .is_some_and(|kind| is_current(record, kind, providers));
            if !current {
                continue;
            }
            let slot = newest
                .entry((&record.provider, &record.kind))
                .or_insert(record);
            if (record.created_at, record.id) > (slot.created_at, slot.id) {
                *slot = record;
            }
        }
        let decisive: Vec<&CertificateRecord> = newest
            .into_values()
            .filter(|record| record.passed)
            .collect();
        Self {
            pairs: decisive
                .iter()
                .map(|c| (c.provider.clone(), c.kind.clone()))
                .collect(),
            valid: decisive.iter().map(|c| c.id).collect(),
            dedupe: decisive
                .iter()
                .filter_map(|c| {
                    let header = proven_dedupe_header(&c.report)?;
                    Some(((c.provider.clone(), c.kind.clone()), header.to_owned()))
                })
                .collect(),
        }
    }

    /// Whether `provider`'s valid certificate for `kind` proves it deduplicates by key under
    /// `header` (the header the provider forwards keys in now).
    pub fn dedupes(&self, provider: &str, kind: &str, header: Option<&str>) -> bool {
        let Some(header) = header else {
            return false;
        };
        self.dedupe
            .get(&(provider.to_owned(), kind.to_owned()))
            .is_some_and(|proven| proven.eq_ignore_ascii_case(header))
    }

    /// Whether this run is the one certifying its provider for its kind now.
    pub fn is_valid(&self, record: &CertificateRecord) -> bool {
        self.valid.contains(&record.id)
    }

    /// Whether `provider` holds a valid certificate for `kind`.
    pub fn holds(&self, provider: &str, kind: &str) -> bool {
        self.pairs.contains(&(provider.to_owned(), kind.to_owned()))
    }
}

/// The header a verification report proved deduplication under, if it did.
fn proven_dedupe_header(report: &serde_json::Value) -> Option<&str> {
    let idempotency = report.get("idempotency")?;
    (idempotency.get("deduplicated")? == &serde_json::Value::Bool(true))
        .then(|| idempotency.get("header")?.as_str())
        .flatten()
}

/// Whether a run was made against the kind's current template and output schema and the
/// provider's current settings.
pub fn is_current(
    certificate: &CertificateRecord,
    kind: &Kind,
    providers: &ProviderHashes,
) -> bool {
    certificate.template_hash == kind.template_hash()
        && certificate.schema_hash == kind.schema_hash()
        && providers.get(&certificate.provider) == Some(certificate.settings_hash.as_str())
}
