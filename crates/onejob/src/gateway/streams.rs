//! Live streams: the chunks of a running gateway attempt, relayed to every caller of its job
//! from the first chunk on.
//!
//! A caller that asks for `stream: true` registers its interest under the job's owner and
//! key before submitting ([`LiveStreams::want`]), so the interest is there whenever the job's
//! attempt starts. The worker that starts an attempt of a gateway job asks
//! ([`LiveStreams::start`]); if someone is waiting, the attempt streams from its upstream and
//! every chunk goes to the [`StreamSink`], which keeps them all: a caller attaching later
//! still reads from the start. The sink ends the stream when the attempt ends (done, or an
//! error naming the job), and the stream leaves the registry, so a retry under the same key
//! attaches to the job's next attempt. A caller that disconnects only drops its reader.
//!
//! Answers are judged, then told: the event that ends an upstream's stream (`message_stop`,
//! `response.completed`) is held by the sink ([`StreamSink::hold`]) and relayed only when the
//! stream ends [`StreamEnd::Done`], after the answer passed its checks and won; a stream that
//! fails drops it, and its callers read the error instead. (Chat's end, `[DONE]`, is no
//! chunk: callers are sent it at [`StreamEnd::Done`].)
//!
//! The registry is this process's: a caller is relayed live when its job's attempt runs in
//! the same process (`onejob serve`); otherwise it is answered the stored completion as a
//! stream once the job finished.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use onejob_domain::{KeyHash, Principal};
use serde_json::Value;
use tokio::sync::watch;
use uuid::Uuid;

/// A job's owner and key hash: known before the job's id.
type StreamKey = (String, String, [u8; 32]);

fn key_of(owner: &Principal, key: &KeyHash) -> StreamKey {
    (owner.tenant.clone(), owner.user.clone(), key.0)
}

/// How a live stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEnd {
    /// Every chunk was relayed and the attempt's answer was recorded.
    Done,
    /// The attempt ended without an answer to relay.
    Failed {
        /// What its callers are told, naming the job.
        message: String,
        /// The upstream's definite HTTP status, where its refusal ended the attempt.
        status: Option<u16>,
    },
}

impl StreamEnd {
    /// A failure without an upstream status.
    pub fn failed(message: impl Into<String>) -> Self {
        StreamEnd::Failed {
            message: message.into(),
            status: None,
        }
    }
}

#[derive(Debug, Default)]
struct Progress {
    chunks: Vec<Value>,
    /// The event that ended the upstream's stream, relayed once the answer won.
    held: Option<Value>,
    attempt: Option<Uuid>,
    end: Option<StreamEnd>,
}

/// One attempt's stream, shared by its sink and every reader.
#[derive(Debug)]
pub struct LiveStream {
    progress: Mutex<Progress>,
    changed: watch::Sender<u64>,
}

/// What a reader gets next.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Chunks after the ones already read.
    Chunks(Vec<Value>),
    /// The stream ended (after every chunk).
    End(StreamEnd),
}

