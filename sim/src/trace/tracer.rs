//! [`Tracer`]: a timestamped log of device calls and rank calls, shared by a
//! [`TracingDevice`](super::TracingDevice) and the harness that drives it.

use ruccl_core::sync::{Arc, Mutex};
use std::collections::HashMap;
use std::fmt;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// What a [`Span`] covers.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpanKind {
    /// A rank's whole collective call, recorded by the harness.
    Call {
        /// The generation (the rank's call number, counted from 0).
        generation: u64,
    },
    /// `prepare`, on the rank's own thread.
    Prepare,
    /// `begin`, on the thread that runs the plan.
    Begin {
        /// The number of ranks.
        world: usize,
        /// Elements of each rank's working buffer.
        elements: usize,
    },
    /// One `exchange`: a step of the plan.
    Exchange {
        /// The step, counted from 0 per generation.
        step: usize,
        /// Whether receivers combined or overwrote.
        combine: bool,
        /// Elements sent over all links.
        elements: usize,
        /// Elements sent over the busiest link.
        busiest: usize,
    },
    /// `finish`.
    Finish,
}

impl SpanKind {
    /// The slice name a trace viewer shows.
    pub fn name(&self) -> String {
        match self {
            SpanKind::Call { .. } => "collective".to_owned(),
            SpanKind::Prepare => "prepare".to_owned(),
            SpanKind::Begin { .. } => "begin".to_owned(),
            SpanKind::Exchange { step, combine, .. } => {
                format!("exchange {step} ({})", step_name(*combine))
            }
            SpanKind::Finish => "finish".to_owned(),
        }
    }

    /// Whether this is a device call (not a rank's whole call).
    pub fn is_device_call(&self) -> bool {
        !matches!(self, SpanKind::Call { .. })
    }
}

/// What a step with this `combine` flag does: `combine` or `overwrite`.
pub fn step_name(combine: bool) -> &'static str {
    if combine { "combine" } else { "overwrite" }
}

/// One timed interval on one rank's thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// The rank whose thread it ran on; `None` for a thread no rank was bound to.
    pub rank: Option<usize>,
    /// What it covers.
    pub kind: SpanKind,
    /// Since the tracer was created.
    pub start: Duration,
    /// Since the tracer was created.
    pub end: Duration,
    /// `false` if the call returned an error or panicked.
    pub ok: bool,
}

/// The shared log.
struct Shared {
    epoch: Instant,
    log: Mutex<Log>,
}

#[derive(Default)]
struct Log {
    spans: Vec<Span>,
    /// Which rank each known thread serves.
    ranks: HashMap<ThreadId, usize>,
}

/// A log of [`Span`]s; clones share it. Recording takes a lock, so tracing slows the traced run
/// down slightly (about a microsecond per span).
#[derive(Clone)]
pub struct Tracer {
    shared: Arc<Shared>,
}

impl Default for Tracer {
    fn default() -> Self {
        Self::new()
    }
}

impl Tracer {
    /// An empty log whose clock starts now.
    pub fn new() -> Self {
        Self {
            shared: Arc::new(Shared {
                epoch: Instant::now(),
                log: Mutex::new(Log::default()),
            }),
        }
    }

    /// Time since the tracer was created.
    pub fn now(&self) -> Duration {
        self.shared.epoch.elapsed()
    }

    /// Declare the calling thread to be rank `rank`'s: device calls it makes are put on that
    /// rank's track. ([`TracingDevice`](super::TracingDevice)'s `prepare` does this too.)
    pub fn bind_current_thread(&self, rank: usize) {
        let thread = std::thread::current().id();
        self.shared.log.lock().ranks.insert(thread, rank);
    }

    /// Record a span of the calling thread's rank.
    pub fn record(&self, kind: SpanKind, start: Duration, end: Duration, ok: bool) {
        let thread = std::thread::current().id();
        let mut log = self.shared.log.lock();
        let rank = log.ranks.get(&thread).copied();
        log.spans.push(Span {
            rank,
            kind,
            start,
            end,
            ok,
        });
    }

    /// Record rank `rank`'s whole collective call of `generation`.
    pub fn record_call(
        &self,
        rank: usize,
        generation: u64,
        start: Duration,
        end: Duration,
        ok: bool,
    ) {
        self.shared.log.lock().spans.push(Span {
            rank: Some(rank),
            kind: SpanKind::Call { generation },
            start,
            end,
            ok,
        });
    }

    /// A span of the calling thread that is recorded when the returned guard finishes — or, if
    /// the call unwinds first, when it is dropped, as failed.
    pub fn start(&self, kind: SpanKind) -> SpanGuard<'_> {
        SpanGuard {
            tracer: self,
            kind: Some(kind),
            start: self.now(),
        }
    }

    /// Every span so far, in the order recorded.
    pub fn spans(&self) -> Vec<Span> {
        self.shared.log.lock().spans.clone()
    }

    /// Forget every span (thread bindings are kept).
    pub fn clear(&self) {
        self.shared.log.lock().spans.clear();
    }
}

impl fmt::Debug for Tracer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tracer")
            .field("spans", &self.shared.log.lock().spans.len())
            .finish()
    }
}

/// A span being timed; see [`Tracer::start`].
pub struct SpanGuard<'a> {
    tracer: &'a Tracer,
    /// `None` once recorded.
    kind: Option<SpanKind>,
    start: Duration,
}

impl SpanGuard<'_> {
    /// Record the span now, replacing its kind (to add what was learned during the call).
    pub fn finish_as(mut self, kind: SpanKind, ok: bool) {
        self.kind = None;
        self.tracer.record(kind, self.start, self.tracer.now(), ok);
    }

    /// Record the span now.
    pub fn finish(mut self, ok: bool) {
        if let Some(kind) = self.kind.take() {
            self.tracer.record(kind, self.start, self.tracer.now(), ok);
        }
    }
}

impl Drop for SpanGuard<'_> {
    fn drop(&mut self) {
        if let Some(kind) = self.kind.take() {
            self.tracer
                .record(kind, self.start, self.tracer.now(), false);
        }
    }
}
