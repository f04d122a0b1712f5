//! Element types and host-side values, and the [`HostTensors`] trait through which test
//! harnesses (the conformance suite, the perf CLI) move values onto and off any device.

use half::{bf16, f16};
use ruccl_core::{DeviceId, NativeCollectiveDevice, ReduceOperation};
pub use ruccl_core::{ElementType, ParseElementTypeError};

/// A vector of elements of one type, on the host.
///
/// Non-exhaustive, like [`ElementType`]: a `match` outside this crate needs a wildcard arm.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
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
    /// i8 elements.
    I8(Vec<i8>),
    /// u8 elements.
    U8(Vec<u8>),
    /// u32 elements.
    U32(Vec<u32>),
    /// u64 elements.
    U64(Vec<u64>),
}

/// Run `$body` with `$values` bound to the vector of whichever variant.
macro_rules! with_values {
    ($self:expr, $values:ident => $body:expr) => {
        match $self {
            HostValues::F32($values) => $body,
            HostValues::F64($values) => $body,
            HostValues::F16($values) => $body,
            HostValues::BF16($values) => $body,
            HostValues::I32($values) => $body,
            HostValues::I64($values) => $body,
            HostValues::I8($values) => $body,
            HostValues::U8($values) => $body,
            HostValues::U32($values) => $body,
            HostValues::U64($values) => $body,
        }
    };
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
            HostValues::I8(_) => ElementType::I8,
            HostValues::U8(_) => ElementType::U8,
            HostValues::U32(_) => ElementType::U32,
            HostValues::U64(_) => ElementType::U64,
        }
    }

    /// `length` zeros of `element_type` (`None` for a type this crate does not know).
    pub fn zeros(element_type: ElementType, length: usize) -> Option<HostValues> {
        Some(match element_type {
            ElementType::F32 => HostValues::F32(vec![0.0; length]),
            ElementType::F64 => HostValues::F64(vec![0.0; length]),
            ElementType::F16 => HostValues::F16(vec![f16::ZERO; length]),
            ElementType::BF16 => HostValues::BF16(vec![bf16::ZERO; length]),
            ElementType::I32 => HostValues::I32(vec![0; length]),
            ElementType::I64 => HostValues::I64(vec![0; length]),
            ElementType::I8 => HostValues::I8(vec![0; length]),
            ElementType::U8 => HostValues::U8(vec![0; length]),
            ElementType::U32 => HostValues::U32(vec![0; length]),
            ElementType::U64 => HostValues::U64(vec![0; length]),
            _ => return None,
        })
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        with_values!(self, values => values.len())
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Remove every element, keeping the allocation.
    pub(crate) fn clear(&mut self) {
        with_values!(self, values => values.clear())
    }

    /// The bytes of the allocation behind the values (its capacity, not its length).
    pub(crate) fn allocated_bytes(&self) -> usize {
        fn bytes<T>(values: &Vec<T>) -> usize {
            values.capacity() * size_of::<T>()
        }
        with_values!(self, values => bytes(values))
    }

    /// Elements `range`, as values of the same type (`None` if the range is not inside).
    pub fn slice(&self, range: std::ops::Range<usize>) -> Option<HostValues> {
        Some(match self {
            HostValues::F32(values) => HostValues::F32(values.get(range)?.to_vec()),
            HostValues::F64(values) => HostValues::F64(values.get(range)?.to_vec()),
            HostValues::F16(values) => HostValues::F16(values.get(range)?.to_vec()),
            HostValues::BF16(values) => HostValues::BF16(values.get(range)?.to_vec()),
            HostValues::I32(values) => HostValues::I32(values.get(range)?.to_vec()),
            HostValues::I64(values) => HostValues::I64(values.get(range)?.to_vec()),
            HostValues::I8(values) => HostValues::I8(values.get(range)?.to_vec()),
            HostValues::U8(values) => HostValues::U8(values.get(range)?.to_vec()),
            HostValues::U32(values) => HostValues::U32(values.get(range)?.to_vec()),
            HostValues::U64(values) => HostValues::U64(values.get(range)?.to_vec()),
        })
    }

    /// Element `index` widened to f64 (exact for every type but 64-bit integers beyond 2^53).
    pub fn get_f64(&self, index: usize) -> Option<f64> {
        match self {
            HostValues::F32(values) => values.get(index).map(|&v| f64::from(v)),
            HostValues::F64(values) => values.get(index).copied(),
            HostValues::F16(values) => values.get(index).map(|&v| f64::from(v)),
            HostValues::BF16(values) => values.get(index).map(|&v| f64::from(v)),
            HostValues::I32(values) => values.get(index).map(|&v| f64::from(v)),
            HostValues::I64(values) => values.get(index).map(|&v| v as f64),
            HostValues::I8(values) => values.get(index).map(|&v| f64::from(v)),
            HostValues::U8(values) => values.get(index).map(|&v| f64::from(v)),
            HostValues::U32(values) => values.get(index).map(|&v| f64::from(v)),
            HostValues::U64(values) => values.get(index).map(|&v| v as f64),
        }
    }

    /// Element `index` of an integer tensor, exactly (`None` past the end or for a float tensor).
    pub fn get_integer(&self, index: usize) -> Option<i128> {
        match self {
            HostValues::I32(values) => values.get(index).map(|&v| i128::from(v)),
            HostValues::I64(values) => values.get(index).map(|&v| i128::from(v)),
            HostValues::I8(values) => values.get(index).map(|&v| i128::from(v)),
            HostValues::U8(values) => values.get(index).map(|&v| i128::from(v)),
            HostValues::U32(values) => values.get(index).map(|&v| i128::from(v)),
            HostValues::U64(values) => values.get(index).map(|&v| i128::from(v)),
            _ => None,
        }
    }

    /// The bits of element `index`, zero-extended (`None` past the end): two elements hold the
    /// same value bit for bit exactly when these are equal.
    pub fn get_bits(&self, index: usize) -> Option<u64> {
        match self {
            HostValues::F32(values) => values.get(index).map(|&v| u64::from(v.to_bits())),
            HostValues::F64(values) => values.get(index).map(|&v| v.to_bits()),
            HostValues::F16(values) => values.get(index).map(|&v| u64::from(v.to_bits())),
            HostValues::BF16(values) => values.get(index).map(|&v| u64::from(v.to_bits())),
            HostValues::I32(values) => values.get(index).map(|&v| u64::from(v as u32)),
            HostValues::I64(values) => values.get(index).map(|&v| v as u64),
            HostValues::I8(values) => values.get(index).map(|&v| u64::from(v as u8)),
            HostValues::U8(values) => values.get(index).map(|&v| u64::from(v)),
            HostValues::U32(values) => values.get(index).map(|&v| u64::from(v)),
            HostValues::U64(values) => values.get(index).copied(),
        }
    }

    /// Whether element `index` is a NaN (never for integers).
    pub fn is_nan(&self, index: usize) -> bool {
        self.element_type().is_float() && self.get_f64(index).is_some_and(f64::is_nan)
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

    /// Whether the device takes `element_type` tensors at all (uploads them, copies them in
    /// all-gathers and broadcasts). The conformance suite skips a type the device does not take
    /// and lists it as unsupported. Every type is taken unless an adapter says otherwise.
    fn supports_type(&self, element_type: ElementType) -> bool {
        let _ = element_type;
        true
    }
}
