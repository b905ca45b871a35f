//! Listing and looking up: pages of jobs newest first with their `next_before`, filters by
//! state and kind, and the job under a key; event logs and certificates read whole across
//! their pages, or a page at a time.

use std::time::Duration;

use onejob::store::CertificateRecord;
use onejob_client::{EventKind, JobFilter, JobState};
use serde_json::json;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::server::{Backend, Server};

#[tokio::test]
async fn jobs_are_listed_newest_first_in_pages() {
    let server = Server::idle(Backend::Sqlite).await;
    let client = server.client();
    let mut ids = Vec::new();
    for n in 1..=3 {
        let job = client
            .submit(
                &format!("page:{n}"),
                "chat.completion",
                &json!({"prompt": format!("p{n}")}),
            )
            .await
            .unwrap()
            .job;
        ids.push(job.id);
    }
    let filter = JobFilter::new().limit(2);
    let first = client.list_jobs(&filter).await.unwrap();
    let first_ids: Vec<_> = first.jobs.iter().map(|j| j.id).collect();
    assert_eq!(first_ids, [ids[2], ids[1]]);
    let next = first.next_page(&filter).expect("a second page");
    let second = client.list_jobs(&next).await.unwrap();
    let second_ids: Vec<_> = second.jobs.iter().map(|j| j.id).collect();
    assert_eq!(second_ids, [ids[0]]);
    assert_eq!(second.next_before, None);
    assert!(second.next_page(&next).is_none());
}

#[tokio::test]
async fn filters_by_state_and_kind() {
    let server = Server::idle(Backend::Sqlite).await;
    let client = server.client();
    let chat = client
        .submit("chat", "chat.completion", &json!({"prompt": "x"}))
        .await
        .unwrap()
        .job;
    let image = client
        .submit("image", "image.generate", &json!({"prompt": "a fox"}))
        .await
        .unwrap()
        .job;
    client.cancel(image.id).await.unwrap();
    let pending = client
        .list_jobs(&JobFilter::new().state(JobState::Pending))
        .await
        .unwrap();
    assert_eq!(
        pending.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        [chat.id]
    );
    let images = client
        .list_jobs(&JobFilter::new().kind("image.generate"))
        .await
        .unwrap();
    assert_eq!(images.jobs.len(), 1);
    assert_eq!(images.jobs[0].state, JobState::Cancelled);
    let none = client
        .list_jobs(&JobFilter::new().state(JobState::Succeeded))
        .await
        .unwrap();
    assert!(none.jobs.is_empty() && none.next_before.is_none());
}

#[tokio::test]
async fn job_by_key_finds_the_job_or_none() {
    let server = Server::idle(Backend::Sqlite).await;
    let client = server.client();
    let job = client
        .submit(
            "order-7:invoice",
            "chat.completion",
            &json!({"prompt": "x"}),
        )
        .await
        .unwrap()
        .job;
    let found = client.job_by_key("order-7:invoice").await.unwrap();
    assert_eq!(found.map(|j| j.id), Some(job.id));
    assert_eq!(client.job_by_key("order-8:invoice").await.unwrap(), None);
    // Another user's key names nothing for this one.
    let bob = server.client_as(&server.key("bob", false).await);
    assert_eq!(bob.job_by_key("order-7:invoice").await.unwrap(), None);
}

#[tokio::test]
async fn events_reads_the_whole_log_across_pages() {
    let server = Server::idle(Backend::Sqlite).await;
    let client = server.client();
    let params = json!({"prompt": "again"});
    let job = client
        .submit("replayed", "chat.completion", &params)
        .await
        .unwrap()
        .job;
    // 505 replays: a log of 506 events, more than one page of 500.
    for _ in 0..505 {
        assert!(
            client
                .submit("replayed", "chat.completion", &params)
                .await
                .unwrap()
                .replayed
        );
    }
    let mut events = client.events(job.id).await.unwrap();
    for _ in 0..100 {
        if events.len() >= 506 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        events = client.events(job.id).await.unwrap();
    }
    assert_eq!(events.len(), 506);
    assert_eq!(events[0].kind, EventKind::Created);
    assert!(events[1..].iter().all(|e| e.kind == EventKind::Replayed));
    assert!(
        events.windows(2).all(|w| w[0].id < w[1].id),
        "oldest first, once each"
    );

    let first = client.events_page(job.id, None, None).await.unwrap();
    assert_eq!(first.job_id, job.id);
    assert_eq!(
        first.events,
        events[..100],
        "the server's default page is 100"
    );
    assert_eq!(first.next_after, Some(events[99].id));
    let second = client
        .events_page(job.id, first.next_after, Some(500))
        .await
        .unwrap();
    assert_eq!(second.events, events[100..], "the other 406");
    assert_eq!(second.next_after, None, "the last page");
}

#[tokio::test]
async fn certificates_reads_every_run_across_pages() {
    let server = Server::idle(Backend::Sqlite).await;
    // 501 runs, more than one page of 500 (made-up hashes: none is valid).
    let mut ids = Vec::new();
    for n in 0..501 {
        let record = CertificateRecord {
            id: Uuid::now_v7(),
            provider: "fake-backup".into(),
            kind: "chat.completion".into(),
            template_hash: format!("t{n}"),
            schema_hash: "s".into(),
            settings_hash: "p".into(),
            passed: true,
            report: json!({}),
            created_at: OffsetDateTime::now_utc(),
        };
        ids.push(record.id);
        server.app.store.insert_certificate(&record).await.unwrap();
    }
    ids.reverse();
    let client = server.client_as(&server.key("ops", true).await);
    let all = client.certificates().await.unwrap();
    assert_eq!(
        all.iter().map(|c| c.id).collect::<Vec<_>>(),
        ids,
        "newest first"
    );
    assert!(all.iter().all(|c| !c.valid));

    let first = client.certificates_page(None, Some(500)).await.unwrap();
    assert_eq!(first.certificates, all[..500]);
    assert_eq!(first.next_before, Some(ids[499]));
    let second = client
        .certificates_page(first.next_before, Some(500))
        .await
        .unwrap();
    assert_eq!(second.certificates, all[500..]);
    assert_eq!(second.next_before, None);
}
