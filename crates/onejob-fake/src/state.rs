//! The state shared by every handler of one fake server: the rules, the tasks, the
//! side-effect log, the upstream idempotency caches of both endpoints, and the shutdown
//! signal that releases hanging requests.
//!
//! Each admission (replay check, counting, rule pick, task creation) happens under one lock,
//! so concurrent submits with the same `Idempotency-Key` run the work exactly once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::http::StatusCode;
use serde_json::Value;
use tokio::sync::watch;

use crate::behaviour::{Behaviour, Rule, RuleBook};
use crate::completion::Completion;
use crate::submissions::{SubmissionRecord, Submissions, canonical_text, input_hash};
use crate::task::{Task, new_task_id};

/// A finished error answer kept so a replay can answer the same.
#[derive(Clone, Debug)]
pub(crate) struct StoredReply {
    /// The answer's status.
    pub(crate) status: StatusCode,
    /// The answer's JSON body.
    pub(crate) body: Value,
}

/// How far one chat completion has got, as every request waiting on it sees it.
#[derive(Clone, Debug)]
pub(crate) enum Progress {
    /// Nothing is out yet: before the acknowledgement, a hang before it, or a failure whose
    /// latency is not over.
    Waiting,
    /// Acknowledged (a stream's role chunk is out) and the first `pieces` content pieces
    /// are out; `finished` once no more will come (all sent, or the answer breaks here).
    Answering {
        /// The whole completion, made when the work started.
        completion: Arc<Completion>,
        /// How many of its pieces are out.
        pieces: usize,
        /// Whether the completion is over.
        finished: bool,
    },
    /// The work failed with this answer.
    Failed(StoredReply),
}

/// Where one chat completion's progress is published (and where replays follow it).
pub(crate) type ChatSlot = Arc<watch::Sender<Progress>>;

/// What to do with a chat submit.
pub(crate) enum ChatAdmission {
    /// The key was seen: follow the first request's progress.
    Replay(watch::Receiver<Progress>),
    /// Counted; answer with this scripted status (and `Retry-After`, in seconds).
    Scripted(u16, Option<u64>),
    /// Counted; run with this behaviour and publish the progress in `slot`.
    Run {
        /// The behaviour picked by the rules.
        behaviour: Behaviour,
        /// Where the progress goes (and where replays follow it).
        slot: ChatSlot,
    },
}

/// A chat request as it reached the fake: its body's text, and the id its answer names it by.
pub(crate) struct SentChat {
    /// The body as received.
    pub(crate) body_text: String,
    /// Sent back as `x-request-id`.
    pub(crate) request_id: String,
}

/// Where the answer of a request beyond chat is published once it is made (`None` until
/// then), for replays of its `Idempotency-Key` to answer the same.
pub(crate) type OtherSlot = Arc<watch::Sender<Option<StoredReply>>>;

/// What to do with a request beyond chat.
pub(crate) enum OtherAdmission {
    /// The key was seen at this endpoint: answer what the first request answers.
    Replay(watch::Receiver<Option<StoredReply>>),
    /// Counted; run with this behaviour and publish the answer in `slot`.
    Run {
        /// The behaviour picked by the rules.
        behaviour: Behaviour,
        /// Where the answer goes (and where replays wait for it).
        slot: OtherSlot,
    },
}

/// What to do with a task submit.
pub(crate) enum TaskAdmission {
    /// The key was seen: answer this status document of the original task.
    Replay(Value),
    /// Counted; answer with this scripted status.
    Scripted(u16),
    /// Counted and created; acknowledge with this task id after the behaviour's delay.
    Accepted {
        /// The new task's id.
        task_id: String,
        /// The behaviour picked by the rules.
        behaviour: Behaviour,
    },
}

#[derive(Default)]
struct Inner {
    rules: RuleBook,
    tasks: HashMap<String, Task>,
    task_keys: HashMap<String, String>,
    chat_keys: HashMap<String, ChatSlot>,
    other_keys: HashMap<(String, String), OtherSlot>,
    log: Submissions,
}

/// The state behind one fake server.
pub(crate) struct Shared {
    inner: Mutex<Inner>,
    shutdown: watch::Sender<bool>,
}

