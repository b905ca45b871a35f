//! Listings: a principal's jobs with each [`JobFilter`] field, a job's attempts (for its
//! owner and for workers), attempts and events in a [`Scope`] (a user's or a whole
//! tenant's) with their filters, an attempt looked up in a tenant, the count of unknown
//! attempts, and the verification runs with their paging.

use std::time::Duration;

use onejob::store::{
    CertificateRecord, Intake, JobFilter, Resolution, Scope, Store, UnknownBy, Unsuccessful,
};
use onejob_domain::{AttemptState, EventKind, JobState, Principal};
use serde_json::json;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::support::{
    Backend, RETRY, TestDatabase, alice, created, every_backend_tests, new_job_of, start_for,
    started,
};

every_backend_tests!(
    jobs_are_listed_newest_first_by_each_filter,
    a_jobs_attempts_are_listed_oldest_first,
    attempts_are_listed_by_scope_and_state,
    events_are_listed_by_scope_and_kind,
    an_attempt_is_found_only_in_its_tenant,
    unknown_attempts_are_counted_across_tenants,
    verification_runs_are_listed_newest_first_in_pages,
);

async fn job_of(store: &dyn Store, owner: Principal, kind: &str, key: &str) -> Uuid {
    match store
        .create_or_replay(new_job_of(owner, kind, key, key))
        .await
        .unwrap()
    {
        Intake::Created(job) => job.id,
        other => panic!("expected a new job, got {other:?}"),
    }
}

fn bob() -> Principal {
    Principal::new("acme", "bob")
}

fn globex() -> Principal {
    Principal::new("globex", "carol")
}

fn tenant(name: &str) -> Scope {
    Scope {
        tenant: name.into(),
        user: None,
    }
}

fn user(principal: &Principal) -> Scope {
    Scope {
        tenant: principal.tenant.clone(),
        user: Some(principal.user.clone()),
    }
}

/// `list_jobs`: only the owner's jobs, newest first, narrowed by state, kind, `before` (a
/// keyset cursor) and `limit`, alone and together.
async fn jobs_are_listed_newest_first_by_each_filter(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let mut chats = Vec::new();
    let mut images = Vec::new();
    for n in 0..3 {
        chats.push(job_of(&*store, alice(), "chat.completion", &format!("chat-{n}")).await);
        images.push(job_of(&*store, alice(), "image.generate", &format!("image-{n}")).await);
    }
    job_of(&*store, bob(), "chat.completion", "bobs").await;
    job_of(&*store, globex(), "chat.completion", "carols").await;
    store
        .cancel_job(&alice(), chats[1], "key:alice")
        .await
        .unwrap();
    store
        .cancel_job(&alice(), images[2], "key:alice")
        .await
        .unwrap();
    let list = async |filter: JobFilter| -> Vec<Uuid> {
        store
            .list_jobs(&alice(), &filter)
            .await
            .unwrap()
            .into_iter()
            .map(|j| j.id)
            .collect()
    };
    let mut newest_first: Vec<Uuid> = chats.iter().chain(&images).copied().collect();
    newest_first.sort_by(|a, b| b.cmp(a));
    let all = JobFilter {
        limit: 100,
        ..Default::default()
    };
    assert_eq!(list(all.clone()).await, newest_first);
    assert_eq!(
        list(JobFilter {
            limit: 2,
            ..all.clone()
        })
        .await,
        newest_first[..2]
    );
    assert_eq!(
        list(JobFilter {
            before: Some(newest_first[1]),
            ..all.clone()
        })
        .await,
        newest_first[2..]
    );
    assert_eq!(
        list(JobFilter {
            kind: Some("image.generate".into()),
            ..all.clone()
        })
        .await,
        images.iter().rev().copied().collect::<Vec<_>>()
    );
    assert_eq!(
        list(JobFilter {
            state: Some(JobState::Cancelled),
            ..all.clone()
        })
        .await,
        [images[2], chats[1]]
    );
    assert_eq!(
        list(JobFilter {
            state: Some(JobState::Pending),
            kind: Some("chat.completion".into()),
            before: Some(chats[2]),
            limit: 10,
        })
        .await,
        [chats[0]]
    );
    assert_eq!(
        list(JobFilter {
            kind: Some("no.such.kind".into()),
            ..all.clone()
        })
        .await,
        Vec::<Uuid>::new()
    );
    let bobs = store.list_jobs(&bob(), &all).await.unwrap();
    assert_eq!(bobs.len(), 1);
    assert_eq!(bobs[0].owner, bob());
}

