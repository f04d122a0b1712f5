//! [`HostBuffer`]: a typed buffer in host memory, the unit the MPI engine moves between
//! processes.

use half::{bf16, f16};
use ruccl_core::ElementType;
#[cfg(feature = "sim")]
use ruccl_sim::HostValues;
use std::ffi::c_void;

/// Elements of one [`ElementType`] in host memory, owned.
///
/// Collectives take buffers by value and hand back new ones: while MPI works on a buffer the
/// engine owns it, and if a deadline passes first the buffer is never handed back (MPI may still
/// write to it; see [`InterProcessError::TimedOut`](crate::InterProcessError::TimedOut)).
#[derive(Clone, Debug, PartialEq)]
pub enum HostBuffer {
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

/// Runs the same expression on the vector inside any variant.
macro_rules! each {
    ($buffer:expr, $values:ident => $body:expr) => {
        match $buffer {
            HostBuffer::F32($values) => $body,
            HostBuffer::F64($values) => $body,
            HostBuffer::F16($values) => $body,
            HostBuffer::BF16($values) => $body,
            HostBuffer::I32($values) => $body,
            HostBuffer::I64($values) => $body,
            HostBuffer::I8($values) => $body,
            HostBuffer::U8($values) => $body,
            HostBuffer::U32($values) => $body,
            HostBuffer::U64($values) => $body,
        }
    };
}
pub(crate) use each;

impl HostBuffer {
    /// `len` zeros of `element`; `None` for an element type added to the core after this crate.
    pub fn zeroed(element: ElementType, len: usize) -> Option<Self> {
        Some(match element {
            ElementType::F32 => HostBuffer::F32(vec![0.0; len]),
            ElementType::F64 => HostBuffer::F64(vec![0.0; len]),
            ElementType::F16 => HostBuffer::F16(vec![f16::ZERO; len]),
            ElementType::BF16 => HostBuffer::BF16(vec![bf16::ZERO; len]),
            ElementType::I32 => HostBuffer::I32(vec![0; len]),
            ElementType::I64 => HostBuffer::I64(vec![0; len]),
            ElementType::I8 => HostBuffer::I8(vec![0; len]),
            ElementType::U8 => HostBuffer::U8(vec![0; len]),
            ElementType::U32 => HostBuffer::U32(vec![0; len]),
            ElementType::U64 => HostBuffer::U64(vec![0; len]),
            _ => return None,
        })
    }

    /// A buffer of `len` zeros of this buffer's element type.
    pub fn zeros_like(&self, len: usize) -> Self {
        each!(self, values => {
            // An empty vector of the same element type; nothing of `values` is copied.
            let mut zeros = values[..0].to_vec();
            zeros.resize(len, Default::default());
            zeros.into()
        })
    }

