//! Submits a chat job under an idempotency key and waits for its result.
//!
//! ```sh
//! cargo run -p onejob -- serve            # prints an API key
//! ONEJOB_API_KEY=oj_… cargo run -p onejob-client --example submit -- order-42:caption "Describe a red fox."
//! ```

use std::time::Duration;

use onejob_client::{Client, Error, JobState, WaitOptions};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let url = std::env::var("ONEJOB_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let api_key = std::env::var("ONEJOB_API_KEY").unwrap_or_default();
    let mut args = std::env::args().skip(1);
    let key = args.next().unwrap_or_else(|| "example:fox".into());
    let prompt = args.next().unwrap_or_else(|| "Describe a red fox.".into());

    let client = Client::new(&url, &api_key)?;
    let submission = client
        .submit(&key, "chat.completion", &json!({ "prompt": prompt }))
        .await?;
    let how = if submission.replayed {
        "replayed"
    } else {
        "created"
    };
    println!("{how} job {}", submission.job.id);

    let options = WaitOptions::default().timeout(Duration::from_secs(120));
    let job = client
        .wait_with(submission.job.id, &options, |job| {
            println!("  {} ({} attempts)", job.state, job.attempts)
        })
        .await?;
    match job.state {
        JobState::Succeeded => println!("result: {}", job.result.unwrap_or_default()),
        state => println!("the job ended {state}: {}", job.error.unwrap_or_default()),
    }
    Ok(())
}
