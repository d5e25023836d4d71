//! Drives the sequences of one request: merges their event channels, applies the deadline, and
//! either collects a whole response or streams server-sent events. Dropping either cancels every
//! sequence of the request at once (the handles cancel on drop).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame};
use serde_json::Value;
use tokio::time::Sleep;

use crate::backend::{GenerationEvent, GenerationHandle};
use crate::errors::ApiError;
use crate::metrics::Metrics;
use crate::response::{Assembler, Progress};

/// Round-robin poller over the event channels of several sequences.
pub struct Merged {
    handles: Vec<Option<GenerationHandle>>,
    next: usize,
}

impl Merged {
    /// Merges these handles; choice `i` is `handles[i]`.
    pub fn new(handles: Vec<GenerationHandle>) -> Self {
        Self {
            handles: handles.into_iter().map(Some).collect(),
            next: 0,
        }
    }

    /// The next event of any sequence, `Ready(None)` when all have ended.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<(usize, GenerationEvent)>> {
        let n = self.handles.len();
        let mut live = false;
        for k in 0..n {
            let i = (self.next + k) % n;
            let Some(h) = self.handles[i].as_mut() else {
                continue;
            };
            live = true;
            match h.events.poll_recv(cx) {
                Poll::Ready(Some(ev)) => {
                    if matches!(
                        ev,
                        GenerationEvent::Finished { .. } | GenerationEvent::Error(_)
                    ) {
                        self.handles[i] = None;
                    }
                    self.next = i + 1;
                    return Poll::Ready(Some((i, ev)));
                }
                Poll::Ready(None) => {
                    self.handles[i] = None;
                    return Poll::Ready(Some((
                        i,
                        GenerationEvent::Error("the backend dropped the sequence".into()),
                    )));
                }
                Poll::Pending => {}
            }
        }
        if live {
            Poll::Pending
        } else {
            Poll::Ready(None)
        }
    }
}

/// What one step of a [`Generation`] produced.
pub enum Step {
    /// Stream chunks to send (possibly none).
    Chunks(Vec<Value>),
    /// Every sequence finished.
    Done,
    /// Generation failed or timed out.
    Failed(ApiError),
}

/// The sequences of one request plus everything needed to answer it.
pub struct Generation {
    merged: Merged,
    /// The response being built.
    pub asm: Assembler,
    deadline: Pin<Box<Sleep>>,
    timeout: Duration,
    metrics: Arc<Metrics>,
    ended: bool,
}

impl Generation {
    /// Wraps submitted handles; `timeout` bounds the whole generation.
    pub fn new(
        handles: Vec<GenerationHandle>,
        asm: Assembler,
        timeout: Duration,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            merged: Merged::new(handles),
            asm,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            timeout,
            metrics,
            ended: false,
        }
    }

    fn end(&mut self) {
        if !self.ended {
            self.ended = true;
            let (p, c) = self.asm.token_counts();
            self.metrics.tokens(p, c);
            if let Some(t) = self.asm.ttft() {
                self.metrics.first_token(t);
            }
        }
    }

    /// Advances until something is produced.
    pub fn poll_step(&mut self, cx: &mut Context<'_>) -> Poll<Step> {
        if self.deadline.as_mut().poll(cx).is_ready() {
            self.merged = Merged::new(Vec::new()); // cancels every sequence now
            self.metrics.cancelled();
            self.end();
            return Poll::Ready(Step::Failed(ApiError::timeout(self.timeout.as_secs_f64())));
        }
        match self.merged.poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                self.end();
                Poll::Ready(Step::Done)
            }
            Poll::Ready(Some((i, ev))) => {
                if matches!(ev, GenerationEvent::Token { .. }) {
                    self.metrics.generated(1);
                }
                let (chunks, progress) = self.asm.on_event(i, ev);
                match progress {
                    Progress::Running => Poll::Ready(Step::Chunks(chunks)),
                    Progress::Failed(e) => {
                        self.merged = Merged::new(Vec::new());
                        self.end();
                        Poll::Ready(Step::Failed(ApiError::internal(e)))
                    }
                }
            }
        }
    }

    /// Runs to the end and returns the whole response body.
    pub async fn collect(mut self) -> Result<Value, ApiError> {
        loop {
            match std::future::poll_fn(|cx| self.poll_step(cx)).await {
                Step::Chunks(_) => {}
                Step::Done => return Ok(self.asm.response()),
                Step::Failed(e) => return Err(e),
            }
        }
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        if !self.ended {
            // The client went away before the end: its sequences are cancelled by the drop.
            self.metrics.cancelled();
            self.end();
        }
    }
}

fn event(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

/// A `text/event-stream` body: opening chunks, deltas, finish chunks, usage, then `data: [DONE]`.
pub struct SseBody {
    gen: Generation,
    queue: VecDeque<Bytes>,
    include_usage: bool,
    done: bool,
}

impl SseBody {
    /// A stream over `gen`.
    pub fn new(gen: Generation, include_usage: bool) -> Self {
        let queue = gen.asm.start_chunks().iter().map(event).collect();
        Self {
            gen,
            queue,
            include_usage,
            done: false,
        }
    }
}

impl Body for SseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        loop {
            if let Some(b) = this.queue.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(b))));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match this.gen.poll_step(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Step::Chunks(c)) => this.queue.extend(c.iter().map(event)),
                Poll::Ready(Step::Done) => {
                    if this.include_usage {
                        this.queue.push_back(event(&this.gen.asm.usage_chunk()));
                    }
                    this.queue
                        .push_back(Bytes::from_static(b"data: [DONE]\n\n"));
                    this.done = true;
                }
                Poll::Ready(Step::Failed(e)) => {
                    this.queue.push_back(event(&e.body()));
                    this.queue
                        .push_back(Bytes::from_static(b"data: [DONE]\n\n"));
                    this.done = true;
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.queue.is_empty()
    }
}