    /// The element type.
    pub fn element_type(&self) -> ElementType {
        match self {
            HostBuffer::F32(_) => ElementType::F32,
            HostBuffer::F64(_) => ElementType::F64,
            HostBuffer::F16(_) => ElementType::F16,
            HostBuffer::BF16(_) => ElementType::BF16,
            HostBuffer::I32(_) => ElementType::I32,
            HostBuffer::I64(_) => ElementType::I64,
            HostBuffer::I8(_) => ElementType::I8,
            HostBuffer::U8(_) => ElementType::U8,
            HostBuffer::U32(_) => ElementType::U32,
            HostBuffer::U64(_) => ElementType::U64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        each!(self, values => values.len())
    }

    /// Whether the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of the elements.
    pub fn byte_len(&self) -> usize {
        self.len() * self.element_type().size()
    }

    /// Elements `range` of this buffer, as a new buffer.
    pub fn slice(&self, range: std::ops::Range<usize>) -> Option<HostBuffer> {
        Some(each!(self, values => values.get(range)?.to_vec().into()))
    }

    /// Divides every element by `count` (`ReduceOperation::Mean`, as the simulated device does):
    /// one correctly rounded division for f32 and f64, through f32 and rounded once for f16 and
    /// bf16, toward zero for integers (in 64 bits, so a count beyond the type's range gives 0).
    /// `count` is a process count, far below 2^24.
    pub(crate) fn divide_by(&mut self, count: usize) {
        if count <= 1 {
            return;
        }
        match self {
            HostBuffer::F32(values) => values.iter_mut().for_each(|v| *v /= count as f32),
            HostBuffer::F64(values) => values.iter_mut().for_each(|v| *v /= count as f64),
            HostBuffer::F16(values) => values
                .iter_mut()
                .for_each(|v| *v = f16::from_f32(v.to_f32() / count as f32)),
            HostBuffer::BF16(values) => values
                .iter_mut()
                .for_each(|v| *v = bf16::from_f32(v.to_f32() / count as f32)),
            HostBuffer::I32(values) => divide_signed(values, count),
            HostBuffer::I64(values) => divide_signed(values, count),
            HostBuffer::I8(values) => divide_signed(values, count),
            HostBuffer::U8(values) => divide_unsigned(values, count),
            HostBuffer::U32(values) => divide_unsigned(values, count),
            HostBuffer::U64(values) => divide_unsigned(values, count),
        }
    }

    /// Writes the elements' bytes, little-endian, element after element, to the start of
    /// `out`; `false` (nothing written) if `out` is too short.
    pub(crate) fn write_le_bytes(&self, out: &mut [u8]) -> bool {
        if out.len() < self.byte_len() {
            return false;
        }
        let size = self.element_type().size();
        each!(self, values => {
            for (chunk, value) in out.chunks_exact_mut(size).zip(values) {
                chunk.copy_from_slice(&value.to_le_bytes());
            }
        });
        true
    }

    /// Overwrites every element with the little-endian `bytes` (element after element);
    /// `false` (nothing changed) if `bytes` is too short.
    pub(crate) fn read_le_bytes(&mut self, bytes: &[u8]) -> bool {
        fn read<T, const N: usize>(values: &mut [T], bytes: &[u8], from: fn([u8; N]) -> T) {
            for (value, chunk) in values.iter_mut().zip(bytes.chunks_exact(N)) {
                let mut array = [0u8; N];
                array.copy_from_slice(chunk);
                *value = from(array);
            }
        }
        if bytes.len() < self.byte_len() {
            return false;
        }
        match self {
            HostBuffer::F32(values) => read(values, bytes, f32::from_le_bytes),
            HostBuffer::F64(values) => read(values, bytes, f64::from_le_bytes),
            HostBuffer::F16(values) => read(values, bytes, f16::from_le_bytes),
            HostBuffer::BF16(values) => read(values, bytes, bf16::from_le_bytes),
            HostBuffer::I32(values) => read(values, bytes, i32::from_le_bytes),
            HostBuffer::I64(values) => read(values, bytes, i64::from_le_bytes),
            HostBuffer::I8(values) => read(values, bytes, i8::from_le_bytes),
            HostBuffer::U8(values) => read(values, bytes, u8::from_le_bytes),
            HostBuffer::U32(values) => read(values, bytes, u32::from_le_bytes),
            HostBuffer::U64(values) => read(values, bytes, u64::from_le_bytes),
        }
        true
    }

    /// The start of the elements, for MPI to read. Valid for [`byte_len`](Self::byte_len) bytes
    /// while the buffer is neither moved out of its vector nor resized (moving the `HostBuffer`
    /// itself does not move the elements).
    ///
    /// Null for an empty buffer: an empty vector's dangling pointer is its alignment, and for
    /// one-byte elements that is `1` — Open MPI's `MPI_IN_PLACE`, which MPI would act on even
    /// with a count of zero.
    pub(crate) fn as_ptr(&self) -> *const c_void {
        if self.is_empty() {
            return std::ptr::null();
        }
        each!(self, values => values.as_ptr().cast())
    }

    /// The start of the elements, for MPI to write; see [`as_ptr`](Self::as_ptr) (null when
    /// empty, for the same reason).
    pub(crate) fn as_mut_ptr(&mut self) -> *mut c_void {
        if self.is_empty() {
            return std::ptr::null_mut();
        }
        each!(self, values => values.as_mut_ptr().cast())
    }
}

/// `divide_by` for a signed integer type: toward zero, in 64 bits.
fn divide_signed<T: Copy + Into<i64> + TryFrom<i64>>(values: &mut [T], count: usize) {
    let count = i64::try_from(count).unwrap_or(i64::MAX);
    for value in values {
        // The quotient's magnitude is at most the value's, so it fits `T` again.
        if let Ok(quotient) = T::try_from((*value).into() / count) {
            *value = quotient;
        }
    }
}

/// `divide_by` for an unsigned integer type, in 64 bits.
fn divide_unsigned<T: Copy + Into<u64> + TryFrom<u64>>(values: &mut [T], count: usize) {
    let count = u64::try_from(count).unwrap_or(u64::MAX);
    for value in values {
        // The quotient is at most the value, so it fits `T` again.
        if let Ok(quotient) = T::try_from((*value).into() / count) {
            *value = quotient;
        }
    }
}

macro_rules! from_vec {
    ($($variant:ident($type:ty)),* $(,)?) => {$(
        impl From<Vec<$type>> for HostBuffer {
            fn from(values: Vec<$type>) -> Self {
                HostBuffer::$variant(values)
            }
        }
    )*};
}

from_vec!(
    F32(f32),
    F64(f64),
    F16(f16),
    BF16(bf16),
    I32(i32),
    I64(i64),
    I8(i8),
    U8(u8),
    U32(u32),
    U64(u64),
);

/// The simulated device's host values are the same vectors: moved, not copied. A type added to
/// the simulated device after this crate is handed back. (Feature `sim`.)
#[cfg(feature = "sim")]
impl TryFrom<HostValues> for HostBuffer {
    type Error = HostValues;

