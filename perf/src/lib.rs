//! # ruccl-perf
//!
//! The ruCCL tools, behind one command line, `ruccl-perf`: an nccl-tests-style all-reduce sweep
//! over every backend — simulated devices by default, CUDA GPUs behind the `cuda` feature (and
//! an NCCL baseline behind `nccl`) — and the fault-scenario runner, with JSON and Chrome-trace
//! export. The only crate of the workspace with clap and serde: the libraries it drives
//! (`ruccl-core`, `ruccl-sim`, `ruccl-cuda`) stay free of them.
//!
//! | module        | job                                                                      |
//! |---------------|--------------------------------------------------------------------------|
//! | [`cli`]       | the command line: one argument struct per command, for every backend     |
//! | [`backend`]   | the backends: build the device for a world, describe it                   |
//! | [`sweep`]     | the sweep driver, its rows, table and JSON, nccl-tests' sizes             |
//! | [`scenario`]  | the fault-scenario runner, its table and JSON                             |
//! | [`trace`]     | Chrome trace-event export of the sim crate's tracer                       |
//! | `nccl`        | (feature `nccl`) the NCCL baseline beside the CUDA backend                |

pub mod backend;
pub mod cli;
#[cfg(feature = "nccl")]
pub mod nccl;
pub mod scenario;
pub mod sweep;
pub mod trace;
