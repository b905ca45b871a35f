//! The Rust client example of `docs/clients.md`, compiled and run against a real onejob:
//! the code between the `docs` markers below must appear in that page verbatim.

use crate::server::{Backend, Server};

// docs begin
use onejob_client::{Client, Error, JobState, WaitOptions};
use serde_json::json;

async fn caption(url: &str, api_key: &str) -> Result<(), Error> {
    let client = Client::new(url, api_key)?; // url: "http://127.0.0.1:8080"
    let submission = client
        .submit(
            "order-46:caption",
            "chat.completion",
            &json!({"prompt": "Describe a red fox."}),
        )
        .await?; // submission.replayed: the key already named it
    let job = client
        .wait(submission.job.id, &WaitOptions::default())
        .await?;
    match job.state {
        JobState::Succeeded => println!("{}", job.result.unwrap()),
        state => println!("ended {state}: {:?}", job.error),
    }
    Ok(())
}
// docs end

#[test]
fn the_clients_page_shows_this_example_verbatim() {
    let this = include_str!("clients_page.rs");
    let start = this.find("// docs begin\n").unwrap() + "// docs begin\n".len();
    let end = this.find("// docs end").unwrap();
    let page = include_str!("../../../../docs/clients.md");
    assert!(
        page.contains(&format!("```rust\n{}```\n", &this[start..end])),
        "docs/clients.md must show tests/client/clients_page.rs's example verbatim"
    );
}

#[tokio::test]
async fn the_clients_page_example_runs_a_job() {
    let server = Server::running(Backend::Sqlite).await;
    caption(&server.url, &server.token)
        .await
        .expect("the example runs");
    let job = server
        .client()
        .job_by_key("order-46:caption")
        .await
        .expect("the example's job")
        .expect("a job under the example's key");
    assert_eq!(job.state, JobState::Succeeded, "{job:?}");
}
