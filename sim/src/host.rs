//! Element types and host-side values, and the [`HostTensors`] trait through which test
//! harnesses (the conformance suite, the perf CLI) move values onto and off any device.

use half::{bf16, f16};
use ruccl_core::{DeviceId, NativeCollectiveDevice, ReduceOperation};
pub use ruccl_core::{ElementType, ParseElementTypeError};

/// A vector of elements of one type, on the host.
#[derive(Clone, Debug, PartialEq)]
pub enum HostValues {
    /// f32 elements.
    F32(Vec<f32>),
    /// f64 elements.
    F64(Vec<f64>),
    /// f16 elements.
    F16(Vec<f16>),
    /// bf16 elements.
    BF16(Vec<bf16>),
    /// i32 elements.
    I32(Vec<i32>),
    /// i64 elements.
    I64(Vec<i64>),
}

impl HostValues {
    /// The element type.
    pub fn element_type(&self) -> ElementType {
        match self {
            HostValues::F32(_) => ElementType::F32,
            HostValues::F64(_) => ElementType::F64,
            HostValues::F16(_) => ElementType::F16,
            HostValues::BF16(_) => ElementType::BF16,
            HostValues::I32(_) => ElementType::I32,
            HostValues::I64(_) => ElementType::I64,
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            HostValues::F32(values) => values.len(),
            HostValues::F64(values) => values.len(),
            HostValues::F16(values) => values.len(),
            HostValues::BF16(values) => values.len(),
            HostValues::I32(values) => values.len(),
            HostValues::I64(values) => values.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `index` widened to f64 (exact for every type but i64 beyond 2^53).
    pub fn get_f64(&self, index: usize) -> Option<f64> {
        match self {
            HostValues::F32(values) => values.get(index).map(|&v| f64::from(v)),
            HostValues::F64(values) => values.get(index).copied(),
            HostValues::F16(values) => values.get(index).map(|&v| f64::from(v)),
            HostValues::BF16(values) => values.get(index).map(|&v| f64::from(v)),
            HostValues::I32(values) => values.get(index).map(|&v| f64::from(v)),
            HostValues::I64(values) => values.get(index).map(|&v| v as f64),
        }
    }
}

/// A device whose tensors a harness can create from and read back to host values. Only test and
/// measurement code uses this; the collective path never leaves the device.
pub trait HostTensors: NativeCollectiveDevice {
    /// Create a tensor holding `values` on `device`.
    fn upload(&self, device: DeviceId, values: &HostValues) -> Result<Self::Tensor, Self::Error>;

    /// Copy a tensor's elements back to the host.
    fn download(&self, tensor: &Self::Tensor) -> Result<HostValues, Self::Error>;

    /// Whether `begin` accepts `operation` on `element_type` elements. The conformance suite checks
    /// the supported combinations' results and that `begin` rejects the others with an error.
    /// Every combination is supported unless an adapter says otherwise.
    fn supports(&self, element_type: ElementType, operation: ReduceOperation) -> bool {
        let _ = (element_type, operation);
        true
    }
}
