//! Export of a [`Tracer`]'s spans (the sim crate's in-memory timeline) to the Chrome trace-event
//! format (JSON), which Perfetto (ui.perfetto.dev) and `chrome://tracing` open.
//!
//! One process (`pid` 1), one track per rank (`tid` = rank, named `rank R`); complete events
//! (`"ph": "X"`, times in microseconds since the tracer started) nest by time on a track:
//!
//! | slice                                  | `cat`        | where                                      |
//! |----------------------------------------|--------------|--------------------------------------------|
//! | `all_reduce`                           | `call`       | every rank, the whole call                  |
//! | `wait`                                 | `rendezvous` | inside a call, outside the rank's device calls |
//! | `prepare`                              | `phase`      | every rank                                  |
//! | `ring`                                 | `ring`       | the rank that ran the ring: `begin` … `finish` |
//! | `begin`, `finish`                      | `phase`      | inside `ring`                               |
//! | `exchange S (reduce-scatter\|all-gather)` | `step`    | inside `ring`, one per ring step            |
//!
//! Every slice's `args` carry the `generation`; steps add their elements, device calls whether
//! they succeeded. Device calls made outside any recorded rank call keep their rank's track
//! (unbound threads go to track `W`).

use ruccl_sim::trace::{CallTimeline, Span, SpanKind, Tracer, phase_name, timelines};
use serde_json::{Value, json};
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

/// The process id every event carries.
const PID: u32 = 1;

/// Write `tracer`'s spans for `world` ranks to `path` as a Chrome trace-event file.
pub fn write_trace(path: &Path, tracer: &Tracer, world: usize) -> std::io::Result<()> {
    let file = std::fs::File::create(path)?;
    let mut writer = std::io::BufWriter::new(file);
    serde_json::to_writer(&mut writer, &chrome_trace(&tracer.spans(), world))?;
    writer.flush()
}

/// The trace of `spans` for `world` ranks, as one JSON document.
pub fn chrome_trace(spans: &[Span], world: usize) -> Value {
    let (calls, loose) = timelines(spans);
    let mut events = metadata(world);
    for call in &calls {
        call_events(call, &mut events);
    }
    for span in &loose {
        events.push(device_event(span, span.rank.unwrap_or(world), None));
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": { "producer": "ruccl-perf", "world": world },
    })
}

fn metadata(world: usize) -> Vec<Value> {
    let mut events = vec![json!({
        "ph": "M", "pid": PID, "tid": 0, "name": "process_name",
        "args": { "name": "ruccl" },
    })];
    for rank in 0..world {
        events.push(json!({
            "ph": "M", "pid": PID, "tid": rank, "name": "thread_name",
            "args": { "name": format!("rank {rank}") },
        }));
        events.push(json!({
            "ph": "M", "pid": PID, "tid": rank, "name": "thread_sort_index",
            "args": { "sort_index": rank },
        }));
    }
    events
}

fn micros(time: Duration) -> f64 {
    time.as_nanos() as f64 / 1000.0
}

fn slice(
    name: &str,
    category: &str,
    tid: usize,
    start: Duration,
    end: Duration,
    args: Value,
) -> Value {
    json!({
        "name": name,
        "cat": category,
        "ph": "X",
        "pid": PID,
        "tid": tid,
        "ts": micros(start),
        "dur": micros(end.saturating_sub(start)),
        "args": args,
    })
}

fn call_events(call: &CallTimeline, events: &mut Vec<Value>) {
    let generation = call.generation;
    events.push(slice(
        "all_reduce",
        "call",
        call.rank,
        call.start,
        call.end,
        json!({ "generation": generation, "ok": call.ok, "ran_ring": call.ran_ring() }),
    ));
    for (start, end) in call.waits() {
        events.push(slice(
            "wait",
            "rendezvous",
            call.rank,
            start,
            end,
            json!({ "generation": generation }),
        ));
    }
    if let Some((start, end)) = call.ring() {
        events.push(slice(
            "ring",
            "ring",
            call.rank,
            start,
            end,
            json!({ "generation": generation, "moved": call.moved() }),
        ));
    }
    for span in &call.device_calls {
        events.push(device_event(span, call.rank, Some(generation)));
    }
}

fn device_event(span: &Span, tid: usize, generation: Option<u64>) -> Value {
    let (category, args) = match &span.kind {
        SpanKind::Exchange {
            step,
            reduce,
            elements,
            busiest,
        } => (
            "step",
            json!({
                "generation": generation, "ok": span.ok, "step": step,
                "phase": phase_name(*reduce), "elements": elements,
                "busiest_link_elements": busiest,
            }),
        ),
        SpanKind::Begin { world, elements } => (
            "phase",
            json!({ "generation": generation, "ok": span.ok, "world": world, "elements": elements }),
        ),
        _ => ("phase", json!({ "generation": generation, "ok": span.ok })),
    };
    slice(&span.kind.name(), category, tid, span.start, span.end, args)
}