impl LiveStream {
    fn new() -> Self {
        Self {
            progress: Mutex::new(Progress::default()),
            changed: watch::Sender::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn bump(&self) {
        self.changed.send_modify(|version| *version += 1);
    }

    /// The attempt streaming into it, once one started.
    pub fn attempt(&self) -> Option<Uuid> {
        self.lock().attempt
    }

    /// Whether a caller who wished for it is relayed this stream rather than answered from
    /// the job read as `finished` or not: whenever an attempt streams (or streamed) into it,
    /// also when that attempt's answer already finished the job before the caller looked
    /// (the stream keeps every chunk); not when the attempt ended without an answer and the
    /// job is finished anyway (by another attempt's answer, or failed), which is then the
    /// caller's answer.
    pub fn relays(&self, finished: bool) -> bool {
        let progress = self.lock();
        progress.attempt.is_some()
            && !(finished && matches!(progress.end, Some(StreamEnd::Failed { .. })))
    }

    /// Waits until an attempt streams into it.
    pub async fn started(&self) -> Uuid {
        loop {
            let mut changed = self.changed.subscribe();
            if let Some(attempt) = self.attempt() {
                return attempt;
            }
            // The sender lives as long as `self`: this cannot fail while we hold it.
            let _ = changed.changed().await;
        }
    }

    /// The chunks after the first `read`, or the end once every chunk was read; waits for
    /// either.
    pub async fn next(&self, read: usize) -> Next {
        loop {
            let mut changed = self.changed.subscribe();
            {
                let progress = self.lock();
                if progress.chunks.len() > read {
                    return Next::Chunks(progress.chunks[read..].to_vec());
                }
                if let Some(end) = &progress.end {
                    return Next::End(end.clone());
                }
            }
            let _ = changed.changed().await;
        }
    }
}

/// The live streams of this process, by the job's owner and key.
#[derive(Debug, Clone, Default)]
pub struct LiveStreams(Arc<Mutex<HashMap<StreamKey, Arc<LiveStream>>>>);

impl LiveStreams {
    fn lock(&self) -> MutexGuard<'_, HashMap<StreamKey, Arc<LiveStream>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a caller's wish to read the stream of the job under `owner` and `key`; the
    /// wish lasts as long as the returned [`Wanted`].
    pub fn want(&self, owner: &Principal, key: &KeyHash) -> Wanted {
        let key = key_of(owner, key);
        let stream = self
            .lock()
            .entry(key.clone())
            .or_insert_with(|| Arc::new(LiveStream::new()))
            .clone();
        Wanted {
            streams: self.clone(),
            key,
            stream,
        }
    }

    /// For the worker starting `attempt_id` of the job under `owner` and `key`: the sink to
    /// stream into, if a caller waits for a stream and no attempt streams into it yet.
    pub fn start(&self, owner: &Principal, key: &KeyHash, attempt_id: Uuid) -> Option<StreamSink> {
        let key = key_of(owner, key);
        let stream = self.lock().get(&key).cloned()?;
        {
            let mut progress = stream.lock();
            if progress.attempt.is_some() {
                return None;
            }
            progress.attempt = Some(attempt_id);
        }
        stream.bump();
        Some(StreamSink {
            streams: self.clone(),
            key,
            stream,
            ended: false,
        })
    }

    /// How many streams are registered (for tests).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn forget(&self, key: &StreamKey, stream: &Arc<LiveStream>) {
        let mut streams = self.lock();
        if streams.get(key).is_some_and(|s| Arc::ptr_eq(s, stream)) {
            streams.remove(key);
        }
    }
}

/// A caller's registered wish to read a job's stream.
#[derive(Debug)]
pub struct Wanted {
    streams: LiveStreams,
    key: StreamKey,
    stream: Arc<LiveStream>,
}

impl Wanted {
    /// The stream (an attempt may or may not stream into it yet).
    pub fn stream(&self) -> &Arc<LiveStream> {
        &self.stream
    }
}

impl Drop for Wanted {
    fn drop(&mut self) {
        // The last wish for a stream no attempt took goes: the registry holds one reference,
        // this wish the other.
        let mut streams = self.streams.lock();
        let unused = self.stream.attempt().is_none() && Arc::strong_count(&self.stream) <= 2;
        if unused
            && streams
                .get(&self.key)
                .is_some_and(|s| Arc::ptr_eq(s, &self.stream))
        {
            streams.remove(&self.key);
        }
    }
}

/// Where a worker's attempt streams its chunks.
#[derive(Debug)]
pub struct StreamSink {
    streams: LiveStreams,
    key: StreamKey,
    stream: Arc<LiveStream>,
    ended: bool,
}

impl StreamSink {
    /// Relays one chunk.
    pub fn push(&self, chunk: Value) {
        self.stream.lock().chunks.push(chunk);
        self.stream.bump();
    }

    /// Holds the event that ended the upstream's stream: readers get it only when the stream
    /// ends [`StreamEnd::Done`] (the answer passed its checks and won), as its last chunk.
    pub fn hold(&self, chunk: Value) {
        self.stream.lock().held = Some(chunk);
    }

    /// Ends the stream: done relays the held event first, a failure drops it. The stream
    /// leaves the registry, so the job's next attempt streams anew.
    pub fn end(mut self, end: StreamEnd) {
        self.finish(end);
    }

