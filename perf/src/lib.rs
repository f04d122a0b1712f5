//! # ruccl-perf
//!
//! The ruCCL tools, behind one command line, `ruccl-perf`: nccl-tests-style sweeps of every
//! collective (`all-reduce-perf`, `reduce-scatter-perf`, `all-gather-perf`, `broadcast-perf`,
//! `reduce-perf`, `gather-perf`, `scatter-perf`, `alltoall-perf`; any of them through an imported
//! MSCCL schedule with `--schedule`) over every backend — simulated devices by default, CUDA GPUs behind the `cuda` feature (and
//! an NCCL baseline behind `nccl`) — and the fault-scenario runner, with streamed JSON and
//! Chrome-trace export. The only crate of the workspace with clap and serde: the libraries it
//! drives (`ruccl-core`, `ruccl-sim`, `ruccl-cuda`, `ruccl-msccl`) stay free of them.
//!
//! | module          | job                                                                   |
//! |-----------------|-----------------------------------------------------------------------|
//! | [`cli`]         | the command line: one argument struct per kind of command; exit codes |
//! | [`collectives`] | each collective as a small plug-in: names, per-rank counts            |
//! | [`backend`]     | the backends: build the device (out of place, in place), describe it  |
//! | [`sweep`]       | the sweep driver, its rows, table and JSON, nccl-tests' sizes         |
//! | [`scenario`]    | the fault-scenario runner, its fault checks, table and JSON           |
//! | [`memory`]      | what a measurement takes, against what the machine has                |
//! | [`membound`]    | the host-memory bound of a row: copy and fold rates, minimum traffic  |
//! | [`probe`]       | the tools' decorator: traffic of the plan in flight, trace slices     |
//! | [`schedule`]    | imported MSCCL schedules: checked, lowered per size; `verify`, `export` |
//! | [`trace`]       | the Chrome trace-event file, streamed                                 |
//! | [`stop`]        | stopping early: Ctrl-C, a closed output                               |
//! | `nccl`          | (feature `nccl`) the NCCL baseline beside the CUDA backend            |

pub mod backend;
pub mod cli;
pub mod collectives;
pub mod membound;
pub mod memory;
#[cfg(feature = "nccl")]
pub mod nccl;
pub mod probe;
pub mod scenario;
pub mod schedule;
pub mod stop;
pub mod sweep;
pub mod trace;
