//! The device side of the contract: device identities, reduce operations, and the executor trait
//! that a backend (simulated host memory, CUDA) implements.

use crate::{ElementType, LinkModel, Plan, Step};
use std::fmt;
use std::str::FromStr;

/// One device (one rank's GPU, or a logical device) in a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeviceId(u32);

impl DeviceId {
    /// The device with this index.
    pub const fn new(index: u32) -> Self {
        Self(index)
    }

    /// The device's index.
    pub const fn index(self) -> u32 {
        self.0
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device {}", self.0)
    }
}

impl From<u32> for DeviceId {
    fn from(index: u32) -> Self {
        Self(index)
    }
}

/// How the ranks' tensors are combined, element by element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOperation {
    /// The sum of all ranks' elements.
    Sum,
    /// The sum, then scaled by `1 / world` in `finish` (NCCL's `avg`).
    Mean,
    /// The product of all ranks' elements.
    Product,
    /// The smallest element.
    Min,
    /// The largest element.
    Max,
}

impl ReduceOperation {
    /// Every operation, in declaration order.
    pub const ALL: [ReduceOperation; 5] = [
        ReduceOperation::Sum,
        ReduceOperation::Mean,
        ReduceOperation::Product,
        ReduceOperation::Min,
        ReduceOperation::Max,
    ];

    /// The short name nccl-tests uses: `sum`, `avg`, `prod`, `min`, `max`.
    pub const fn nccl_name(self) -> &'static str {
        match self {
            ReduceOperation::Sum => "sum",
            ReduceOperation::Mean => "avg",
            ReduceOperation::Product => "prod",
            ReduceOperation::Min => "min",
            ReduceOperation::Max => "max",
        }
    }

    /// The operation a combining step folds with: `Mean` folds as `Sum` and is scaled once at
    /// the end.
    pub const fn combining(self) -> ReduceOperation {
        match self {
            ReduceOperation::Mean => ReduceOperation::Sum,
            other => other,
        }
    }
}

impl fmt::Display for ReduceOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.nccl_name())
    }
}

/// A string that names no [`ReduceOperation`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown reduce operation `{0}`: expected one of sum, avg (mean), prod (product), min, max"
)]
pub struct ParseReduceOperationError(pub String);

impl FromStr for ReduceOperation {
    type Err = ParseReduceOperationError;

    /// Accepts nccl-tests' names (`sum`, `avg`, `prod`, `min`, `max`) and the long names
    /// (`mean`, `product`), in any case.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.to_ascii_lowercase().as_str() {
            "sum" => Ok(ReduceOperation::Sum),
            "avg" | "mean" => Ok(ReduceOperation::Mean),
            "prod" | "product" => Ok(ReduceOperation::Product),
            "min" => Ok(ReduceOperation::Min),
            "max" => Ok(ReduceOperation::Max),
            _ => Err(ParseReduceOperationError(text.to_owned())),
        }
    }
}

/// The length and element type of a prepared tensor, as a device describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TensorInfo {
    /// Number of elements.
    pub len: usize,
    /// The element type.
    pub element: ElementType,
}

impl fmt::Display for TensorInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} × {}", self.len, self.element)
    }
}

/// A device executor: the only code that touches device memory.
///
/// The communicator drives it through one generation: `prepare` and `describe` on each rank's
/// thread, then, on the last arriver's thread and only once the ranks agreed on the collective
/// and their tensors' shapes, `begin` with the generation's [`Plan`], one `exchange` per
/// [`Step`] of the plan, and `finish`. An executor never implements a collective itself: it moves
/// ranges between working buffers and folds elements locally, exactly as the plan says.
///
/// Every method may fail with `Self::Error` or panic; the communicator turns either into one
/// [`NativeCollectiveError`](crate::NativeCollectiveError) shared by all ranks of the generation.
/// Dropping any associated value may also panic; that is contained too.
pub trait NativeCollectiveDevice: Clone + Send + Sync + 'static {
    /// An owned device tensor; its elements stay on the device.
    type Tensor: Send + 'static;
    /// The tensor plus a capture of its producer stream, made on the submitting rank's thread.
    type Prepared: Send + 'static;
    /// Device-owned working buffers, scratch space and stream dependencies of one generation.
    type Work;
    /// Why the device failed; its `Display` text is what every rank receives.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Capture `tensor` (which must live on `device`) and its producer stream, without moving its
    /// elements off the device.
    fn prepare(
        &self,
        tensor: Self::Tensor,
        device: DeviceId,
    ) -> Result<Self::Prepared, Self::Error>;

    /// Length and element type of a prepared tensor; the core checks them across ranks.
    fn describe(&self, input: &Self::Prepared) -> TensorInfo;

    /// Check each input is on its rank's device (`devices[r]` is rank `r`'s, `inputs[r]` its
    /// tensor) and the plan's operation is supported for the element type; make one working
    /// buffer of `plan.buffer_len()` elements per rank holding rank `r`'s input at
    /// `plan.placement(r)` (the rest is never read before the schedule writes it).
    ///
    /// Takes the inputs: where `buffer_len == input_len` a device may use the input's own
    /// allocation as the working buffer (in place, no copy); inputs still being read stay alive
    /// inside the work.
    fn begin(
        &self,
        devices: &[DeviceId],
        inputs: Vec<Self::Prepared>,
        plan: &Plan,
    ) -> Result<Self::Work, Self::Error>;

    /// One step. Every transfer reads its range from the state before the step. Then, if
    /// `step.combine`, every element that received values becomes the plan's operation folded
    /// over its own value and the received ones in ascending rank order (its own value at its own
    /// rank's position; `Mean` folds as `Sum`); otherwise it is overwritten (at most one transfer
    /// writes an element in a step). Device to device only.
    fn exchange(&self, work: &mut Self::Work, step: &Step) -> Result<(), Self::Error>;

    /// Scale `Mean` outputs by `1/world`, complete all streams, and return one output per rank:
    /// rank `r`'s `plan.output(r)` range, in rank order.
    fn finish(&self, work: Self::Work, plan: &Plan) -> Result<Vec<Self::Tensor>, Self::Error>;

    /// The α–β model [`Algorithm::Auto`](crate::Algorithm::Auto) prices plans with on this
    /// device; read once, when a communicator is created. The default is a PCIe-class machine.
    fn link_model(&self) -> LinkModel {
        LinkModel::default()
    }

    /// Called by rank `rank`, waiting for its generation's outcome, between two polls of its
    /// delivery slot (never once it parks): a device that cuts a step across threads may run a
    /// share of the step the last arriver is running on this thread, which would otherwise only
    /// poll — the share of the elements this rank's thread ran before, say. It must return
    /// promptly when there is nothing to run, must not wait on the communicator, and must not
    /// panic: a share's panic belongs to the running rank's call, which reports it. It is not
    /// part of a generation and no fault is injected into it; the time it takes is polling (a
    /// waiter's timeout starts when it parks). The default does nothing.
    fn assist(&self, rank: usize) {
        let _ = rank;
    }
}
