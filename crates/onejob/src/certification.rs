//! Which providers are certified for which kinds, right now.
//!
//! A certificate is a passing `onejob verify` run; it is valid for failover and hedging
//! while its template and output-schema hashes equal the kind's current ones, so changing a
//! kind's template or schema invalidates every certificate it had (invariant 8).

use std::collections::HashSet;

use crate::{
    kind::{Kind, Kinds},
    store::{CertificateRecord, Store, StoreError},
};

/// The valid certificates at one moment.
#[derive(Debug, Clone, Default)]
pub struct Certified {
    pairs: HashSet<(String, String)>,
}

impl Certified {
    /// Computes validity from the stored runs against the current kinds.
    pub fn from_records(records: &[CertificateRecord], kinds: &Kinds) -> Self {
        let pairs = records
            .iter()
            .filter(|c| c.passed)
            .filter(|c| kinds.get(&c.kind).is_some_and(|kind| is_current(c, kind)))
            .map(|c| (c.provider.clone(), c.kind.clone()))
            .collect();
        Self { pairs }
    }

    /// Loads the stored runs and computes validity.
    pub async fn load(store: &dyn Store, kinds: &Kinds) -> Result<Self, StoreError> {
        Ok(Self::from_records(&store.certificates().await?, kinds))
    }

    /// Whether `provider` holds a valid certificate for `kind`.
    pub fn holds(&self, provider: &str, kind: &str) -> bool {
        self.pairs.contains(&(provider.to_owned(), kind.to_owned()))
    }
}

/// Whether a run was made against the kind's current template and output schema.
pub fn is_current(certificate: &CertificateRecord, kind: &Kind) -> bool {
    certificate.template_hash == kind.template_hash()
        && certificate.schema_hash == kind.schema_hash()
}
