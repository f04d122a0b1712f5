//! The `--trace` file: a Chrome trace-event document (Perfetto, ui.perfetto.dev, and
//! `chrome://tracing` open it), **streamed** to the file while the command runs.
//!
//! Events go from the rank threads through a bounded channel to one writer thread that appends
//! them to a buffered file, so a trace of any length takes bounded memory (a full channel makes
//! the ranks wait for the disk). The file is created, and its head written, before anything
//! runs — an unwritable path is refused up front — and [`TraceFile::finish`] closes the
//! document with what happened (`otherData.outcome`: passed, wrong results, failed, interrupted),
//! also when the run failed or was interrupted.
//!
//! One process (`pid` 1), one track per rank (`tid` = rank, named `rank R`; a thread no rank is
//! bound to goes to track `W`); complete events (`"ph": "X"`, microseconds since the command
//! started), which nest by time on a track:
//!
//! | slice                                 | `cat`        | where                                          |
//! |---------------------------------------|--------------|------------------------------------------------|
//! | the collective (`all_reduce`, …)      | `call`       | every rank, the whole call                      |
//! | `wait`                                | `rendezvous` | inside a call, outside the rank's device calls  |
//! | `prepare`                             | `phase`      | every rank                                      |
//! | the algorithm (`ring`, `direct`, …)   | `plan`       | the rank that ran the plan: `begin` … `finish`  |
//! | `begin`, `finish`                     | `phase`      | inside the plan                                 |
//! | `exchange S (combine\|overwrite)`     | `step`       | inside the plan, one per step                   |
//!
//! Every slice's `args` carry the rank's `generation` (its call number, from 0); steps add the
//! elements they moved, device calls whether they succeeded.

use serde::Serialize;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The process id every event carries.
const PID: u32 = 1;

/// Events in flight between the ranks and the writer: the trace's whole memory.
const CHANNEL_EVENTS: usize = 16 * 1024;

/// What a slice is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SliceName {
    /// A rank's whole collective call, named after the collective (`all_reduce`, …).
    Call(&'static str),
    /// Time inside a call outside the rank's own device calls.
    Wait,
    /// `prepare`.
    Prepare,
    /// The plan a rank ran, named after its algorithm (`ring`, `direct`, …).
    Plan(&'static str),
    /// `begin`.
    Begin,
    /// One `exchange`: step `step`, combining or overwriting.
    Exchange {
        /// The step, from 0.
        step: usize,
        /// Whether receivers combined.
        combine: bool,
    },
    /// `finish`.
    Finish,
}

impl SliceName {
    fn category(self) -> &'static str {
        match self {
            SliceName::Call(_) => "call",
            SliceName::Wait => "rendezvous",
            SliceName::Plan(_) => "plan",
            SliceName::Exchange { .. } => "step",
            SliceName::Prepare | SliceName::Begin | SliceName::Finish => "phase",
        }
    }

    fn text(self) -> String {
        match self {
            SliceName::Call(name) | SliceName::Plan(name) => name.to_owned(),
            SliceName::Wait => "wait".to_owned(),
            SliceName::Prepare => "prepare".to_owned(),
            SliceName::Begin => "begin".to_owned(),
            SliceName::Finish => "finish".to_owned(),
            SliceName::Exchange { step, combine } => {
                let kind = if combine { "combine" } else { "overwrite" };
                format!("exchange {step} ({kind})")
            }
        }
    }
}

/// One slice on one rank's track.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slice {
    /// What it is.
    pub name: SliceName,
    /// The track: the rank (or `W` for a thread no rank is bound to).
    pub track: usize,
    /// Since the trace started.
    pub start: Duration,
    /// Since the trace started.
    pub end: Duration,
    /// The rank's generation (call number).
    pub generation: u64,
    /// Whether the call succeeded (`None`: not a call that can fail, such as a wait).
    pub ok: Option<bool>,
    /// Elements moved: by a step over all its transfers, by a plan over its completed steps.
    pub elements: Option<usize>,
}

/// What the writer thread receives.
enum Message {
    Slice(Slice),
    Close(serde_json::Value),
}

/// A handle the rank threads record slices through; clones share the file.
#[derive(Clone, Debug)]
pub struct TraceSink {
    sender: SyncSender<Message>,
    epoch: Instant,
}

impl TraceSink {
    /// Time since the trace started.
    pub fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// Record `slice` (dropped silently if the writer has stopped: [`TraceFile::finish`]
    /// reports why).
    pub fn record(&self, slice: Slice) {
        let _ = self.sender.send(Message::Slice(slice));
    }
}

/// Why a trace file could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the trace to {}: {source}", path.display())]
pub struct TraceError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

/// A trace file being written.
#[derive(Debug)]
pub struct TraceFile {
    path: PathBuf,
    /// Where the document is written until it is complete.
    aside: PathBuf,
    sink: TraceSink,
    writer: JoinHandle<std::io::Result<()>>,
}