    fn try_from(values: HostValues) -> Result<Self, HostValues> {
        Ok(match values {
            HostValues::F32(values) => HostBuffer::F32(values),
            HostValues::F64(values) => HostBuffer::F64(values),
            HostValues::F16(values) => HostBuffer::F16(values),
            HostValues::BF16(values) => HostBuffer::BF16(values),
            HostValues::I32(values) => HostBuffer::I32(values),
            HostValues::I64(values) => HostBuffer::I64(values),
            HostValues::I8(values) => HostBuffer::I8(values),
            HostValues::U8(values) => HostBuffer::U8(values),
            HostValues::U32(values) => HostBuffer::U32(values),
            HostValues::U64(values) => HostBuffer::U64(values),
            other => return Err(other),
        })
    }
}

/// The inverse of `TryFrom<HostValues>`: moved, not copied. (Feature `sim`.)
#[cfg(feature = "sim")]
impl From<HostBuffer> for HostValues {
    fn from(buffer: HostBuffer) -> Self {
        match buffer {
            HostBuffer::F32(values) => HostValues::F32(values),
            HostBuffer::F64(values) => HostValues::F64(values),
            HostBuffer::F16(values) => HostValues::F16(values),
            HostBuffer::BF16(values) => HostValues::BF16(values),
            HostBuffer::I32(values) => HostValues::I32(values),
            HostBuffer::I64(values) => HostValues::I64(values),
            HostBuffer::I8(values) => HostValues::I8(values),
            HostBuffer::U8(values) => HostValues::U8(values),
            HostBuffer::U32(values) => HostValues::U32(values),
            HostBuffer::U64(values) => HostValues::U64(values),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_mean_rounds_toward_zero_like_the_simulated_device() {
        let mut buffer = HostBuffer::I32(vec![7, -7, -1]);
        buffer.divide_by(2);
        assert_eq!(buffer, HostBuffer::I32(vec![3, -3, 0]));
        let mut buffer = HostBuffer::I8(vec![-128, 127, -3]);
        buffer.divide_by(2);
        assert_eq!(buffer, HostBuffer::I8(vec![-64, 63, -1]));
        let mut buffer = HostBuffer::U8(vec![255, 7]);
        buffer.divide_by(2);
        assert_eq!(buffer, HostBuffer::U8(vec![127, 3]));
    }

    #[test]
    fn a_count_beyond_a_small_type_divides_to_zero() {
        let mut buffer = HostBuffer::I8(vec![127, -128]);
        buffer.divide_by(300);
        assert_eq!(buffer, HostBuffer::I8(vec![0, 0]));
        let mut buffer = HostBuffer::U8(vec![255]);
        buffer.divide_by(256);
        assert_eq!(buffer, HostBuffer::U8(vec![0]));
    }

    #[cfg(feature = "sim")]
    #[test]
    fn every_host_value_type_moves_into_a_buffer_and_back() {
        for element in ElementType::ALL {
            let buffer = HostBuffer::zeroed(element, 2).unwrap();
            let values = HostValues::from(buffer.clone());
            assert_eq!(HostBuffer::try_from(values), Ok(buffer));
        }
    }

    #[test]
    fn half_mean_rounds_once_through_f32() {
        let mut buffer = HostBuffer::F16(vec![f16::from_f32(3.0)]);
        buffer.divide_by(2);
        assert_eq!(buffer, HostBuffer::F16(vec![f16::from_f32(1.5)]));
    }

    #[test]
    fn bytes_round_trip_for_every_type() {
        let sources = [
            HostBuffer::F32(vec![1.5, -0.0, f32::MAX]),
            HostBuffer::F64(vec![-2.25, 1e300, f64::MIN_POSITIVE]),
            HostBuffer::F16(vec![f16::from_f32(-3.5), f16::MAX, f16::MIN_POSITIVE]),
            HostBuffer::BF16(vec![bf16::from_f32(-2.5), bf16::MAX, bf16::ONE]),
            HostBuffer::I32(vec![-1, i32::MIN, 7]),
            HostBuffer::I64(vec![i64::MAX, -9, 0]),
            HostBuffer::I8(vec![i8::MIN, -1, 5]),
            HostBuffer::U8(vec![u8::MAX, 0, 9]),
            HostBuffer::U32(vec![u32::MAX, 1, 0]),
            HostBuffer::U64(vec![u64::MAX, 2, 3]),
        ];
        for source in sources {
            let mut bytes = vec![0xA5u8; source.byte_len()];
            assert!(source.write_le_bytes(&mut bytes));
            let mut target = source.zeros_like(3);
            assert_eq!(
                Some(target.clone()),
                HostBuffer::zeroed(source.element_type(), 3)
            );
            assert!(target.read_le_bytes(&bytes));
            assert_eq!(target, source);
            assert!(!source.write_le_bytes(&mut bytes[1..]));
            assert!(!target.read_le_bytes(&bytes[1..]));
        }
    }

    #[test]
    fn an_empty_buffer_never_hands_mpi_a_pointer_that_reads_as_in_place() {
        for element in ElementType::ALL {
            let mut buffer = HostBuffer::zeroed(element, 0).unwrap();
            assert!(buffer.as_ptr().is_null(), "{element}");
            assert!(buffer.as_mut_ptr().is_null(), "{element}");
        }
    }

    #[test]
    fn zeroed_has_the_type_and_length_asked_for() {
        for element in ElementType::ALL {
            let buffer = HostBuffer::zeroed(element, 3).unwrap();
            assert_eq!(buffer.element_type(), element);
            assert_eq!(buffer.byte_len(), 3 * element.size());
        }
    }
}
