//! Element types and host-side values, and the [`HostTensors`] trait through which test
//! harnesses (the conformance suite, the perf CLI) move values onto and off any device.

use half::{bf16, f16};
use ruccl_core::{DeviceId, NativeCollectiveDevice, ReduceOperation};
use std::fmt;
use std::str::FromStr;

/// The element types ruCCL devices support.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ElementType {
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary64.
    F64,
    /// IEEE 754 binary16.
    F16,
    /// bfloat16.
    BF16,
    /// Two's complement 32-bit integer.
    I32,
    /// Two's complement 64-bit integer.
    I64,
}

impl ElementType {
    /// Every element type.
    pub const ALL: [ElementType; 6] = [
        ElementType::F32,
        ElementType::F64,
        ElementType::F16,
        ElementType::BF16,
        ElementType::I32,
        ElementType::I64,
    ];

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            ElementType::F16 | ElementType::BF16 => 2,
            ElementType::F32 | ElementType::I32 => 4,
            ElementType::F64 | ElementType::I64 => 8,
        }
    }

    /// The name nccl-tests prints: `float`, `double`, `half`, `bfloat16`, `int32`, `int64`.
    pub const fn nccl_name(self) -> &'static str {
        match self {
            ElementType::F32 => "float",
            ElementType::F64 => "double",
            ElementType::F16 => "half",
            ElementType::BF16 => "bfloat16",
            ElementType::I32 => "int32",
            ElementType::I64 => "int64",
        }
    }

    /// Whether the type is a floating-point type.
    pub const fn is_float(self) -> bool {
        !matches!(self, ElementType::I32 | ElementType::I64)
    }
}

impl fmt::Display for ElementType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.nccl_name())
    }
}

/// A string that names no [`ElementType`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown element type `{0}`: expected one of float (f32), double (f64), half (f16), bfloat16 (bf16), int32 (i32), int64 (i64)"
)]
pub struct ParseElementTypeError(pub String);

impl FromStr for ElementType {
    type Err = ParseElementTypeError;

    /// Accepts nccl-tests' names and Rust's (`f32`, `bf16`, `i64`, ...), in any case.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.to_ascii_lowercase().as_str() {
            "float" | "f32" | "float32" => Ok(ElementType::F32),
            "double" | "f64" | "float64" => Ok(ElementType::F64),
            "half" | "f16" | "float16" => Ok(ElementType::F16),
            "bfloat16" | "bf16" => Ok(ElementType::BF16),
            "int32" | "i32" | "int" => Ok(ElementType::I32),
            "int64" | "i64" => Ok(ElementType::I64),
            _ => Err(ParseElementTypeError(text.to_owned())),
        }
    }
}

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