impl TraceFile {
    /// Create `path` (replacing it) and write the document's head and the tracks of `world`
    /// ranks; from now on slices stream to it.
    pub fn create(path: &Path, world: usize) -> Result<TraceFile, TraceError> {
        let error = |source| TraceError {
            path: path.to_owned(),
            source,
        };
        // Written aside and renamed into place by `finish`: the file at `path` is never half
        // a document, whatever stops the run.
        let aside = aside(path);
        let file = File::create(&aside).map_err(error)?;
        let mut out = BufWriter::new(file);
        write_head(&mut out, world).map_err(error)?;
        out.flush().map_err(error)?;
        let (sender, receiver) = sync_channel(CHANNEL_EVENTS);
        let writer = std::thread::Builder::new()
            .name("ruccl-perf trace".to_owned())
            .spawn(move || write_events(out, &receiver))
            .map_err(error)?;
        Ok(TraceFile {
            path: path.to_owned(),
            aside,
            sink: TraceSink {
                sender,
                epoch: Instant::now(),
            },
            writer,
        })
    }

    /// The handle to record slices through.
    pub fn sink(&self) -> TraceSink {
        self.sink.clone()
    }

    /// Close the document with `outcome` (what happened, as JSON) in `otherData.outcome`, and
    /// wait until the file is complete. Every slice recorded before is in it.
    pub fn finish(self, outcome: serde_json::Value) -> Result<(), TraceError> {
        let TraceFile {
            path,
            aside,
            sink,
            writer,
        } = self;
        let _ = sink.sender.send(Message::Close(outcome));
        drop(sink);
        let error = |source| TraceError {
            path: path.clone(),
            source,
        };
        match writer.join() {
            Ok(result) => result.map_err(error)?,
            Err(_) => return Err(error(std::io::Error::other("the trace writer panicked"))),
        }
        std::fs::rename(&aside, &path).map_err(error)
    }
}

/// The file a trace for `path` is written in until it is complete: beside it, so renaming
/// stays on one file system.
fn aside(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".partial-{}", std::process::id()));
    PathBuf::from(name)
}

fn write_head(out: &mut impl Write, world: usize) -> std::io::Result<()> {
    out.write_all(b"{\"traceEvents\":[\n")?;
    let mut first = true;
    let mut metadata = |out: &mut dyn Write, value: serde_json::Value| {
        if !first {
            out.write_all(b",\n")?;
        }
        first = false;
        serde_json::to_writer(&mut *out, &value).map_err(std::io::Error::from)
    };
    metadata(
        out,
        serde_json::json!({ "ph": "M", "pid": PID, "tid": 0, "name": "process_name",
                            "args": { "name": "ruccl" } }),
    )?;
    for rank in 0..world {
        metadata(
            out,
            serde_json::json!({ "ph": "M", "pid": PID, "tid": rank, "name": "thread_name",
                                "args": { "name": format!("rank {rank}") } }),
        )?;
        metadata(
            out,
            serde_json::json!({ "ph": "M", "pid": PID, "tid": rank, "name": "thread_sort_index",
                                "args": { "sort_index": rank } }),
        )?;
    }
    Ok(())
}

#[derive(Serialize)]
struct EventJson<'a> {
    name: &'a str,
    cat: &'static str,
    ph: &'static str,
    pid: u32,
    tid: usize,
    ts: f64,
    dur: f64,
    args: ArgsJson,
}

#[derive(Serialize)]
struct ArgsJson {
    generation: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    ok: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    elements: Option<usize>,
}

fn micros(time: Duration) -> f64 {
    time.as_nanos() as f64 / 1000.0
}

/// The writer thread: every slice as it comes, then the tail.
fn write_events(mut out: BufWriter<File>, receiver: &Receiver<Message>) -> std::io::Result<()> {
    let mut outcome = serde_json::json!({ "status": "unknown" });
    for message in receiver {
        match message {
            Message::Slice(slice) => {
                let name = slice.name.text();
                let event = EventJson {
                    name: &name,
                    cat: slice.name.category(),
                    ph: "X",
                    pid: PID,
                    tid: slice.track,
                    ts: micros(slice.start),
                    dur: micros(slice.end.saturating_sub(slice.start)),
                    args: ArgsJson {
                        generation: slice.generation,
                        ok: slice.ok,
                        elements: slice.elements,
                    },
                };
                out.write_all(b",\n")?;
                serde_json::to_writer(&mut out, &event)?;
            }
            Message::Close(value) => {
                outcome = value;
                break;
            }
        }
    }
    out.write_all(b"\n],\"displayTimeUnit\":\"ns\",\"otherData\":")?;
    serde_json::to_writer(
        &mut out,
        &serde_json::json!({ "producer": "ruccl-perf", "outcome": outcome }),
    )?;
    out.write_all(b"}\n")?;
    out.flush()
}
