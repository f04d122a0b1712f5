//! # ruccl-core
//!
//! The verified core of ruCCL: an in-process collective-communication rendezvous for several
//! devices driven from one process, one thread per device ("rank").
//!
//! Each rank calls a collective — [`NativeCommunicator::all_reduce`], `reduce_scatter`,
//! `all_gather`, `broadcast`, or the general `collective` — on a shared communicator. The last
//! rank to arrive checks that every rank asked for the same thing with tensors of the same shape,
//! resolves the generation's [`Plan`] (a [`verify`]-checked schedule of [`Step`]s, each a set of
//! device-to-device [`Transfer`]s), and runs it through a [`NativeCollectiveDevice`] executor
//! without holding the state lock. Every rank then receives its own output or, if anything failed
//! on any rank, the same [`NativeCollectiveError`]. The communicator is reused generation after
//! generation.
//!
//! The code here is model-checked as shipped: every lock, condition variable, atomic and thread
//! comes from the [`sync`] facade, which resolves to loom under `--cfg ruccl_loom` and to shuttle
//! under `--cfg ruccl_shuttle`.
//!
//! | module          | job                                                              |
//! |-----------------|------------------------------------------------------------------|
//! | `device`        | [`DeviceId`], [`ReduceOperation`], [`TensorInfo`], the executor trait |
//! | `element`       | [`ElementType`]                                                  |
//! | `collective`    | [`Collective`], [`Algorithm`], [`CollectiveOptions`]             |
//! | `plan`          | [`Plan`], [`Step`], [`Transfer`]: layouts and every algorithm    |
//! | `verify`        | [`verify`], the symbolic schedule checker                        |
//! | `cost`          | [`LinkModel`], the α–β model that resolves `Auto`                |
//! | `chunks`        | [`balanced_ranges`]                                              |
//! | `rendezvous`    | [`NativeCommunicator`]: agreement, state machine, waiting, abort |
//! | `registry`      | [`NativeCommunicators`]: one communicator per device list         |
//! | `run`           | drives one generation's plan on the device                       |
//! | `contain`       | turns device errors and panics into typed errors                 |
//! | `error`         | [`NativeCollectiveError`] and [`Phase`]                          |
//! | [`sync`]        | the std / loom / shuttle facade                                  |

mod chunks;
mod collective;
mod contain;
mod cost;
mod device;
mod element;
mod error;
mod plan;
mod registry;
mod rendezvous;
mod run;
pub mod sync;
mod verify;

pub use chunks::balanced_ranges;
pub use collective::{Algorithm, Collective, CollectiveOptions, ParseAlgorithmError};
pub use cost::{LinkModel, LinkModelError, Links};
pub use device::{
    DeviceId, NativeCollectiveDevice, ParseReduceOperationError, ReduceOperation, TensorInfo,
};
pub use element::{ElementType, ParseElementTypeError};
pub use error::{NativeCollectiveError, Phase};
pub use plan::{Plan, PlanParts, Step, Transfer};
pub use registry::NativeCommunicators;
pub use rendezvous::NativeCommunicator;
pub use verify::{ScheduleViolation, verify};
