//! The engine's buffers are ruccl-host's [`HostValues`]; this module is what MPI needs of them
//! beyond that crate: pointers MPI may take, the little-endian bytes of the status packet's
//! slot, and `Mean`'s division.
//!
//! Collectives take buffers by value and hand back new ones: while MPI works on a buffer the
//! engine owns it, and if a deadline passes first the buffer is never handed back (MPI may still
//! write to it; see [`InterProcessError::TimedOut`](crate::InterProcessError::TimedOut)).

use half::{bf16, f16};
use ruccl_host::HostValues;
use std::ffi::c_void;

/// The start of the elements, for MPI to read: valid for [`HostValues::byte_len`] bytes while
/// the vector is neither dropped nor resized (moving the `HostValues` does not move it).
///
/// Null for an empty buffer: an empty vector's dangling pointer is its alignment, and for
/// one-byte elements that is `1` — Open MPI's `MPI_IN_PLACE`, which MPI would act on even with a
/// count of zero.
pub(crate) fn send_ptr(buffer: &HostValues) -> *const c_void {
    if buffer.is_empty() {
        return std::ptr::null();
    }
    buffer.as_ptr()
}

/// The start of the elements, for MPI to write; see [`send_ptr`] (null when empty, for the same
/// reason).
pub(crate) fn recv_ptr(buffer: &mut HostValues) -> *mut c_void {
    if buffer.is_empty() {
        return std::ptr::null_mut();
    }
    buffer.as_mut_ptr()
}

/// Writes the elements' bytes, little-endian, element after element, to the start of `out`;
/// `false` (nothing written) if `out` is too short.
pub(crate) fn write_le_bytes(buffer: &HostValues, out: &mut [u8]) -> bool {
    let Some(out) = out.get_mut(..buffer.byte_len()) else {
        return false;
    };
    out.copy_from_slice(&buffer.to_ne_bytes());
    to_or_from_le(out, buffer.element_type().size());
    true
}

/// Overwrites every element with the little-endian `bytes` (element after element); `false`
/// (nothing changed) if `bytes` is too short.
pub(crate) fn read_le_bytes(buffer: &mut HostValues, bytes: &[u8]) -> bool {
    let Some(bytes) = bytes.get(..buffer.byte_len()) else {
        return false;
    };
    let mut native = bytes.to_vec();
    to_or_from_le(&mut native, buffer.element_type().size());
    match HostValues::from_ne_bytes(buffer.element_type(), &native) {
        Some(values) => {
            *buffer = values;
            true
        }
        None => false,
    }
}

/// Native-endian elements of `size` bytes to little-endian, or back: nothing to do on a
/// little-endian machine, each element's bytes reversed on a big-endian one.
fn to_or_from_le(bytes: &mut [u8], size: usize) {
    if cfg!(target_endian = "big") {
        bytes.chunks_exact_mut(size).for_each(<[u8]>::reverse);
    }
}