/// `attempts` (the owner's view) and `job_attempts` (the workers') list a job's attempts
/// oldest first, the same; a job without attempts has an empty list.
async fn a_jobs_attempts_are_listed_oldest_first(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "attempts").await;
    assert_eq!(
        store.attempts(&alice(), job_id).await.unwrap(),
        Some(vec![])
    );
    assert!(store.job_attempts(job_id).await.unwrap().is_empty());
    let mut ids = Vec::new();
    for n in 0..3 {
        let attempt = started(&*store, &start_for(job_id, n, "a", false)).await;
        ids.push(attempt);
        store
            .fail_attempt(
                attempt,
                Unsuccessful::Failed,
                &json!({"message": format!("no {n}")}),
                RETRY,
                &Resolution::worker(),
            )
            .await
            .unwrap();
    }
    let owners = store.attempts(&alice(), job_id).await.unwrap().unwrap();
    let workers = store.job_attempts(job_id).await.unwrap();
    assert_eq!(owners, workers);
    assert_eq!(owners.iter().map(|a| a.id).collect::<Vec<_>>(), ids);
    assert_eq!(
        owners.iter().map(|a| a.number).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert!(
        owners.iter().all(|a| a.job_id == job_id
            && a.state == AttemptState::Failed
            && a.finished_at.is_some())
    );
    assert_eq!(owners[2].error, Some(json!({"message": "no 2"})));
    assert!(store.job_attempts(Uuid::now_v7()).await.unwrap().is_empty());
}

/// `list_attempts`: a user's or a whole tenant's attempts, newest first, optionally in one
/// state, at most `limit`.
async fn attempts_are_listed_by_scope_and_state(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let attempt_of = async |owner: Principal, key: &str| {
        let job_id = job_of(&*store, owner, "chat.completion", key).await;
        started(&*store, &start_for(job_id, 0, "a", false)).await
    };
    let alices = [
        attempt_of(alice(), "a-1").await,
        attempt_of(alice(), "a-2").await,
    ];
    let bobs = attempt_of(bob(), "b-1").await;
    let carols = attempt_of(globex(), "c-1").await;
    store
        .mark_unknown(alices[0], &json!({"reason": "deadline"}), UnknownBy::Worker)
        .await
        .unwrap();
    let ids = async |scope: Scope, state: Option<AttemptState>, limit: u32| -> Vec<Uuid> {
        store
            .list_attempts(&scope, state, limit)
            .await
            .unwrap()
            .into_iter()
            .map(|a| a.id)
            .collect()
    };
    assert_eq!(ids(user(&alice()), None, 10).await, [alices[1], alices[0]]);
    assert_eq!(
        ids(tenant("acme"), None, 10).await,
        [bobs, alices[1], alices[0]]
    );
    assert_eq!(ids(tenant("acme"), None, 2).await, [bobs, alices[1]]);
    assert_eq!(ids(tenant("globex"), None, 10).await, [carols]);
    assert_eq!(
        ids(tenant("acme"), Some(AttemptState::Unknown), 10).await,
        [alices[0]]
    );
    assert_eq!(
        ids(user(&bob()), Some(AttemptState::Unknown), 10).await,
        Vec::<Uuid>::new()
    );
    assert_eq!(ids(tenant("initech"), None, 10).await, Vec::<Uuid>::new());
}

/// `recent_events`: a user's or a whole tenant's events, newest first, optionally of one
/// kind, at most `limit`.
async fn events_are_listed_by_scope_and_kind(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let alices = job_of(&*store, alice(), "chat.completion", "a").await;
    let bobs = job_of(&*store, bob(), "chat.completion", "b").await;
    let carols = job_of(&*store, globex(), "chat.completion", "c").await;
    store.cancel_job(&bob(), bobs, "key:bob").await.unwrap();
    job_of(&*store, alice(), "chat.completion", "a2").await;
    let events = store
        .recent_events(&tenant("acme"), None, 10)
        .await
        .unwrap();
    assert_eq!(events.len(), 4, "{events:?}");
    assert!(events.windows(2).all(|w| w[0].id > w[1].id), "newest first");
    assert!(events.iter().all(|e| e.job_id != carols));
    assert_eq!(events[1].kind, EventKind::Cancelled);
    assert_eq!(events[1].job_id, bobs);
    let limited = store.recent_events(&tenant("acme"), None, 2).await.unwrap();
    assert_eq!(limited, events[..2]);
    let cancelled = store
        .recent_events(&tenant("acme"), Some(EventKind::Cancelled), 10)
        .await
        .unwrap();
    assert_eq!(cancelled.len(), 1);
    let alices_events = store
        .recent_events(&user(&alice()), None, 10)
        .await
        .unwrap();
    assert_eq!(alices_events.len(), 2);
    assert!(alices_events.iter().all(|e| e.kind == EventKind::Created));
    assert_eq!(alices_events[1].job_id, alices);
    assert_eq!(
        store
            .recent_events(&user(&alice()), Some(EventKind::Cancelled), 10)
            .await
            .unwrap(),
        vec![]
    );
    let carols_events = store
        .recent_events(&tenant("globex"), None, 10)
        .await
        .unwrap();
    assert_eq!(carols_events.len(), 1);
    assert_eq!(carols_events[0].job_id, carols);
}

