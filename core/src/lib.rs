//! # ruccl-core
//!
//! The verified core of ruCCL: an in-process collective-communication rendezvous for several
//! devices driven from one process, one thread per device ("rank").
//!
//! Each rank calls [`NativeCommunicator::all_reduce`] on a shared communicator. The last rank to
//! arrive runs a ring all-reduce — reduce-scatter, then all-gather, over
//! [`balanced_ranges`] — through a [`NativeCollectiveDevice`] executor, without holding the state
//! lock. Every rank then receives its own output or, if anything failed on any rank, the same
//! [`NativeCollectiveError`]. The communicator is reused generation after generation.
//!
//! The code here is model-checked as shipped: every lock, condition variable, atomic and thread
//! comes from the [`sync`] facade, which resolves to loom under `--cfg ruccl_loom` and to shuttle
//! under `--cfg ruccl_shuttle`.
//!
//! | module          | job                                                          |
//! |-----------------|--------------------------------------------------------------|
//! | `device`        | [`DeviceId`], [`ReduceOperation`], the executor trait        |
//! | `schedule`      | [`balanced_ranges`] and the [`RingSchedule`] as data          |
//! | `rendezvous`    | [`NativeCommunicator`]: state machine, waiting, abort         |
//! | `registry`      | [`NativeCommunicators`]: one communicator per device list     |
//! | `ring`          | drives one generation's schedule on the device                |
//! | `contain`       | turns device errors and panics into typed errors              |
//! | `error`         | [`NativeCollectiveError`] and [`Phase`]                       |
//! | [`sync`]        | the std / loom / shuttle facade                               |

mod contain;
mod device;
mod element;
mod error;
mod registry;
mod rendezvous;
mod ring;
mod schedule;
pub mod sync;

pub use device::{DeviceId, NativeCollectiveDevice, ParseReduceOperationError, ReduceOperation};
pub use element::{ElementType, ParseElementTypeError};
pub use error::{NativeCollectiveError, Phase};
pub use registry::NativeCommunicators;
pub use rendezvous::NativeCommunicator;
pub use schedule::{RingPhase, RingSchedule, RingStep, balanced_ranges};
