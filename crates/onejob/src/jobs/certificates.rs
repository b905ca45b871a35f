//! The `onejob verify` runs: recorded as certificates ([`Jobs::verify`]), read by operators
//! newest first and paged, each with whether it certifies its provider now, and read whole
//! by failover and the reconciler ([`Certified::load`]).
//!
//! Validity is decided over every stored run ([`Certified::load`], as failover does), never
//! over the page alone, so a run's validity does not depend on which page shows it.
//! Certificates describe the deployment's providers, not a tenant's jobs: whether the
//! reader is an operator is the adapter's to check.

use uuid::Uuid;

use super::Jobs;
use crate::{
    certification::{Certified, ProviderHashes},
    kind::{Kind, Kinds},
    provider::Provider,
    store::{CertificateRecord, Store, StoreError},
    verify::{self, Limits, VerifyReport},
};

/// One verification run and whether it certifies its provider now.
#[derive(Debug, Clone)]
pub struct Certificate {
    /// The run.
    pub record: CertificateRecord,
    /// Whether it certifies the provider for the kind now: it passed, was made against the
    /// kind's current template and output schema, and no newer such run failed.
    pub valid: bool,
}

/// One page of verification runs, newest first.
#[derive(Debug, Clone)]
pub struct CertificatesPage {
    /// The runs.
    pub certificates: Vec<Certificate>,
    /// The `before` of the next page; `None` on the last.
    pub next_before: Option<Uuid>,
}

impl Certified {
    /// Loads the stored runs and computes validity (the rules: `certification.rs`).
    pub async fn load(
        store: &dyn Store,
        kinds: &Kinds,
        providers: &ProviderHashes,
    ) -> Result<Self, StoreError> {
        Ok(Self::from_records(
            &store.certificates().await?,
            kinds,
            providers,
        ))
    }
}

impl Jobs {
    /// Runs `kind`'s contract against `provider` (named `provider_name`, whose current
    /// settings hash the certificate is made against) within `limits`, and records the run
    /// as a certificate (`onejob verify`); returns the report and the stored record.
    pub async fn verify(
        &self,
        kind: &Kind,
        provider_name: &str,
        provider: &dyn Provider,
        limits: Limits,
    ) -> Result<(VerifyReport, CertificateRecord), StoreError> {
        let report = verify::run(kind, provider_name, provider, limits).await;
        let settings = self
            .providers
            .hashes()
            .get(provider_name)
            .unwrap_or_default();
        let record = verify::certificate(kind, provider_name, &report, settings);
        self.store.insert_certificate(&record).await?;
        Ok((report, record))
    }

    /// Up to `limit` runs older than `before` (from the newest when `None`), newest first.
    pub async fn certificates_page(
        &self,
        before: Option<Uuid>,
        limit: u32,
    ) -> Result<CertificatesPage, StoreError> {
        // One more than asked: whether it came tells whether there is a next page.
        let mut records = self.store.certificates_page(before, limit + 1).await?;
        let more = records.len() > limit as usize;
        records.truncate(limit as usize);
        let next_before = more.then(|| records.last().map(|c| c.id)).flatten();
        let certified = Certified::load(&*self.store, &self.kinds, self.providers.hashes()).await?;
        let certificates = records
            .into_iter()
            .map(|record| Certificate {
                valid: certified.is_valid(&record),
                record,
            })
            .collect();
        Ok(CertificatesPage {
            certificates,
            next_before,
        })
    }
}