/// `attempt_in_tenant` finds an attempt with its job only within the job's tenant.
async fn an_attempt_is_found_only_in_its_tenant(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    let job_id = created(&*store, "operator").await;
    let attempt = started(&*store, &start_for(job_id, 0, "a", false)).await;
    let (found, job) = store
        .attempt_in_tenant("acme", attempt)
        .await
        .unwrap()
        .expect("in its tenant");
    assert_eq!((found.id, found.job_id, job.id), (attempt, job_id, job_id));
    assert_eq!(job.owner, alice());
    assert_eq!(
        store.attempt_in_tenant("globex", attempt).await.unwrap(),
        None
    );
    assert_eq!(
        store
            .attempt_in_tenant("acme", Uuid::now_v7())
            .await
            .unwrap(),
        None
    );
}

/// `count_unknown` counts the unknown attempts of every tenant, and only those.
async fn unknown_attempts_are_counted_across_tenants(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    assert_eq!(store.count_unknown().await.unwrap(), 0);
    let mut attempts = Vec::new();
    for (owner, key) in [(alice(), "a"), (bob(), "b"), (globex(), "c")] {
        let job_id = job_of(&*store, owner, "chat.completion", key).await;
        attempts.push(started(&*store, &start_for(job_id, 0, "a", false)).await);
    }
    for attempt in &attempts[..2] {
        store
            .mark_unknown(*attempt, &json!({"reason": "deadline"}), UnknownBy::Worker)
            .await
            .unwrap();
    }
    assert_eq!(store.count_unknown().await.unwrap(), 2);
    store
        .mark_unknown(
            attempts[2],
            &json!({"reason": "deadline"}),
            UnknownBy::Worker,
        )
        .await
        .unwrap();
    assert_eq!(store.count_unknown().await.unwrap(), 3);
    store
        .fail_attempt(
            attempts[0],
            Unsuccessful::FailedKeyKept,
            &json!({"message": "never ran"}),
            RETRY,
            &Resolution::of_unknown("key:ops", "checked"),
        )
        .await
        .unwrap();
    assert_eq!(store.count_unknown().await.unwrap(), 2);
}

fn certificate(n: u32, passed: bool) -> CertificateRecord {
    CertificateRecord {
        id: Uuid::now_v7(),
        provider: format!("provider-{n}"),
        kind: "chat.completion".into(),
        template_hash: "a".repeat(64),
        schema_hash: "b".repeat(64),
        settings_hash: "c".repeat(64),
        passed,
        report: json!({"cases": [{"name": format!("case {n}"), "passed": passed}]}),
        // Whole seconds: both databases keep them exactly.
        created_at: OffsetDateTime::from_unix_timestamp(1_800_000_000 + i64::from(n)).unwrap(),
    }
}

/// `certificates` lists every verification run newest first, as stored;
/// `certificates_page` walks them in pages by `before`.
async fn verification_runs_are_listed_newest_first_in_pages(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let store = db.open_store().await;
    assert!(store.certificates().await.unwrap().is_empty());
    assert!(store.certificates_page(None, 10).await.unwrap().is_empty());
    let mut runs = Vec::new();
    for n in 0..5 {
        let run = certificate(n, n % 2 == 0);
        store.insert_certificate(&run).await.unwrap();
        runs.push(run);
        // Distinct UUIDv7 milliseconds, so that the ids order the runs.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    runs.reverse();
    let all = store.certificates().await.unwrap();
    let ids = |runs: &[CertificateRecord]| runs.iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(ids(&all), ids(&runs));
    for (stored, written) in all.iter().zip(&runs) {
        assert_eq!(
            (
                &stored.provider,
                &stored.kind,
                &stored.template_hash,
                &stored.schema_hash,
                &stored.settings_hash,
                stored.passed,
                &stored.report,
            ),
            (
                &written.provider,
                &written.kind,
                &written.template_hash,
                &written.schema_hash,
                &written.settings_hash,
                written.passed,
                &written.report,
            )
        );
    }
    let mut paged = Vec::new();
    let mut before = None;
    loop {
        let page = store.certificates_page(before, 2).await.unwrap();
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        before = Some(last.id);
        paged.extend(page);
    }
    assert_eq!(paged, all);
    assert_eq!(
        ids(&store.certificates_page(Some(runs[1].id), 10).await.unwrap()),
        ids(&runs[2..])
    );
}
