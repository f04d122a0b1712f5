//! The device side of the contract: device identities, reduce operations, and the executor trait
//! that a backend (simulated host memory, CUDA) implements.

use std::fmt;
use std::ops::Range;
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

    /// The operation a reduce-scatter step combines with: `Mean` combines as `Sum` and is scaled
    /// once at the end.
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

/// A device executor: the only code that touches device memory. The communicator drives it
/// through one generation as `prepare` (on each rank's thread), then, on the last arriver's
/// thread, `begin`, `2(W-1)` calls of `exchange` following the
/// [`RingSchedule`](crate::RingSchedule), and `finish`.
///
/// An executor never implements a collective itself: it moves ranges between ring neighbours and
/// combines elements locally. Every method may fail with `Self::Error` or panic; the communicator
/// turns either into one [`NativeCollectiveError`](crate::NativeCollectiveError) shared by all
/// ranks of the generation. Dropping any of the associated values may also panic; that is
/// contained too.
pub trait NativeCollectiveDevice: Clone + Send + Sync + 'static {
    /// An owned device tensor; its elements stay on the device.
    type Tensor: Send + 'static;
    /// The tensor plus a capture of its producer stream, made on the submitting rank's thread.
    type Prepared: Send + 'static;
    /// Device-owned outputs, scratch space and stream dependencies of one generation.
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

    /// Validate the inputs (same length, same element type, each on its rank's device, the
    /// operation supported for the element type) and clone them into device-local output buffers.
    /// `devices[r]` is rank `r`'s device and `inputs[r]` its prepared tensor.
    fn begin(
        &self,
        devices: &[DeviceId],
        inputs: &[Self::Prepared],
        operation: ReduceOperation,
    ) -> Result<Self::Work, Self::Error>;

    /// The number of elements of each rank's tensor in `work`.
    fn elements(&self, work: &Self::Work) -> usize;

    /// One ring step. `ranges[r]` is the range rank `r` sends to rank `(r + 1) % world`. All sends
    /// of the step read the state from before the step; then each destination combines its
    /// received range with its own (`reduce = true`, with the operation given to `begin`, `Mean`
    /// combining as `Sum`) or overwrites its own with it (`reduce = false`). Device to device only.
    fn exchange(
        &self,
        work: &mut Self::Work,
        ranges: &[Range<usize>],
        reduce: bool,
    ) -> Result<(), Self::Error>;

    /// Apply the final scaling (`Mean`: multiply by `1 / world`) and complete all streams before
    /// returning one output per rank, in rank order.
    fn finish(
        &self,
        work: Self::Work,
        operation: ReduceOperation,
    ) -> Result<Vec<Self::Tensor>, Self::Error>;
}
