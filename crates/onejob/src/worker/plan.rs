//! Which attempt a job needs next, decided from its kind and its attempts so far. Pure: the
//! store's attempt guard has the last word on whether it may start.

use onejob_domain::AttemptState;

use crate::{kind::Kind, store::AttemptRecord};

/// The next attempt to start for a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The provider to send it to.
    pub provider: String,
    /// Whether it is a hedge beside a running attempt.
    pub hedge: bool,
}

/// The next attempt for a job with these attempts, or `None` if nothing should start.
///
/// * No attempt open: the first provider for a new job, else the provider after the last
///   attempt's (failover after a definite failure), wrapping around the list.
/// * One attempt running and none starting or unknown: a hedge on the provider after the
///   running one, if the kind hedges and that is another provider. One hedge per job.
/// * Anything `starting` or `unknown`: nothing.
pub fn next_attempt(kind: &Kind, attempts: &[AttemptRecord]) -> Option<Plan> {
    if kind.providers.is_empty() {
        return None;
    }
    if attempts.iter().any(|a| a.state.blocks_new_attempts()) {
        return None;
    }
    let running: Vec<&AttemptRecord> = attempts
        .iter()
        .filter(|a| a.state == AttemptState::Running)
        .collect();
    match running.as_slice() {
        [] => {
            let provider = match attempts.last() {
                None => kind.providers[0].clone(),
                Some(last) => after(kind, &last.provider).to_owned(),
            };
            Some(Plan {
                provider,
                hedge: false,
            })
        }
        [only] => hedge_provider(kind, &only.provider, attempts).map(|provider| Plan {
            provider,
            hedge: true,
        }),
        _ => None,
    }
}

/// The provider a hedge beside `running_on` would go to, if the kind hedges, no hedge was
/// started yet, and there is another provider to go to.
pub fn hedge_provider(kind: &Kind, running_on: &str, attempts: &[AttemptRecord]) -> Option<String> {
    kind.hedge_after?;
    if attempts.iter().any(|a| a.hedge) || attempts.len() as u32 >= kind.max_attempts {
        return None;
    }
    let next = after(kind, running_on);
    (next != running_on).then(|| next.to_owned())
}

/// The provider after `provider` in the kind's list (the first if it is not listed).
fn after<'k>(kind: &'k Kind, provider: &str) -> &'k str {
    let index = kind.providers.iter().position(|p| p == provider);
    let next = index.map_or(0, |i| (i + 1) % kind.providers.len());
    &kind.providers[next]
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use time::OffsetDateTime;
    use uuid::Uuid;

    use super::*;

    fn kind(providers: &[&str], hedge: bool) -> Kind {
        Kind {
            name: "k".into(),
            params_schema: None,
            output_schema: None,
            template: None,
            intent_fields: None,
            providers: providers.iter().map(|p| (*p).to_owned()).collect(),
            attempt_timeout: Duration::from_secs(1),
            max_attempts: 3,
            retry_backoff: Duration::from_millis(10),
            hedge_after: hedge.then(|| Duration::from_millis(10)),
            settle_unknown_after: None,
            contract: vec![],
        }
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
            error: None,
        }
    }

    #[test]
    fn first_attempt_goes_to_the_primary_and_failover_to_the_next() {
        let k = kind(&["a", "b"], false);
        assert_eq!(next_attempt(&k, &[]).unwrap().provider, "a");
        let failed_a = [attempt("a", AttemptState::Failed, false)];
        assert_eq!(next_attempt(&k, &failed_a).unwrap().provider, "b");
        let failed_b = [
            attempt("a", AttemptState::Failed, false),
            attempt("b", AttemptState::Failed, false),
        ];
        assert_eq!(next_attempt(&k, &failed_b).unwrap().provider, "a");
    }

    #[test]
    fn nothing_starts_beside_starting_or_unknown() {
        let k = kind(&["a", "b"], true);
        for state in [AttemptState::Starting, AttemptState::Unknown] {
            assert_eq!(next_attempt(&k, &[attempt("a", state, false)]), None);
        }
    }

    #[test]
    fn a_running_attempt_is_hedged_only_when_the_kind_opts_in() {
        let running = [attempt("a", AttemptState::Running, false)];
        assert_eq!(next_attempt(&kind(&["a", "b"], false), &running), None);
        assert_eq!(
            next_attempt(&kind(&["a", "b"], true), &running),
            Some(Plan {
                provider: "b".into(),
                hedge: true
            })
        );
        assert_eq!(next_attempt(&kind(&["a"], true), &running), None);
        let hedged = [
            attempt("a", AttemptState::Running, false),
            attempt("b", AttemptState::Failed, true),
        ];
        assert_eq!(next_attempt(&kind(&["a", "b"], true), &hedged), None);
    }
}
