//! MSCCL XML schedules for ruCCL: [`parse`] one, [`check`](Program::check) it under MSCCL's
//! own asynchronous semantics, [`lower`](Program::lower) it to a ruCCL plan, [`export`] a plan.
//!
//! MSCCL's executors (microsoft/msccl, Azure/msccl-executor-nccl, ROCm/rccl) run an `<algo>`
//! as threadblocks that each execute their steps in order, wait for each other through
//! `depid`/`deps`, and exchange chunks over first-in first-out connections. A schedule that
//! deadlocks, races or computes the wrong thing does so on hardware, silently or not; `check`
//! decides it for every execution the executors allow and names the step that goes wrong.
//!
//! | file        | job                                                                 |
//! |-------------|---------------------------------------------------------------------|
//! | `program.rs`| [`Program`] and its parts: the file as written                      |
//! | `parse.rs`  | [`parse`]: XML to [`Program`], bounded, with positions              |
//! | `check/`    | [`Program::check`]: [`Report`] or [`Violation`]                     |
//! | `lower/`    | [`Program::lower`]: a [`PlanParts`](ruccl_core::PlanParts)           |
//! | `export.rs` | [`export`]: a [`Plan`](ruccl_core::Plan) as MSCCL XML               |
//! | `error.rs`  | [`MscclError`]                                                       |
//!
//! The crate's README tells how the format reads, from the executors' sources, and the
//! verdicts on the published schedules.

mod check;
mod error;
mod export;
mod lower;
mod parse;
mod program;

pub use check::{Agreement, Outcome, Report, StepRef, Violation, ViolationKind};
pub use error::MscclError;
pub use export::export;
pub use lower::{LowerOptions, Lowered};
pub use parse::{MAX_BYTES, MAX_CELLS, MAX_CLOCKS, MAX_NODES, MAX_WORLD, parse};
pub use program::{
    Buffer, Gpu, Mode, MscclCollective, Operand, Position, Program, Protocol, Step, StepKind,
    Threadblock,
};
