//! The values as device memory holds them: native-endian bytes (f16 and bf16 as their 16-bit
//! patterns, integers in two's complement), and raw pointers for adapters that copy through FFI.

use crate::values::with_values;
use crate::{ElementType, HostValues};
use half::{bf16, f16};
use std::ffi::c_void;

impl HostValues {
    /// The elements as native-endian bytes, element after element, as they lie in memory:
    /// [`byte_len`](Self::byte_len) bytes.
    pub fn to_ne_bytes(&self) -> Vec<u8> {
        fn flatten<const N: usize, T: Copy>(items: &[T], bytes: impl Fn(T) -> [u8; N]) -> Vec<u8> {
            items.iter().flat_map(|&item| bytes(item)).collect()
        }
        match self {
            HostValues::F32(items) => flatten(items, f32::to_ne_bytes),
            HostValues::F64(items) => flatten(items, f64::to_ne_bytes),
            HostValues::F16(items) => flatten(items, f16::to_ne_bytes),
            HostValues::BF16(items) => flatten(items, bf16::to_ne_bytes),
            HostValues::I32(items) => flatten(items, i32::to_ne_bytes),
            HostValues::I64(items) => flatten(items, i64::to_ne_bytes),
            HostValues::I8(items) => flatten(items, i8::to_ne_bytes),
            HostValues::U8(items) => flatten(items, u8::to_ne_bytes),
            HostValues::U32(items) => flatten(items, u32::to_ne_bytes),
            HostValues::U64(items) => flatten(items, u64::to_ne_bytes),
        }
    }

    /// `bytes` (native-endian elements of `element_type`, as [`to_ne_bytes`](Self::to_ne_bytes)
    /// writes them; a trailing partial element is ignored) as values. `None` for a type this
    /// crate does not know.
    pub fn from_ne_bytes(element_type: ElementType, bytes: &[u8]) -> Option<HostValues> {
        fn gather<const N: usize, T>(bytes: &[u8], from: impl Fn([u8; N]) -> T) -> Vec<T> {
            bytes
                .chunks_exact(N)
                .map(|chunk| {
                    let mut array = [0; N];
                    array.copy_from_slice(chunk);
                    from(array)
                })
                .collect()
        }
        Some(match element_type {
            ElementType::F32 => HostValues::F32(gather(bytes, f32::from_ne_bytes)),
            ElementType::F64 => HostValues::F64(gather(bytes, f64::from_ne_bytes)),
            ElementType::F16 => HostValues::F16(gather(bytes, f16::from_ne_bytes)),
            ElementType::BF16 => HostValues::BF16(gather(bytes, bf16::from_ne_bytes)),
            ElementType::I32 => HostValues::I32(gather(bytes, i32::from_ne_bytes)),
            ElementType::I64 => HostValues::I64(gather(bytes, i64::from_ne_bytes)),
            ElementType::I8 => HostValues::I8(gather(bytes, i8::from_ne_bytes)),
            ElementType::U8 => HostValues::U8(gather(bytes, u8::from_ne_bytes)),
            ElementType::U32 => HostValues::U32(gather(bytes, u32::from_ne_bytes)),
            ElementType::U64 => HostValues::U64(gather(bytes, u64::from_ne_bytes)),
            _ => return None,
        })
    }

    /// The start of the elements, for a foreign function to read
    /// [`byte_len`](Self::byte_len) bytes from (native-endian, as
    /// [`to_ne_bytes`](Self::to_ne_bytes) would copy them). As [`Vec::as_ptr`]: valid while the
    /// values are neither dropped nor resized (moving the `HostValues` does not move the
    /// elements), and dangling — non-null, aligned, not to be read — when they are empty.
    pub fn as_ptr(&self) -> *const c_void {
        with_values!(self, values => values.as_ptr().cast())
    }

