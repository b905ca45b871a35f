//! One task of the async task API: its timeline (queued until acknowledged, running for
//! `run_ms`, then finished), its cancellation, the result it finishes with, and the status
//! document `GET /v1/tasks/{id}` answers.
//!
//! The status is computed from the clock when asked, so a task keeps its schedule whether or
//! not anyone is waiting on the submit that created it.
//!
//! A task's default result follows what it was asked: an image task (of an `image.*` kind, or
//! an OpenAI image generation request as the body) finishes with `{"images": [{"url"}]}`
//! (`{"b64_json"}` for `response_format: "b64_json"`), any other with `{"text"}`.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::behaviour::{Behaviour, Outcome};
use crate::submissions::canonical_text;

/// The longest excerpt of an input echoed in a default answer, in characters.
pub const ECHO_CHARS: usize = 200;

/// The status of a task.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Received, not yet acknowledged.
    Queued,
    /// Acknowledged and working.
    Running,
    /// Finished with a result.
    Succeeded,
    /// Finished with an error.
    Failed,
    /// Cancelled before it finished; it never finishes.
    Cancelled,
}

impl TaskStatus {
    /// Whether the task can no longer change.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            TaskStatus::Succeeded | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }
}

/// How a task ends when its run is over.
#[derive(Clone, Debug, PartialEq)]
enum Finish {
    Succeeded(Value),
    Failed(String),
}

/// One submitted task.
#[derive(Clone, Debug)]
pub(crate) struct Task {
    id: String,
    acked_at: Instant,
    finishes_at: Option<Instant>,
    cancelled: bool,
    finish: Finish,
}

impl Task {
    /// Schedules a task received now with this body and behaviour.
    pub(crate) fn new(id: String, body: &Value, behaviour: &Behaviour) -> Task {
        let acked_at = Instant::now() + Duration::from_millis(behaviour.ack_delay_ms);
        let finishes_at =
            (!behaviour.hang_after_ack).then(|| acked_at + Duration::from_millis(behaviour.run_ms));
        let finish = finish_of(&id, body, behaviour);
        Task {
            id,
            acked_at,
            finishes_at,
            cancelled: false,
            finish,
        }
    }

    /// The status at this moment.
    pub(crate) fn status(&self) -> TaskStatus {
        let now = Instant::now();
        if self.cancelled {
            TaskStatus::Cancelled
        } else if now < self.acked_at {
            TaskStatus::Queued
        } else if self.finishes_at.is_none_or(|at| now < at) {
            TaskStatus::Running
        } else {
            match self.finish {
                Finish::Succeeded(_) => TaskStatus::Succeeded,
                Finish::Failed(_) => TaskStatus::Failed,
            }
        }
    }

    /// Cancels the task unless it has already finished.
    pub(crate) fn cancel(&mut self) {
        if !self.status().is_final() {
            self.cancelled = true;
        }
    }

    /// The status document: `task_id`, `status`, and `result` or `error` once finished.
    pub(crate) fn view(&self) -> Value {
        let status = self.status();
        let mut view = Map::new();
        view.insert("task_id".into(), Value::String(self.id.clone()));
        view.insert("status".into(), json!(status));
        match (status, &self.finish) {
            (TaskStatus::Succeeded, Finish::Succeeded(result)) => {
                view.insert("result".into(), result.clone());
            }
            (TaskStatus::Failed, Finish::Failed(error)) => {
                view.insert("error".into(), Value::String(error.clone()));
            }
            _ => {}
        }
        Value::Object(view)
    }
}

/// A fresh task id: `task_` and a UUID without hyphens.
pub(crate) fn new_task_id() -> String {
    format!("task_{}", uuid::Uuid::now_v7().simple())
}

/// The first `max` characters of `text`.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

