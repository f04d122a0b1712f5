//! Tracing: when each rank called, waited, prepared, and ran which step of the plan, kept in memory
//! (the perf tool, `ruccl-perf`, exports it as a Chrome trace-event file for Perfetto).
//!
//! | file           | job                                                                  |
//! |----------------|----------------------------------------------------------------------|
//! | `tracer.rs`    | [`Tracer`]: the shared, timestamped log of [`Span`]s                  |
//! | `device.rs`    | [`TracingDevice`]: times every call of any device, without changing it |
//! | `timeline.rs`  | [`CallTimeline`]: device calls grouped per rank call, rendezvous waits |
//!
//! Nothing in the core is instrumented. The harness records each rank's collective call
//! ([`Tracer::record_call`]); the decorator records the device calls on the track of the rank
//! whose thread makes them — `prepare` on every rank, the plan on the last to arrive. A rank's
//! rendezvous wait is the time inside its call not spent in its own device calls.

mod device;
mod timeline;
mod tracer;

pub use device::{TracedWork, Tracing, TracingDevice};
pub use timeline::{CallTimeline, timelines};
pub use tracer::{Span, SpanGuard, SpanKind, Tracer, step_name};
