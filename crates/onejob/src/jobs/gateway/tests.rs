//! Unit tests of `jobs/gateway/mod.rs`.

use serde_json::json;

use super::*;

fn failed_with(last_error: Value) -> (UpstreamFailure, Option<String>) {
    failure_of(Some(&json!({ "last_error": last_error })))
}

#[test]
fn a_failure_is_told_as_the_upstreams_with_its_request_id() {
    let (failure, id) =
        failed_with(json!({"status": 401, "provider": "primary", "request_id": "req_1"}));
    assert_eq!(
        failure,
        UpstreamFailure::AccountRefused {
            provider: "primary".into(),
            status: 401
        }
    );
    assert_eq!(id.as_deref(), Some("req_1"));
    let (failure, _) = failed_with(json!({"status": 429, "provider": "p", "retry_after": 7}));
    assert_eq!(
        failure,
        UpstreamFailure::RateLimited {
            provider: "p".into(),
            retry_after: Some(7)
        }
    );
    let (failure, id) =
        failed_with(json!({"status": 400, "message": "refused", "upstream_message": "bad seed"}));
    assert_eq!(
        failure,
        UpstreamFailure::Refused {
            status: 400,
            message: "bad seed".into()
        }
    );
    assert_eq!(id, None);
    let (failure, _) = failure_of(None);
    assert_eq!(
        failure,
        UpstreamFailure::NoAnswer {
            message: "no attempt succeeded".into()
        }
    );
}

#[test]
fn a_delivery_field_of_the_wrong_type_is_refused() {
    for (body, field) in [
        (json!({"stream": "yes"}), "stream"),
        (json!({"stream_options": 1}), "stream_options"),
        (
            json!({"stream_options": {"include_usage": 1}}),
            "stream_options.include_usage",
        ),
    ] {
        let refused = check_delivery(Endpoint::Chat, body.as_object().unwrap()).unwrap_err();
        assert!(
            matches!(refused, GatewayError::Delivery { field: f, .. } if f == field),
            "{body}"
        );
    }
    assert!(check_delivery(Endpoint::Chat, json!({"stream": null}).as_object().unwrap()).is_ok());
    assert!(
        check_delivery(
            Endpoint::Images,
            json!({"stream": true}).as_object().unwrap()
        )
        .is_err()
    );
}

/// The events a caller of `endpoint` reads of a stream of `chunks`, asking for the usage
/// or not.
async fn relayed(endpoint: Endpoint, include_usage: bool, chunks: &[Value]) -> Vec<LiveEvent> {
    let streams = crate::gateway::streams::LiveStreams::default();
    let owner = Principal::new("acme", "alice");
    let key = onejob_domain::KeyHash([9; 32]);
    let wanted = streams.want(&owner, &key);
    let sink = streams.start(&owner, &key, Uuid::now_v7()).unwrap();
    for chunk in chunks {
        sink.push(chunk.clone());
    }
    sink.end(StreamEnd::Done);
    LiveStream::new(wanted, endpoint, include_usage)
        .events()
        .collect()
        .await
}

#[tokio::test]
async fn a_chat_caller_that_did_not_ask_for_the_usage_reads_none() {
    let chunks = [
        json!({"id": "c", "choices": [{"index": 0, "delta": {"content": "a fox"}}],
            "usage": null}),
        json!({"id": "c", "choices": [], "usage": {"total_tokens": 3}}),
    ];
    let plain = relayed(Endpoint::Chat, false, &chunks).await;
    assert_eq!(
        plain,
        [
            LiveEvent::Chunk(json!({"id": "c",
                "choices": [{"index": 0, "delta": {"content": "a fox"}}]})),
            LiveEvent::Done
        ],
        "no usage chunk, no usage member"
    );
    let asked = relayed(Endpoint::Chat, true, &chunks).await;
    let mut expected: Vec<LiveEvent> = chunks.iter().cloned().map(LiveEvent::Chunk).collect();
    expected.push(LiveEvent::Done);
    assert_eq!(asked, expected, "as the upstream sent them");
    // A message's usage is its own, whatever was asked.
    let delta = [json!({"type": "message_delta", "usage": {"output_tokens": 2}})];
    assert_eq!(
        relayed(Endpoint::Messages, false, &delta).await[0],
        LiveEvent::Chunk(delta[0].clone())
    );
}

#[test]
fn only_a_chunk_without_choices_and_with_usage_is_the_usage_chunk() {
    assert!(usage_only(
        &json!({"choices": [], "usage": {"total_tokens": 1}})
    ));
    assert!(!usage_only(
        &json!({"choices": [{"index": 0}], "usage": {"total_tokens": 1}})
    ));
    assert!(!usage_only(&json!({"choices": [], "usage": null})));
}
