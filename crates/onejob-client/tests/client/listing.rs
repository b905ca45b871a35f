//! Listing and looking up: pages of jobs newest first with their `next_before`, filters by
//! state and kind, and the job under a key.

use onejob_client::{JobFilter, JobState};
use serde_json::json;

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
