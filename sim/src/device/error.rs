//! [`SimError`]: every way a caller can break the executor contract of the simulated device.

use crate::host::ElementType;
use ruccl_core::{Collective, DeviceId, ReduceOperation};

/// A violation of the executor contract, detected by [`SimDevice`](crate::SimDevice). The device
/// checks before it changes anything, so a call that fails leaves its work as it was.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// `prepare` (or `upload`-then-`prepare`) was given a tensor that lives on another device.
    #[error("prepare on {expected}: the tensor lives on {actual}")]
    TensorOnWrongDevice {
        /// The device named in the call.
        expected: DeviceId,
        /// The device whose memory holds the tensor.
        actual: DeviceId,
    },
    /// `begin` was called with no ranks.
    #[error("begin with an empty world: at least one rank is needed")]
    EmptyWorld,
    /// `begin` got a different number of devices, inputs and plan ranks.
    #[error("begin with {devices} devices and {inputs} inputs for a plan of {planned} ranks")]
    InputCount {
        /// `devices.len()`.
        devices: usize,
        /// `inputs.len()`.
        inputs: usize,
        /// `plan.world()`.
        planned: usize,
    },
    /// A rank's input lives on another device than the rank's own.
    #[error("rank {rank}'s input lives on {actual}, but the rank's device is {expected}")]
    RankOnWrongDevice {
        /// The rank.
        rank: usize,
        /// `devices[rank]`.
        expected: DeviceId,
        /// Where the input lives.
        actual: DeviceId,
    },
    /// A rank's input has another length than the plan's input length.
    #[error("rank {rank}'s input has {actual} elements, the plan is for {expected}")]
    LengthMismatch {
        /// The rank.
        rank: usize,
        /// `plan.input_len()`.
        expected: usize,
        /// This rank's length.
        actual: usize,
    },
    /// A rank's input has another element type than rank 0's.
    #[error("rank {rank}'s input holds {actual} elements, rank 0's holds {expected}")]
    ElementTypeMismatch {
        /// The rank.
        rank: usize,
        /// Rank 0's element type.
        expected: ElementType,
        /// This rank's element type.
        actual: ElementType,
    },
    /// The device was configured not to support this operation on this element type.
    #[error("reduce operation {operation} is not supported on {element_type} elements")]
    UnsupportedOperation {
        /// The operation asked for.
        operation: ReduceOperation,
        /// The inputs' element type.
        element_type: ElementType,
    },
    /// The inputs hold an element type this device does not know (a type added to the core
    /// after this crate).
    #[error("{0} elements are not supported by the simulated device")]
    UnsupportedType(ElementType),
    /// A plan's layout does not fit its own buffers (a rank's input or output outside them).
    #[error(
        "the plan places rank {rank}'s {what} at {start}..{end}, outside its buffer of {buffer_len} elements"
    )]
    LayoutOutOfBounds {
        /// The rank.
        rank: usize,
        /// `input` or `output`.
        what: &'static str,
        /// Where it starts.
        start: usize,
        /// Where it ends.
        end: usize,
        /// The plan's buffer length.
        buffer_len: usize,
    },
    /// A step breaks one of the contract's rules for a step (the core's statement of them).
    #[error("{0}")]
    Step(#[from] ruccl_core::StepViolation),
    /// `finish` was given another plan than `begin`.
    #[error(
        "finish with a plan for {finished} on {finished_world} ranks, but the generation began {begun} on {begun_world}"
    )]
    PlanChanged {
        /// The collective given to `begin`.
        begun: Collective,
        /// The world of the plan given to `begin`.
        begun_world: usize,
        /// The collective given to `finish`.
        finished: Collective,
        /// The world of the plan given to `finish`.
        finished_world: usize,
    },
}
