//! Tool calls over real HTTP: when the answer is a call, its non-streamed shape, and its
//! streamed deltas assembling to the same call.

mod harness;

use harness::{Fake, chat_body, read_events, rule, start};
use serde_json::{Value, json};

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
    ])
}

fn with_tools(prompt: &str, tool_choice: Option<Value>) -> Value {
    let mut body = chat_body(prompt);
    body["tools"] = tools();
    if let Some(choice) = tool_choice {
        body["tool_choice"] = choice;
    }
    body
}

async fn completion(fake: &Fake, body: &Value, key: Option<&str>) -> Value {
    let response = fake.post("/v1/chat/completions", body, key).await;
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// Asserts a non-streamed tool-call answer and returns its call.
fn the_call(completion: &Value) -> &Value {
    let choice = &completion["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{completion}");
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], Value::Null);
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1);
    let call = &calls[0];
    assert!(call["id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(call["type"], "function");
    call
}

#[tokio::test]
async fn tool_choice_required_calls_a_tool_with_the_scripted_output_as_arguments() {
    let fake = start().await;
    fake.server.add_rule(rule(
        json!({"output": {"city": "Paris", "unit": "celsius"}}),
    ));
    let answer = completion(
        &fake,
        &with_tools("weather?", Some(json!("required"))),
        None,
    )
    .await;
    let call = the_call(&answer);
    assert_eq!(call["function"]["name"], "get_weather");
    let arguments: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"city": "Paris", "unit": "celsius"}));
}

#[tokio::test]
async fn a_named_function_or_a_call_in_the_prompt_picks_the_tool() {
    let fake = start().await;
    let named = json!({"type": "function", "function": {"name": "get_time"}});
    let answer = completion(&fake, &with_tools("hi", Some(named)), None).await;
    assert_eq!(the_call(&answer)["function"]["name"], "get_time");
    assert_eq!(the_call(&answer)["function"]["arguments"], "{}");

    let asked = completion(&fake, &with_tools("please call get_time now", None), None).await;
    assert_eq!(the_call(&asked)["function"]["name"], "get_time");

    let plain = completion(&fake, &with_tools("just chat", None), None).await;
    assert_eq!(plain["choices"][0]["finish_reason"], "stop");
    assert!(plain["choices"][0]["message"]["content"].is_string());

    let refused = completion(
        &fake,
        &with_tools("call get_time", Some(json!("none"))),
        None,
    )
    .await;
    assert_eq!(refused["choices"][0]["finish_reason"], "stop");

    let without_tools = completion(&fake, &chat_body("call get_time"), None).await;
    assert_eq!(without_tools["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn a_tool_choice_that_cannot_be_honoured_is_a_400_and_not_counted() {
    let fake = start().await;
    let unknown = json!({"type": "function", "function": {"name": "launch"}});
    let response = fake
        .post(
            "/v1/chat/completions",
            &with_tools("x", Some(unknown)),
            None,
        )
        .await;
    assert_eq!(response.status(), 400);
    let mut required = chat_body("x");
    required["tool_choice"] = json!("required");
    let response = fake.post("/v1/chat/completions", &required, None).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert_eq!(fake.server.submissions().total, 0);
}

#[tokio::test]
async fn a_streamed_tool_call_comes_in_deltas_that_assemble_to_the_same_call() {
    let fake = start().await;
    fake.server.add_rule(rule(
        json!({"output": {"city": "Paris", "unit": "celsius"}, "run_ms": 50}),
    ));
    let body = with_tools("call get_weather for Paris", None);
    let whole = completion(&fake, &body, Some("tool-1")).await;
    let mut streamed_body = body.clone();
    streamed_body["stream"] = json!(true);
    let response = fake
        .post("/v1/chat/completions", &streamed_body, Some("tool-1"))
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["idempotent-replayed"], "true");
    let streamed = read_events(response).await;
    assert!(streamed.done());
    let chunks = streamed.chunks();
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": null})
    );
    let header = &chunks[1]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(header["index"], 0);
    assert_eq!(header["type"], "function");
    assert_eq!(header["function"]["name"], "get_weather");
    assert_eq!(header["function"]["arguments"], "");
    let (finish, fragments) = chunks[2..].split_last().unwrap();
    assert!(fragments.len() >= 2, "the arguments come in fragments");
    for fragment in fragments {
        let delta = &fragment["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(delta["index"], 0);
        assert!(delta.get("id").is_none() && delta["function"].get("name").is_none());
    }
    assert_eq!(finish["choices"][0]["delta"], json!({}));
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(&streamed.tool_call(), the_call(&whole));
    assert_eq!(fake.server.submissions().total, 1);

    // A fresh streamed call (not a replay) has the same shape.
    let fresh = fake
        .post("/v1/chat/completions", &streamed_body, None)
        .await;
    let fresh = read_events(fresh).await;
    let call = fresh.tool_call();
    assert_eq!(call["function"], the_call(&whole)["function"]);
    assert_ne!(call["id"], the_call(&whole)["id"], "a new call id");
}
