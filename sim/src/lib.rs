//! # ruccl-sim
//!
//! The simulation harness: everything that lets ruCCL be checked without a GPU. A library with
//! no command line (the tools are `ruccl-perf`'s).
//!
//! | module            | job                                                                   |
//! |-------------------|-----------------------------------------------------------------------|
//! | [`host`]          | host values and [`HostTensors`] (upload/download for harnesses)       |
//! | `device`          | [`SimDevice`]: host memory as device memory, strict about the contract; its [`Census`] of live values |
//! | [`ledger`]        | per-link, per-rank, per-generation traffic and the lower-bound ratio  |
//! | [`cost`]          | the α–β link model that prices a generation                           |
//! | [`intercept`]     | [`Intercepted`]: the one shape of a pass-through decorator            |
//! | [`fault`]         | [`FaultyDevice`], its plans, the outcome predictor, the fault trial   |
//! | [`conformance`]   | the device conformance suite, its [plan interpreter](mod@conformance::interpret) (bit for bit) and [exact reference](mod@conformance::reference) (within a tolerance) |
//! | [`pattern`]       | the perf check: inputs reduced exactly in every type, `#wrong`        |
//! | [`trace`]         | [`TracingDevice`] and its in-memory timeline                          |
//! | [`contain`]       | harness calls into a device, errors and panics contained              |
//! | `watchdog`        | tests' deadlines on real threads: fail fast naming the ranks stuck (not under the checkers) |
//!
//! Shared state (the ledger, the census, the fault counters, the suite's queues) goes through
//! [`ruccl_core::sync`], so the simulated and faulty devices run unchanged under loom
//! (`--cfg ruccl_loom`) and shuttle (`--cfg ruccl_shuttle`).
//!
//! ## Checking that nothing leaked
//!
//! Every tensor, prepared input and work a [`SimDevice`] makes is counted until it is dropped
//! (DESIGN property 9). After a scenario, with every thread joined:
//!
//! ```
//! # let device = ruccl_sim::SimDevice::new();
//! device.check_quiescent()?; // Err names how many tensors, prepared inputs and works are live
//! let census = device.census(); // or read the counts: live, created, double drops
//! assert_eq!(census.live.total(), 0);
//! # Ok::<(), ruccl_sim::NotQuiescent>(())
//! ```
//!
//! Clones of a device share its census; a [`FaultyDevice`] or an [`Intercepted`] device reaches
//! it through `inner()`. Tensors made outside the device ([`SimTensor::new`]) are not counted.

pub mod conformance;
pub mod contain;
pub mod cost;
mod device;
pub mod fault;
pub mod host;
pub mod intercept;
pub mod ledger;
pub mod pattern;
mod rng;
pub mod trace;
#[cfg(not(any(ruccl_loom, ruccl_shuttle)))]
pub mod watchdog;

pub use cost::{LinkModel, LinkModelError, Links};
pub use device::{
    Census, DEFAULT_LEDGER_RETENTION, DEFAULT_POOL_BYTES, DoubleDrop, NotQuiescent, SimDevice,
    SimDeviceBuilder, SimError, SimPrepared, SimTensor, SimWork, ValueCounts, ValueKind,
};
pub use fault::{FaultPlan, FaultSpec, FaultyDevice, FaultyError, FaultyTensor};
pub use host::{ElementType, HostTensors, HostValues};
pub use intercept::{Intercept, Intercepted, InterceptedWork};
pub use ledger::{GenerationTraffic, Ledger, LedgerPause, LinkTraffic, StepTraffic};
pub use trace::{Tracer, TracingDevice};