fn finish_of(task_id: &str, body: &Value, behaviour: &Behaviour) -> Finish {
    if behaviour.outcome == Outcome::Fail {
        return Finish::Failed("scripted failure".into());
    }
    if let Some(output) = &behaviour.output {
        return Finish::Succeeded(output.clone());
    }
    // An image task: of an `image.*` kind, or an OpenAI image generation request sent as the
    // task's body (a `model` and a `prompt`, as onejob's gateway sends one to an async-task
    // provider).
    let is_image = body
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|kind| kind.starts_with("image."))
        || (body.get("model").is_some_and(Value::is_string) && body.get("prompt").is_some());
    let url = format!("https://fake.invalid/images/{task_id}.png");
    // `response_format: "b64_json"` answers the image itself, base64-encoded.
    let image = if body["response_format"] == "b64_json" {
        json!({"b64_json": crate::endpoints::base64_encode(crate::endpoints::PNG)})
    } else {
        json!({"url": url})
    };
    let text = || {
        let echo = match body.pointer("/params/prompt") {
            Some(Value::String(prompt)) => prompt.clone(),
            Some(other) => canonical_text(other),
            None => canonical_text(body),
        };
        format!("fake answer: {}", truncate(&echo, ECHO_CHARS))
    };
    Finish::Succeeded(match (behaviour.outcome, is_image) {
        (Outcome::Malformed, _) => Value::String("not json {".into()),
        (Outcome::MissingArtifact, true) => json!({"images": []}),
        (Outcome::MissingArtifact, false) => json!({"text": ""}),
        (Outcome::DriftedKeys, true) => json!({"image_urls": [url]}),
        (Outcome::DriftedKeys, false) => json!({"answer": text()}),
        (_, true) => json!({"images": [image]}),
        (_, false) => json!({"text": text()}),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn behaviour(outcome: Outcome) -> Behaviour {
        Behaviour {
            outcome,
            ..Behaviour::default()
        }
    }

    #[test]
    fn default_results_follow_the_kind_and_outcome() {
        let image = json!({"kind": "image.generate", "params": {"prompt": "fox"}});
        let chat = json!({"kind": "chat.completion", "params": {"prompt": "fox"}});
        let ok = Task::new("task_1".into(), &image, &behaviour(Outcome::Succeed));
        assert_eq!(
            ok.view()["result"],
            json!({"images": [{"url": "https://fake.invalid/images/task_1.png"}]})
        );
        let drift = Task::new("t".into(), &chat, &behaviour(Outcome::DriftedKeys));
        assert_eq!(
            drift.view()["result"],
            json!({"answer": "fake answer: fox"})
        );
        let missing = Task::new("t".into(), &image, &behaviour(Outcome::MissingArtifact));
        assert_eq!(missing.view()["result"], json!({"images": []}));
        let bad = Task::new("t".into(), &chat, &behaviour(Outcome::Malformed));
        assert_eq!(bad.view()["result"], json!("not json {"));
    }

    #[test]
    fn without_a_prompt_the_canonical_body_is_echoed_truncated() {
        let long = "x".repeat(500);
        let task = Task::new(
            "t".into(),
            &json!({"z": long, "a": 1}),
            &Behaviour::default(),
        );
        let text = task.view()["result"]["text"].as_str().unwrap().to_owned();
        assert!(text.starts_with("fake answer: {\"a\":1,\"z\":\"xxx"));
        assert_eq!(text.chars().count(), "fake answer: ".len() + ECHO_CHARS);
    }

    #[test]
    fn a_failed_task_reports_its_error_and_no_result() {
        let task = Task::new("t".into(), &json!({}), &behaviour(Outcome::Fail));
        assert_eq!(task.status(), TaskStatus::Failed);
        assert_eq!(task.view()["error"], json!("scripted failure"));
        assert!(task.view().get("result").is_none());
    }

    #[test]
    fn cancel_stops_an_unfinished_task_but_not_a_finished_one() {
        let hanging = Behaviour {
            hang_after_ack: true,
            ..Behaviour::default()
        };
        let mut running = Task::new("t".into(), &json!({}), &hanging);
        assert_eq!(running.status(), TaskStatus::Running);
        running.cancel();
        assert_eq!(running.status(), TaskStatus::Cancelled);
        let mut done = Task::new("t".into(), &json!({}), &Behaviour::default());
        done.cancel();
        assert_eq!(done.status(), TaskStatus::Succeeded);
    }
}
