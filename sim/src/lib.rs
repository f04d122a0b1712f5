//! # ruccl-sim
//!
//! Everything that lets ruCCL be checked without a GPU:
//!
//! | module            | job                                                                   |
//! |-------------------|-----------------------------------------------------------------------|
//! | [`host`]          | element types, host values, [`HostTensors`] (upload/download)         |
//! | `device`          | [`SimDevice`]: host memory as device memory, strict about the contract |
//! | [`ledger`]        | per-link, per-rank, per-generation traffic and the lower-bound ratio  |
//! | [`cost`]          | the α–β link model that prices a generation                           |
//! | [`fault`]         | [`FaultyDevice`]: injects errors and panics into any device           |
//! | [`conformance`]   | the device conformance suite, generic over any [`HostTensors`]        |
//! | [`perf`]          | the nccl-tests-style sweep and the scenario runner, generic over devices |
//! | [`trace`]         | [`TracingDevice`] and the Chrome trace-event export                   |
//! | [`cli`]           | the `ruccl-sim` command line (the binary is a thin `main`)            |
//!
//! Shared state (the ledger, the fault counters, the suite's queues) goes through
//! [`ruccl_core::sync`], so the simulated and faulty devices run unchanged under loom
//! (`--cfg ruccl_loom`) and shuttle (`--cfg ruccl_shuttle`).

pub mod cli;
pub mod conformance;
pub mod cost;
mod device;
pub mod fault;
pub mod host;
pub mod ledger;
pub mod perf;
mod rng;
pub mod trace;

pub use cost::{LinkModel, LinkModelError};
pub use device::{
    DEFAULT_LEDGER_RETENTION, SimDevice, SimDeviceBuilder, SimError, SimPrepared, SimTensor,
    SimWork,
};
pub use fault::{FaultPlan, FaultSpec, FaultyDevice, FaultyError, FaultyTensor};
pub use host::{ElementType, HostTensors, HostValues};
pub use ledger::{GenerationTraffic, Ledger, StepTraffic};
pub use trace::{Tracer, TracingDevice};