impl Shared {
    /// Empty state: no rules, no tasks, zero counters.
    pub(crate) fn new() -> Arc<Shared> {
        Arc::new(Shared {
            inner: Mutex::new(Inner::default()),
            shutdown: watch::Sender::new(false),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing panics while holding the lock, so a poisoned lock still holds valid state.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends a rule.
    pub(crate) fn add_rule(&self, rule: Rule) {
        self.lock().rules.add(rule);
    }

    /// Removes every rule.
    pub(crate) fn clear_rules(&self) {
        self.lock().rules.clear();
    }

    /// Clears rules, tasks, idempotency caches and counters.
    pub(crate) fn reset(&self) {
        *self.lock() = Inner::default();
    }

    /// A snapshot of the side-effect log.
    pub(crate) fn submissions(&self) -> Submissions {
        self.lock().log.clone()
    }

    /// Admits a chat submit with this body; its input is the body's `messages`.
    pub(crate) fn admit_chat(
        &self,
        request: &Value,
        sent: &SentChat,
        key: Option<String>,
    ) -> ChatAdmission {
        let messages = request.get("messages").unwrap_or(&Value::Null);
        let mut inner = self.lock();
        if let Some(slot) = key.as_ref().and_then(|k| inner.chat_keys.get(k)) {
            let waiting = slot.subscribe();
            inner.log.idempotent_replays += 1;
            return ChatAdmission::Replay(waiting);
        }
        let behaviour = inner.rules.pick(&canonical_text(messages));
        let mut side_effect = record("chat", messages, request, key.clone(), None);
        side_effect.body_text = Some(sent.body_text.clone());
        side_effect.request_id = Some(sent.request_id.clone());
        inner.log.record(side_effect);
        if let Some(status) = behaviour.http_status {
            return ChatAdmission::Scripted(status, behaviour.retry_after);
        }
        let slot: ChatSlot = Arc::new(watch::Sender::new(Progress::Waiting));
        if let Some(key) = key {
            inner.chat_keys.insert(key, Arc::clone(&slot));
        }
        ChatAdmission::Run { behaviour, slot }
    }

    /// Admits a request to an endpoint beyond chat (`embeddings`, `messages`, …): a replay
    /// of an `Idempotency-Key` already seen at that endpoint follows the first request's
    /// answer; anything else is counted as a side effect with its input, whole body and text,
    /// and runs with the behaviour the rules pick.
    pub(crate) fn admit_other(
        &self,
        endpoint: &str,
        input: &Value,
        request: &Value,
        body_text: String,
        key: Option<String>,
        request_id: &str,
    ) -> OtherAdmission {
        let mut inner = self.lock();
        let slot_key = key.clone().map(|key| (endpoint.to_owned(), key));
        if let Some(slot) = slot_key.as_ref().and_then(|k| inner.other_keys.get(k)) {
            let answer = slot.subscribe();
            inner.log.idempotent_replays += 1;
            return OtherAdmission::Replay(answer);
        }
        let behaviour = inner.rules.pick(&canonical_text(input));
        let mut side_effect = record(endpoint, input, request, key, None);
        side_effect.body_text = Some(body_text);
        side_effect.request_id = Some(request_id.to_owned());
        inner.log.record(side_effect);
        let slot: OtherSlot = Arc::new(watch::Sender::new(None));
        if let Some(slot_key) = slot_key {
            inner.other_keys.insert(slot_key, Arc::clone(&slot));
        }
        OtherAdmission::Run { behaviour, slot }
    }

    /// Admits a task submit with this body.
    pub(crate) fn admit_task(&self, body: &Value, key: Option<String>) -> TaskAdmission {
        let mut inner = self.lock();
        let original = key
            .as_ref()
            .and_then(|k| inner.task_keys.get(k))
            .and_then(|id| inner.tasks.get(id))
            .map(Task::view);
        if let Some(view) = original {
            inner.log.idempotent_replays += 1;
            return TaskAdmission::Replay(view);
        }
        let behaviour = inner.rules.pick(&canonical_text(body));
        if let Some(status) = behaviour.http_status {
            inner.log.record(record("tasks", body, body, key, None));
            return TaskAdmission::Scripted(status);
        }
        let task_id = new_task_id();
        let task = Task::new(task_id.clone(), body, &behaviour);
        inner.tasks.insert(task_id.clone(), task);
        if let Some(key) = &key {
            inner.task_keys.insert(key.clone(), task_id.clone());
        }
        inner
            .log
            .record(record("tasks", body, body, key, Some(task_id.clone())));
        TaskAdmission::Accepted { task_id, behaviour }
    }

    /// The status document of a task.
    pub(crate) fn task_view(&self, task_id: &str) -> Option<Value> {
        self.lock().tasks.get(task_id).map(Task::view)
    }

    /// The status document of the task submitted under this idempotency key.
    pub(crate) fn task_by_key(&self, key: &str) -> Option<Value> {
        let inner = self.lock();
        let task_id = inner.task_keys.get(key)?;
        inner.tasks.get(task_id).map(Task::view)
    }

    /// Cancels a task (unless finished), counts the cancel, and returns its status document.
    pub(crate) fn cancel_task(&self, task_id: &str) -> Option<Value> {
        let mut inner = self.lock();
        let task = inner.tasks.get_mut(task_id)?;
        task.cancel();
        let view = task.view();
        inner.log.cancels += 1;
        Some(view)
    }

    /// Releases every hanging request and stops the server.
    pub(crate) fn shut_down(&self) {
        self.shutdown.send_replace(true);
    }

    /// Completes once [`Shared::shut_down`] was called; how hanging requests hang.
    pub(crate) async fn until_shutdown(&self) {
        let mut stopped = self.shutdown.subscribe();
        // An error means the sender is gone, which also means the server is gone.
        let _ = stopped.wait_for(|stopped| *stopped).await;
    }
}

fn record(
    endpoint: &str,
    input: &Value,
    request: &Value,
    idempotency_key: Option<String>,
    task_id: Option<String>,
) -> SubmissionRecord {
    SubmissionRecord {
        endpoint: endpoint.into(),
        input_hash: input_hash(input),
        input: input.clone(),
        request: request.clone(),
        body_text: None,
        request_id: None,
        idempotency_key,
        task_id,
    }
}
