//! [`SimError`]: every way a caller can break the executor contract of the simulated device.

use crate::host::ElementType;
use ruccl_core::{DeviceId, ReduceOperation};

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
    /// `begin` got a different number of devices and inputs.
    #[error("begin with {devices} devices but {inputs} inputs")]
    InputCount {
        /// `devices.len()`.
        devices: usize,
        /// `inputs.len()`.
        inputs: usize,
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
    /// A rank's input has another length than rank 0's.
    #[error("rank {rank}'s input has {actual} elements, rank 0's has {expected}")]
    LengthMismatch {
        /// The rank.
        rank: usize,
        /// Rank 0's length.
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
    /// `exchange` got a different number of ranges than there are ranks.
    #[error("exchange with {ranges} ranges for a world of {world} ranks")]
    RangeCount {
        /// `ranges.len()`.
        ranges: usize,
        /// The world size given to `begin`.
        world: usize,
    },
    /// A range starts after it ends.
    #[error("rank {rank}'s range {start}..{end} starts after it ends")]
    InvertedRange {
        /// The sending rank.
        rank: usize,
        /// The range's start.
        start: usize,
        /// The range's end.
        end: usize,
    },
    /// A range reaches past the end of the tensors.
    #[error("rank {rank}'s range {start}..{end} is out of bounds for {length} elements")]
    RangeOutOfBounds {
        /// The sending rank.
        rank: usize,
        /// The range's start.
        start: usize,
        /// The range's end.
        end: usize,
        /// The tensors' length.
        length: usize,
    },
    /// The ranges of one step differ in length by more than one (a balanced schedule never does;
    /// checked unless disabled with [`SimDeviceBuilder::balanced_steps`](crate::SimDeviceBuilder::balanced_steps)).
    #[error(
        "unbalanced step: rank {short_rank} sends {short} elements but rank {long_rank} sends {long}"
    )]
    UnbalancedStep {
        /// A rank sending the fewest elements.
        short_rank: usize,
        /// Its range's length.
        short: usize,
        /// A rank sending the most elements.
        long_rank: usize,
        /// Its range's length.
        long: usize,
    },
    /// `finish` was asked for another operation than `begin`.
    #[error("finish with {finished}, but the generation began with {begun}")]
    OperationChanged {
        /// The operation given to `begin`.
        begun: ReduceOperation,
        /// The operation given to `finish`.
        finished: ReduceOperation,
    },
}
