//! The README's Rust client example, compiled and run against a real onejob: the code
//! between the `README` markers below must appear in README.md verbatim.

use crate::server::{Backend, Server};

// README begin
use onejob_client::{Client, Error, JobState, WaitOptions};
use serde_json::json;

async fn caption(url: &str, api_key: &str) -> Result<(), Error> {
    let client = Client::new(url, api_key)?; // url: "http://127.0.0.1:8080"
    let submission = client
        .submit(
            "order-42:caption",
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
// README end

#[test]
fn the_readme_shows_this_example_verbatim() {
    let this = include_str!("readme.rs");
    let start = this.find("// README begin\n").unwrap() + "// README begin\n".len();
    let end = this.find("// README end").unwrap();
    let readme = include_str!("../../../../README.md");
    assert!(
        readme.contains(&format!("```rust\n{}```\n", &this[start..end])),
        "README.md's Rust client section must show tests/client/readme.rs's example verbatim"
    );
}

#[tokio::test]
async fn the_readme_example_runs_a_job() {
    let server = Server::running(Backend::Sqlite).await;
    caption(&server.url, &server.token)
        .await
        .expect("the README's example runs");
    let job = server
        .client()
        .job_by_key("order-42:caption")
        .await
        .expect("the example's job")
        .expect("a job under the example's key");
    assert_eq!(job.state, JobState::Succeeded, "{job:?}");
}
