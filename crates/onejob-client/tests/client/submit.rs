//! Submission: a new key creates a job, the same key and params replay it, the same key
//! with other params or another kind is `KeyReused` (sent once), a malformed key is refused
//! before anything is sent.

use onejob_client::{Client, Error, EventKind, JobFilter, KeyError, RetryPolicy};
use serde_json::json;

use crate::server::{Backend, Server, postgres_and_sqlite_tests};

postgres_and_sqlite_tests!(
    the_same_key_and_params_replay_the_same_job,
    changed_params_are_key_reused_with_their_paths_and_sent_once,
    a_changed_kind_is_key_reused_with_kind_changed,
);

async fn the_same_key_and_params_replay_the_same_job(backend: Backend) {
    let server = Server::idle(backend).await;
    let client = server.client();
    let params = json!({"prompt": "Describe a red fox.", "temperature": 0.5});
    let first = client
        .submit("order-42:caption", "chat.completion", &params)
        .await
        .unwrap();
    assert!(!first.replayed);
    assert_eq!(first.job.kind, "chat.completion");
    assert_eq!(first.job.attempts, 0);
    assert!(first.job.poll_after_ms.is_some() && first.job.result.is_none());

    let reordered = json!({"temperature": 0.5, "prompt": "Describe a red fox."});
    let again = client
        .submit("order-42:caption", "chat.completion", &reordered)
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.job.id, first.job.id);

    let other = client
        .submit("order-43:caption", "chat.completion", &params)
        .await
        .unwrap();
    assert!(!other.replayed);
    assert_ne!(other.job.id, first.job.id);
    let page = client.list_jobs(&JobFilter::new()).await.unwrap();
    assert_eq!(page.jobs.len(), 2, "two keys, two jobs");
}

async fn changed_params_are_key_reused_with_their_paths_and_sent_once(backend: Backend) {
    let server = Server::idle(backend).await;
    let client = server.client();
    let job = client
        .submit(
            "order-42:caption",
            "chat.completion",
            &json!({"prompt": "Describe a red fox."}),
        )
        .await
        .unwrap()
        .job;
    let error = client
        .submit(
            "order-42:caption",
            "chat.completion",
            &json!({"prompt": "Describe a  red fox.", "system": "terse"}),
        )
        .await
        .unwrap_err();
    let Error::KeyReused {
        job_id,
        mut changed,
        kind_changed,
    } = error
    else {
        panic!("expected KeyReused, got {error:?}");
    };
    changed.sort();
    assert_eq!(job_id, job.id);
    assert_eq!(changed, ["/prompt", "/system"]);
    assert!(!kind_changed);
    let conflicts = client
        .events(job.id)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == EventKind::KeyConflict)
        .count();
    assert_eq!(conflicts, 1, "a 422 is never resent");
    let stored = client.job(job.id).await.unwrap();
    assert_eq!(
        stored.updated_at, job.updated_at,
        "the stored job is untouched"
    );
}

async fn a_changed_kind_is_key_reused_with_kind_changed(backend: Backend) {
    let server = Server::idle(backend).await;
    let client = server.client();
    let job = client
        .submit("fox", "chat.completion", &json!({"prompt": "A red fox"}))
        .await
        .unwrap()
        .job;
    let error = client
        .submit("fox", "image.generate", &json!({"prompt": "A red fox"}))
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::KeyReused { job_id, kind_changed: true, .. } if job_id == job.id),
        "{error:?}"
    );
    assert_eq!(error.status(), Some(422));
    assert_eq!(error.problem_slug(), Some("key-reused"));
}

#[tokio::test]
async fn a_malformed_key_is_refused_before_anything_is_sent() {
    // Nothing listens here: a request would be a transport error, not a key error.
    let client = Client::builder("http://127.0.0.1:1", "oj_x")
        .retry_policy(RetryPolicy::none())
        .build()
        .unwrap();
    let params = json!({"prompt": "x"});
    for (key, expected) in [
        ("", KeyError::Empty),
        ("order 42", KeyError::InvalidCharacter { position: 5 }),
        ("caf\u{e9}", KeyError::InvalidCharacter { position: 3 }),
    ] {
        let error = client
            .submit(key, "chat.completion", &params)
            .await
            .unwrap_err();
        assert!(
            matches!(&error, Error::InvalidKey(e) if *e == expected),
            "{key:?}: {error:?}"
        );
    }
    let long = "k".repeat(256);
    let error = client.job_by_key(&long).await.unwrap_err();
    assert!(
        matches!(error, Error::InvalidKey(KeyError::TooLong(256))),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_key_that_looks_quoted_names_itself() {
    let server = Server::idle(Backend::Sqlite).await;
    let client = server.client();
    let params = json!({"prompt": "quotes"});
    let quoted = client
        .submit("\"abc\"", "chat.completion", &params)
        .await
        .unwrap();
    let bare = client
        .submit("abc", "chat.completion", &params)
        .await
        .unwrap();
    assert!(!quoted.replayed && !bare.replayed);
    assert_ne!(quoted.job.id, bare.job.id, "\"abc\" and abc are two keys");
    let found = client.job_by_key("\"abc\"").await.unwrap().unwrap();
    assert_eq!(found.id, quoted.job.id);
}
