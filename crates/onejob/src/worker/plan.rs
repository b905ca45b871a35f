//! Which attempt a job needs next, decided from its kind, its attempts so far and the valid
//! certificates. Pure: the store's attempt guard has the last word on whether it may start.
//!
//! Failover and hedging go only to providers holding a valid certificate for the kind
//! (invariant 8); the primary (the kind's first provider) needs none. Every provider passed
//! over for want of one is reported, so the worker can log `failover_refused`.

use onejob_domain::AttemptState;

use crate::{certification::Certified, kind::Kind, store::AttemptRecord};

/// The next attempt to start for a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The provider to send it to.
    pub provider: String,
    /// Whether it is a hedge beside a running attempt.
    pub hedge: bool,
}

/// The idempotency key an attempt on `provider` forwards upstream: stable for the job on
/// each provider (`onejob:<job id>`), so an accidental second send of the same intent is
/// deduplicated upstream, and renewed (`onejob:<job id>:<n>`) only after the provider itself
/// answered a definite failure under each of the n-1 keys before (`key_spent`), because an
/// upstream that caches answers by key would otherwise replay that failure to a deliberate
/// retry. An attempt that failed without such an answer (never received, not reached,
/// settled, or decided by an operator) leaves its key in force: a late copy of it and the
/// next attempt then deduplicate upstream instead of both running.
pub fn upstream_key(job_id: uuid::Uuid, attempts: &[AttemptRecord], provider: &str) -> String {
    let ended = attempts
        .iter()
        .filter(|a| a.provider == provider && a.key_spent)
        .count();
    if ended == 0 {
        format!("onejob:{job_id}")
    } else {
        format!("onejob:{job_id}:{}", ended + 1)
    }
}

/// A provider passed over, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The provider that would have been next.
    pub provider: String,
    /// Why it was not.
    pub reason: String,
}

/// The decision for a job: what to start (if anything) and whom it passed over.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decision {
    /// The attempt to start.
    pub plan: Option<Plan>,
    /// Providers passed over for want of a valid certificate.
    pub refused: Vec<Refusal>,
}

/// Decides the next attempt for a job with these attempts.
///
/// * No attempt open: the primary for a new job; else the next provider after the last
///   attempt's (failover after a definite failure), wrapping around, skipping uncertified
///   ones, so it falls back to the primary.
/// * One attempt running and none starting or unknown: a hedge on the next certified
///   provider other than the running one, if the kind hedges. One hedge per job.
/// * Anything `starting` or `unknown`: nothing.
pub fn next_attempt(kind: &Kind, attempts: &[AttemptRecord], certified: &Certified) -> Decision {
    if kind.providers.is_empty() || attempts.iter().any(|a| a.state.blocks_new_attempts()) {
        return Decision::default();
    }
    let running: Vec<&AttemptRecord> = attempts
        .iter()
        .filter(|a| a.state == AttemptState::Running)
        .collect();
    match running.as_slice() {
        [] => match attempts.last() {
            None => Decision {
                plan: Some(Plan {
                    provider: kind.providers[0].clone(),
                    hedge: false,
                }),
                refused: Vec::new(),
            },
            Some(last) => {
                let (provider, refused) = choose_after(kind, &last.provider, certified, false);
                Decision {
                    plan: provider.map(|provider| Plan {
                        provider,
                        hedge: false,
                    }),
                    refused,
                }
            }
        },
        [only] => hedge(kind, &only.provider, attempts, certified),
        _ => Decision::default(),
    }
}

/// The hedge beside an attempt running on `running_on`, if the kind hedges, no hedge was
/// started yet, the attempt budget allows one, and a certified provider other than
/// `running_on` exists.
pub fn hedge(
    kind: &Kind,
    running_on: &str,
    attempts: &[AttemptRecord],
    certified: &Certified,
) -> Decision {
    if kind.hedge_after.is_none()
        || attempts.iter().any(|a| a.hedge)
        || attempts.len() as u32 >= kind.max_attempts
    {
        return Decision::default();
    }
    let (provider, refused) = choose_after(kind, running_on, certified, true);
    Decision {
        plan: provider.map(|provider| Plan {
            provider,
            hedge: true,
        }),
        refused,
    }
}