    fn finish(&mut self, end: StreamEnd) {
        if self.ended {
            return;
        }
        self.ended = true;
        {
            let mut progress = self.stream.lock();
            let held = progress.held.take();
            if let (StreamEnd::Done, Some(last)) = (&end, held) {
                progress.chunks.push(last);
            }
            progress.end = Some(end);
        }
        self.stream.bump();
        self.streams.forget(&self.key, &self.stream);
    }
}

impl Drop for StreamSink {
    fn drop(&mut self) {
        self.finish(StreamEnd::failed(
            "the attempt stopped before its answer was complete",
        ));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn owner() -> Principal {
        Principal::new("acme", "alice")
    }

    #[tokio::test]
    async fn readers_get_every_chunk_from_the_start_and_the_end() {
        let streams = LiveStreams::default();
        let key = KeyHash([7; 32]);
        let first = streams.want(&owner(), &key);
        let attempt = Uuid::now_v7();
        let sink = streams
            .start(&owner(), &key, attempt)
            .expect("a caller waits");
        assert!(
            streams.start(&owner(), &key, Uuid::now_v7()).is_none(),
            "one attempt"
        );
        assert_eq!(first.stream().started().await, attempt);
        sink.push(json!(1));
        // A second caller attaching now still reads from the first chunk.
        let second = streams.want(&owner(), &key);
        assert!(Arc::ptr_eq(first.stream(), second.stream()));
        sink.push(json!(2));
        assert_eq!(
            second.stream().next(0).await,
            Next::Chunks(vec![json!(1), json!(2)])
        );
        sink.end(StreamEnd::Done);
        assert_eq!(first.stream().next(2).await, Next::End(StreamEnd::Done));
        assert!(streams.is_empty(), "an ended stream leaves the registry");
    }

    #[tokio::test]
    async fn the_held_last_event_is_relayed_only_when_the_stream_ends_done() {
        let streams = LiveStreams::default();
        let key = KeyHash([5; 32]);
        let wanted = streams.want(&owner(), &key);
        let sink = streams.start(&owner(), &key, Uuid::now_v7()).unwrap();
        sink.push(json!("start"));
        sink.hold(json!("stop"));
        assert_eq!(
            wanted.stream().next(0).await,
            Next::Chunks(vec![json!("start")]),
            "held, not relayed"
        );
        sink.end(StreamEnd::Done);
        assert_eq!(
            wanted.stream().next(1).await,
            Next::Chunks(vec![json!("stop")])
        );
        assert_eq!(wanted.stream().next(2).await, Next::End(StreamEnd::Done));

        let failed = KeyHash([6; 32]);
        let wanted = streams.want(&owner(), &failed);
        let sink = streams.start(&owner(), &failed, Uuid::now_v7()).unwrap();
        sink.push(json!("start"));
        sink.hold(json!("stop"));
        sink.end(StreamEnd::failed("judged no answer"));
        assert_eq!(
            wanted.stream().next(1).await,
            Next::End(StreamEnd::failed("judged no answer")),
            "a failed stream never tells its end"
        );
    }

    #[tokio::test]
    async fn a_sink_dropped_unended_fails_the_stream_and_unused_wishes_leave() {
        let streams = LiveStreams::default();
        let key = KeyHash([1; 32]);
        let wanted = streams.want(&owner(), &key);
        drop(streams.start(&owner(), &key, Uuid::now_v7()).unwrap());
        assert!(matches!(
            wanted.stream().next(0).await,
            Next::End(StreamEnd::Failed { .. })
        ));
        let other = KeyHash([2; 32]);
        drop(streams.want(&owner(), &other));
        assert!(streams.is_empty());
    }

    #[test]
    fn a_stream_is_relayed_once_an_attempt_took_it_unless_it_failed_a_finished_job() {
        let streams = LiveStreams::default();
        let key = KeyHash([3; 32]);
        let wanted = streams.want(&owner(), &key);
        assert!(!wanted.stream().relays(false), "no attempt streams yet");
        let sink = streams.start(&owner(), &key, Uuid::now_v7()).unwrap();
        assert!(wanted.stream().relays(false));
        sink.push(json!(1));
        sink.end(StreamEnd::Done);
        assert!(
            wanted.stream().relays(true),
            "the attempt's answer finished the job before its caller looked: still relayed"
        );
        let failed = KeyHash([4; 32]);
        let wanted = streams.want(&owner(), &failed);
        streams
            .start(&owner(), &failed, Uuid::now_v7())
            .unwrap()
            .end(StreamEnd::failed("lost"));
        assert!(
            wanted.stream().relays(false),
            "the failure is the caller's news"
        );
        assert!(
            !wanted.stream().relays(true),
            "the finished job's own answer is the caller's"
        );
    }
}