/// Divides every element by `count` (`ReduceOperation::Mean`, as the simulated device does):
/// one correctly rounded division for f32 and f64, through f32 and rounded once for f16 and
/// bf16, toward zero for integers (in 64 bits, so a count beyond the type's range gives 0).
/// `count` is a process count, far below 2^24. A type the engine cannot move never gets here:
/// the collective refuses it before the status agreement.
pub(crate) fn divide_by(buffer: &mut HostValues, count: usize) {
    if count <= 1 {
        return;
    }
    match buffer {
        HostValues::F32(values) => values.iter_mut().for_each(|v| *v /= count as f32),
        HostValues::F64(values) => values.iter_mut().for_each(|v| *v /= count as f64),
        HostValues::F16(values) => values
            .iter_mut()
            .for_each(|v| *v = f16::from_f32(v.to_f32() / count as f32)),
        HostValues::BF16(values) => values
            .iter_mut()
            .for_each(|v| *v = bf16::from_f32(v.to_f32() / count as f32)),
        HostValues::I32(values) => divide_signed(values, count),
        HostValues::I64(values) => divide_signed(values, count),
        HostValues::I8(values) => divide_signed(values, count),
        HostValues::U8(values) => divide_unsigned(values, count),
        HostValues::U32(values) => divide_unsigned(values, count),
        HostValues::U64(values) => divide_unsigned(values, count),
        _ => {}
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

#[cfg(test)]
mod tests {
    use super::*;
    use ruccl_core::ElementType;

    fn divided(mut buffer: HostValues, count: usize) -> HostValues {
        divide_by(&mut buffer, count);
        buffer
    }

    #[test]
    fn integer_mean_rounds_toward_zero_like_the_simulated_device() {
        let buffer = divided(HostValues::I32(vec![7, -7, -1]), 2);
        assert_eq!(buffer, HostValues::I32(vec![3, -3, 0]));
        let buffer = divided(HostValues::I8(vec![-128, 127, -3]), 2);
        assert_eq!(buffer, HostValues::I8(vec![-64, 63, -1]));
        let buffer = divided(HostValues::U8(vec![255, 7]), 2);
        assert_eq!(buffer, HostValues::U8(vec![127, 3]));
    }

    #[test]
    fn a_count_beyond_a_small_type_divides_to_zero() {
        let buffer = divided(HostValues::I8(vec![127, -128]), 300);
        assert_eq!(buffer, HostValues::I8(vec![0, 0]));
        let buffer = divided(HostValues::U8(vec![255]), 256);
        assert_eq!(buffer, HostValues::U8(vec![0]));
    }

    #[test]
    fn half_mean_rounds_once_through_f32() {
        let buffer = divided(HostValues::F16(vec![f16::from_f32(3.0)]), 2);
        assert_eq!(buffer, HostValues::F16(vec![f16::from_f32(1.5)]));
    }

    #[test]
    fn bytes_round_trip_for_every_type() {
        let sources = [
            HostValues::F32(vec![1.5, -0.0, f32::MAX]),
            HostValues::F64(vec![-2.25, 1e300, f64::MIN_POSITIVE]),
            HostValues::F16(vec![f16::from_f32(-3.5), f16::MAX, f16::MIN_POSITIVE]),
            HostValues::BF16(vec![bf16::from_f32(-2.5), bf16::MAX, bf16::ONE]),
            HostValues::I32(vec![-1, i32::MIN, 7]),
            HostValues::I64(vec![i64::MAX, -9, 0]),
            HostValues::I8(vec![i8::MIN, -1, 5]),
            HostValues::U8(vec![u8::MAX, 0, 9]),
            HostValues::U32(vec![u32::MAX, 1, 0]),
            HostValues::U64(vec![u64::MAX, 2, 3]),
        ];
        for source in sources {
            let mut bytes = vec![0xA5u8; source.byte_len()];
            assert!(write_le_bytes(&source, &mut bytes));
            let mut target = source.zeros_like(3);
            assert!(read_le_bytes(&mut target, &bytes));
            assert_eq!(target, source);
            assert!(!write_le_bytes(&source, &mut bytes[1..]));
            assert!(!read_le_bytes(&mut target, &bytes[1..]));
        }
    }

    #[test]
    fn the_packet_bytes_are_little_endian() {
        let mut bytes = [0u8; 4];
        assert!(write_le_bytes(
            &HostValues::U32(vec![0x0102_0304]),
            &mut bytes
        ));
        assert_eq!(bytes, [4, 3, 2, 1]);
    }

    #[test]
    fn an_empty_buffer_never_hands_mpi_a_pointer_that_reads_as_in_place() {
        for element in ElementType::ALL {
            let mut buffer = HostValues::zeros(element, 0).unwrap();
            assert!(send_ptr(&buffer).is_null(), "{element}");
            assert!(recv_ptr(&mut buffer).is_null(), "{element}");
        }
    }
}