    /// The start of the elements, for a foreign function to write; see
    /// [`as_ptr`](Self::as_ptr).
    pub fn as_mut_ptr(&mut self) -> *mut c_void {
        with_values!(self, values => values.as_mut_ptr().cast())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<HostValues> {
        vec![
            HostValues::F32(vec![1.5, -0.0, f32::MAX, f32::MIN_POSITIVE]),
            HostValues::F64(vec![std::f64::consts::PI, -1e300]),
            HostValues::F16(vec![f16::from_f32(0.5), f16::MAX, f16::from_f32(-3.0)]),
            HostValues::BF16(vec![bf16::from_f32(1.0), bf16::MIN, bf16::from_f32(-2.5)]),
            HostValues::I32(vec![i32::MIN, -1, 0, 7, i32::MAX]),
            HostValues::I64(vec![i64::MIN, 42, i64::MAX]),
            HostValues::I8(vec![i8::MIN, -1, 0, 1, i8::MAX]),
            HostValues::U8(vec![0, 1, 0x80, u8::MAX]),
            HostValues::U32(vec![0, 1, 0x8000_0000, u32::MAX]),
            HostValues::U64(vec![0, 1, 1 << 63, u64::MAX]),
            HostValues::I32(vec![]),
        ]
    }

    #[test]
    fn every_element_type_round_trips_through_bytes() {
        let mut covered = std::collections::BTreeSet::new();
        for values in samples() {
            let bytes = values.to_ne_bytes();
            assert_eq!(bytes.len(), values.byte_len());
            assert_eq!(
                HostValues::from_ne_bytes(values.element_type(), &bytes),
                Some(values.clone())
            );
            covered.insert(values.element_type());
        }
        assert_eq!(
            covered.len(),
            ElementType::ALL.len(),
            "a type has no sample"
        );
    }

    #[test]
    fn half_precision_is_stored_as_its_bit_pattern() {
        let bytes = HostValues::BF16(vec![bf16::from_f32(1.0)]).to_ne_bytes();
        assert_eq!(bytes, 0x3f80_u16.to_ne_bytes().to_vec());
        let bytes = HostValues::F16(vec![f16::from_f32(1.0)]).to_ne_bytes();
        assert_eq!(bytes, 0x3c00_u16.to_ne_bytes().to_vec());
    }

    #[test]
    fn integers_are_stored_in_their_own_width_as_twos_complement() {
        assert_eq!(
            HostValues::I8(vec![-1, -128]).to_ne_bytes(),
            vec![0xff, 0x80]
        );
        assert_eq!(HostValues::U8(vec![255, 7]).to_ne_bytes(), vec![0xff, 7]);
        assert_eq!(
            HostValues::U32(vec![0xdead_beef]).to_ne_bytes(),
            0xdead_beef_u32.to_ne_bytes().to_vec()
        );
        assert_eq!(
            HostValues::U64(vec![u64::MAX - 1]).to_ne_bytes(),
            (u64::MAX - 1).to_ne_bytes().to_vec()
        );
        // The same byte reads back as the type says: signed or not.
        assert_eq!(
            HostValues::from_ne_bytes(ElementType::I8, &[0xfe]),
            Some(HostValues::I8(vec![-2]))
        );
        assert_eq!(
            HostValues::from_ne_bytes(ElementType::U8, &[0xfe]),
            Some(HostValues::U8(vec![254]))
        );
    }

    #[test]
    fn a_trailing_partial_element_is_ignored() {
        let bytes = [1, 0, 0, 0, 2, 0];
        let values = HostValues::from_ne_bytes(ElementType::U32, &bytes);
        assert_eq!(values.map(|values| values.len()), Some(1));
        assert_eq!(
            HostValues::from_ne_bytes(ElementType::U64, &bytes),
            Some(HostValues::U64(vec![]))
        );
    }

    #[test]
    fn the_pointers_point_at_the_elements_in_memory_order() {
        for mut values in samples().into_iter().filter(|values| !values.is_empty()) {
            let bytes = values.to_ne_bytes();
            // SAFETY: the values are non-empty, so the pointer is to `byte_len` initialised
            // bytes, and nothing changes them while the slice lives.
            let seen =
                unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), bytes.len()) };
            assert_eq!(seen, &bytes[..]);
            assert_eq!(values.as_mut_ptr().cast_const(), values.as_ptr());
        }
    }
}
