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
//! ## Use it as a library
//!
//! Implement [`NativeCollectiveDevice`] for your device (below, a hidden host-memory one; the
//! `host_memory` example spells one out), create one communicator over the ranks' devices, and
//! call collectives from one thread per rank:
//!
//! ```
//! # use ruccl_core::{DeviceId, ElementType, NativeCollectiveDevice, Plan, Step, TensorInfo};
//! # use std::collections::BTreeMap;
//! # #[derive(Clone)] struct HostMemory;
//! # struct Work { buffers: Vec<Vec<f64>>, devices: Vec<DeviceId> }
//! # #[derive(Debug, thiserror::Error)] #[error("host device")] struct Never;
//! # impl NativeCollectiveDevice for HostMemory {
//! #     type Tensor = (DeviceId, Vec<f64>);
//! #     type Prepared = (DeviceId, Vec<f64>);
//! #     type Work = Work;
//! #     type Error = Never;
//! #     fn prepare(&self, t: Self::Tensor, _: DeviceId) -> Result<Self::Tensor, Never> { Ok(t) }
//! #     fn describe(&self, t: &Self::Tensor) -> TensorInfo {
//! #         TensorInfo { len: t.1.len(), element: ElementType::F64 }
//! #     }
//! #     fn begin(&self, d: &[DeviceId], inputs: Vec<Self::Tensor>, plan: &Plan) -> Result<Work, Never> {
//! #         let buffers = inputs.into_iter().enumerate().map(|(r, (_, v))| {
//! #             let mut b = vec![0.0; plan.buffer_len()];
//! #             b[plan.placement(r)..plan.placement(r) + v.len()].copy_from_slice(&v);
//! #             b
//! #         }).collect();
//! #         Ok(Work { buffers, devices: d.to_vec() })
//! #     }
//! #     fn exchange(&self, w: &mut Work, step: &Step) -> Result<(), Never> {
//! #         let before = w.buffers.clone();
//! #         let mut got: BTreeMap<(usize, usize), BTreeMap<usize, f64>> = BTreeMap::new();
//! #         for t in &step.transfers { for e in t.range.clone() {
//! #             got.entry((t.to, e)).or_default().insert(t.from, before[t.from][e]);
//! #         } }
//! #         for ((to, e), mut v) in got {
//! #             if step.combine { v.insert(to, before[to][e]); }
//! #             w.buffers[to][e] = if step.combine { v.values().sum() } else { v[v.keys().next().unwrap()] };
//! #         }
//! #         Ok(())
//! #     }
//! #     fn finish(&self, w: Work, plan: &Plan) -> Result<Vec<Self::Tensor>, Never> {
//! #         Ok(w.buffers.into_iter().zip(w.devices).enumerate()
//! #             .map(|(r, (b, d))| (d, b[plan.output(r)].to_vec())).collect())
//! #     }
//! # }
//! use ruccl_core::{NativeCollectiveError, NativeCommunicator, ReduceOperation};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! let devices: Vec<DeviceId> = (0..3).map(DeviceId::new).collect();
//! let communicator = Arc::new(NativeCommunicator::new(devices.clone(), HostMemory)?);
//! let ranks: Vec<_> = (0..3)
//!     .map(|rank| {
//!         let communicator = Arc::clone(&communicator);
//!         let tensor = (devices[rank], vec![rank as f64; 4]);
//!         std::thread::spawn(move || communicator.all_reduce(rank, tensor, ReduceOperation::Sum))
//!     })
//!     .collect();
//! for rank in ranks {
//!     assert_eq!(rank.join().unwrap()?.1, vec![3.0; 4]); // 0 + 1 + 2, on every rank
//! }
//!
//! // A rank that waits too long aborts the communicator, naming who never came; every later
//! // call gets the same error.
//! let alone = communicator.all_reduce_timeout(
//!     0, (devices[0], vec![1.0]), ReduceOperation::Sum, Duration::from_millis(10));
//! assert!(matches!(alone, Err(NativeCollectiveError::TimedOut { ref missing, .. }) if missing == &[1, 2]));
//! assert!(communicator.is_aborted());
//! # Ok::<(), NativeCollectiveError>(())
//! ```
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
pub use plan::{
    Clique, Operand, Piece, Plan, PlanParts, Source, Step, StepLayout, StepViolation,
    TRAFFIC_BOUND, Transfer, Write, WriteKind,
};
pub use registry::NativeCommunicators;
pub use rendezvous::{NativeCommunicator, WaitStats};
pub use verify::{ScheduleViolation, verify};