/// Walks the providers after `from` (wrapping) and takes the first the job may go to: the
/// primary, or a certified one. With `other_than_from`, `from` itself is never taken.
fn choose_after(
    kind: &Kind,
    from: &str,
    certified: &Certified,
    other_than_from: bool,
) -> (Option<String>, Vec<Refusal>) {
    let n = kind.providers.len();
    let start = kind
        .providers
        .iter()
        .position(|p| p == from)
        .map_or(0, |i| i + 1);
    let mut refused = Vec::new();
    for step in 0..n {
        let candidate = &kind.providers[(start + step) % n];
        if other_than_from && candidate == from {
            continue;
        }
        let primary = *candidate == kind.providers[0];
        if primary || certified.holds(candidate, &kind.name) {
            return (Some(candidate.clone()), refused);
        }
        refused.push(Refusal {
            provider: candidate.clone(),
            reason: format!(
                "{candidate} holds no valid certificate for kind {} (run `onejob verify \
                 --provider {candidate} --kind {}`; a changed template or output schema voids \
                 earlier ones)",
                kind.name, kind.name
            ),
        });
    }
    (None, refused)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use time::OffsetDateTime;
    use uuid::Uuid;

    use super::*;
    use crate::store::CertificateRecord;

    fn kind(providers: &[&str], hedge: bool) -> Kind {
        Kind {
            name: "k".into(),
            params_schema: None,
            output_schema: None,
            template: None,
            intent_fields: None,
            temperature: None,
            providers: providers.iter().map(|p| (*p).to_owned()).collect(),
            openai_models: Vec::new(),
            endpoint: crate::gateway::Endpoint::Chat,
            attempt_timeout: Duration::from_secs(1),
            stream_idle_timeout: Duration::from_secs(1),
            stream_max: Duration::from_secs(1),
            max_attempts: 3,
            retry_backoff: Duration::from_millis(10),
            hedge_after: hedge.then(|| Duration::from_millis(10)),
            settle_unknown_after: None,
            contract: vec![],
        }
    }

    /// Every test provider's settings hash is "h".
    fn hashes() -> crate::certification::ProviderHashes {
        let mut hashes = crate::certification::ProviderHashes::default();
        for p in ["a", "b", "c"] {
            hashes.insert(p, "h".into());
        }
        hashes
    }

    #[test]
    fn changed_provider_settings_void_the_certificate() {
        let k = kind(&["a", "b"], false);
        let cert = certified(&k, &["b"]);
        assert!(cert.holds("b", "k"));
        let mut kinds = crate::kind::Kinds::default();
        kinds.insert(k.clone());
        let mut changed = hashes();
        changed.insert("b", "other settings".into());
        let records = vec![CertificateRecord {
            id: Uuid::now_v7(),
            provider: "b".into(),
            kind: "k".into(),
            template_hash: k.template_hash(),
            schema_hash: k.schema_hash(),
            settings_hash: "h".into(),
            passed: true,
            report: serde_json::Value::Null,
            created_at: OffsetDateTime::UNIX_EPOCH,
        }];
        assert!(!Certified::from_records(&records, &kinds, &changed).holds("b", "k"));
    }

    fn certified(k: &Kind, providers: &[&str]) -> Certified {
        let records: Vec<CertificateRecord> = providers
            .iter()
            .map(|p| CertificateRecord {
                id: Uuid::now_v7(),
                provider: (*p).into(),
                kind: k.name.clone(),
                template_hash: k.template_hash(),
                schema_hash: k.schema_hash(),
                settings_hash: "h".into(),
                passed: true,
                report: serde_json::Value::Null,
                created_at: OffsetDateTime::UNIX_EPOCH,
            })
            .collect();
        let mut kinds = crate::kind::Kinds::default();
        kinds.insert(k.clone());
        Certified::from_records(&records, &kinds, &hashes())
    }

    fn attempt(provider: &str, state: AttemptState, hedge: bool) -> AttemptRecord {
        AttemptRecord {
            id: Uuid::now_v7(),
            job_id: Uuid::nil(),
            number: 1,
            provider: provider.into(),
            state,
            hedge,
            task_id: None,
            worker: None,
            lease_expires_at: None,
            deadline_at: None,
            started_at: OffsetDateTime::UNIX_EPOCH,
            acknowledged_at: None,
            finished_at: None,
            unknown_since: None,
            upstream_key: None,
            key_spent: matches!(state, AttemptState::Failed | AttemptState::Cancelled),
            error: None,
            reconcile_checks: 0,
        }
    }

    fn provider_of(d: &Decision) -> Option<&str> {
        d.plan.as_ref().map(|p| p.provider.as_str())
    }

    #[test]
    fn the_upstream_key_is_stable_per_job_and_provider_until_a_definite_failure() {
        let job = Uuid::nil();
        assert_eq!(upstream_key(job, &[], "a"), format!("onejob:{job}"));
        let unknown = [attempt("a", AttemptState::Unknown, false)];
        assert_eq!(upstream_key(job, &unknown, "a"), format!("onejob:{job}"));
        let failed_a = [attempt("a", AttemptState::Failed, false)];
        assert_eq!(upstream_key(job, &failed_a, "b"), format!("onejob:{job}"));
        assert_eq!(upstream_key(job, &failed_a, "a"), format!("onejob:{job}:2"));
        // Failed without the provider answering under the key (never received, settled):
        // the next attempt there sends the same key again.
        let mut never_received = attempt("a", AttemptState::Failed, false);
        never_received.key_spent = false;
        assert_eq!(
            upstream_key(job, &[never_received], "a"),
            format!("onejob:{job}")
        );
    }

    #[test]
    fn the_first_attempt_goes_to_the_primary_without_a_certificate() {
        let k = kind(&["a", "b"], false);
        assert_eq!(
            provider_of(&next_attempt(&k, &[], &Certified::default())),
            Some("a")
        );
    }

    #[test]
    fn failover_goes_only_to_certified_providers_else_stays_on_the_primary() {
        let k = kind(&["a", "b", "c"], false);
        let failed_a = [attempt("a", AttemptState::Failed, false)];
        let none = next_attempt(&k, &failed_a, &Certified::default());
        assert_eq!(provider_of(&none), Some("a"));
        assert_eq!(
            none.refused
                .iter()
                .map(|r| r.provider.as_str())
                .collect::<Vec<_>>(),
            ["b", "c"]
        );
        let c_only = next_attempt(&k, &failed_a, &certified(&k, &["c"]));
        assert_eq!(provider_of(&c_only), Some("c"));
        assert_eq!(c_only.refused.len(), 1);
        let both = next_attempt(&k, &failed_a, &certified(&k, &["b", "c"]));
        assert_eq!(provider_of(&both), Some("b"));
        assert!(both.refused.is_empty());
    }

    #[test]
    fn nothing_starts_beside_starting_or_unknown() {
        let k = kind(&["a", "b"], true);
        for state in [AttemptState::Starting, AttemptState::Unknown] {
            assert_eq!(
                next_attempt(&k, &[attempt("a", state, false)], &certified(&k, &["b"])).plan,
                None
            );
        }
    }

    #[test]
    fn a_running_attempt_is_hedged_only_by_opt_in_and_only_to_certified() {
        let running = [attempt("a", AttemptState::Running, false)];
        let k = kind(&["a", "b"], true);
        assert_eq!(
            next_attempt(&kind(&["a", "b"], false), &running, &certified(&k, &["b"])).plan,
            None
        );
        let refused = next_attempt(&k, &running, &Certified::default());
        assert_eq!(refused.plan, None);
        assert_eq!(refused.refused[0].provider, "b");
        assert_eq!(
            next_attempt(&k, &running, &certified(&k, &["b"])).plan,
            Some(Plan {
                provider: "b".into(),
                hedge: true
            })
        );
        assert_eq!(
            next_attempt(&kind(&["a"], true), &running, &Certified::default()).plan,
            None
        );
        let hedged = [
            attempt("a", AttemptState::Running, false),
            attempt("b", AttemptState::Failed, true),
        ];
        assert_eq!(next_attempt(&k, &hedged, &certified(&k, &["b"])).plan, None);
    }

    #[test]
    fn a_newer_failing_run_revokes_an_earlier_pass() {
        let k = kind(&["a", "b"], false);
        let mut kinds = crate::kind::Kinds::default();
        kinds.insert(k.clone());
        let run = |passed: bool, at: i64| CertificateRecord {
            id: Uuid::now_v7(),
            provider: "b".into(),
            kind: "k".into(),
            template_hash: k.template_hash(),
            schema_hash: k.schema_hash(),
            settings_hash: "h".into(),
            passed,
            report: serde_json::Value::Null,
            created_at: OffsetDateTime::from_unix_timestamp(at).unwrap(),
        };
        let passed = run(true, 100);
        let failed = run(false, 200);
        assert!(
            Certified::from_records(std::slice::from_ref(&passed), &kinds, &hashes())
                .holds("b", "k")
        );
        let both = [failed.clone(), passed.clone()];
        let certified = Certified::from_records(&both, &kinds, &hashes());
        assert!(!certified.holds("b", "k"));
        assert!(!certified.is_valid(&passed));
        let again = run(true, 300);
        assert!(
            Certified::from_records(&[again, failed, passed], &kinds, &hashes()).holds("b", "k")
        );
    }

    #[test]
    fn a_changed_template_voids_the_certificate() {
        let k = kind(&["a", "b"], false);
        let cert = certified(&k, &["b"]);
        let mut changed = k.clone();
        changed.template = Some("Now {{ prompt }} differently".into());
        let mut kinds = crate::kind::Kinds::default();
        kinds.insert(changed.clone());
        let records = vec![CertificateRecord {
            id: Uuid::now_v7(),
            provider: "b".into(),
            kind: "k".into(),
            template_hash: k.template_hash(),
            schema_hash: k.schema_hash(),
            settings_hash: "h".into(),
            passed: true,
            report: serde_json::Value::Null,
            created_at: OffsetDateTime::UNIX_EPOCH,
        }];
        assert!(cert.holds("b", "k"));
        assert!(!Certified::from_records(&records, &kinds, &hashes()).holds("b", "k"));
    }
}
