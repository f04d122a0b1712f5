//! [`HostTensors`] for the CUDA executor (feature `harness`): how test and measurement harnesses
//! (the sim crate's conformance suite and fault trial, `ruccl-perf --backend cuda`) put values on
//! a logical device and read them back. The collective path never uses this.

use crate::device::CudaCollective;
use crate::error::{CudaError, Result};
use crate::kernels;
use crate::tensor::CudaTensor;
use half::{bf16, f16};
use ruccl_core::{DeviceId, ReduceOperation};
use ruccl_sim::host::{ElementType, HostTensors, HostValues};

/// The values' elements as native-endian bytes, as they lie in device memory (f16 and bf16 as
/// their 16-bit patterns, integers in two's complement). Values of a type this crate does not
/// know (`HostValues` is non-exhaustive) are [`CudaError::UnsupportedElementType`].
pub fn to_bytes(values: &HostValues) -> Result<Vec<u8>> {
    fn flatten<const N: usize, T: Copy>(items: &[T], bytes: impl Fn(T) -> [u8; N]) -> Vec<u8> {
        items.iter().flat_map(|&item| bytes(item)).collect()
    }
    Ok(match values {
        HostValues::F32(items) => flatten(items, f32::to_ne_bytes),
        HostValues::F64(items) => flatten(items, f64::to_ne_bytes),
        HostValues::F16(items) => flatten(items, |v| v.to_bits().to_ne_bytes()),
        HostValues::BF16(items) => flatten(items, |v| v.to_bits().to_ne_bytes()),
        HostValues::I32(items) => flatten(items, i32::to_ne_bytes),
        HostValues::I64(items) => flatten(items, i64::to_ne_bytes),
        HostValues::I8(items) => flatten(items, i8::to_ne_bytes),
        HostValues::U8(items) => flatten(items, u8::to_ne_bytes),
        HostValues::U32(items) => flatten(items, u32::to_ne_bytes),
        HostValues::U64(items) => flatten(items, u64::to_ne_bytes),
        other => {
            return Err(CudaError::UnsupportedElementType {
                element_type: other.element_type(),
            });
        }
    })
}

/// Read `bytes` (native-endian elements of `element_type`; a trailing partial element is
/// ignored) back into host values. A type this crate does not know is
/// [`CudaError::UnsupportedElementType`].
pub fn from_bytes(element_type: ElementType, bytes: &[u8]) -> Result<HostValues> {
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
    Ok(match element_type {
        ElementType::F32 => HostValues::F32(gather(bytes, f32::from_ne_bytes)),
        ElementType::F64 => HostValues::F64(gather(bytes, f64::from_ne_bytes)),
        ElementType::F16 => {
            HostValues::F16(gather(bytes, |b| f16::from_bits(u16::from_ne_bytes(b))))
        }
        ElementType::BF16 => {
            HostValues::BF16(gather(bytes, |b| bf16::from_bits(u16::from_ne_bytes(b))))
        }
        ElementType::I32 => HostValues::I32(gather(bytes, i32::from_ne_bytes)),
        ElementType::I64 => HostValues::I64(gather(bytes, i64::from_ne_bytes)),
        ElementType::I8 => HostValues::I8(gather(bytes, i8::from_ne_bytes)),
        ElementType::U8 => HostValues::U8(gather(bytes, u8::from_ne_bytes)),
        ElementType::U32 => HostValues::U32(gather(bytes, u32::from_ne_bytes)),
        ElementType::U64 => HostValues::U64(gather(bytes, u64::from_ne_bytes)),
        other => {
            return Err(CudaError::UnsupportedElementType {
                element_type: other,
            });
        }
    })
}

impl HostTensors for CudaCollective {
    /// Allocate on `device` and copy `values` in, on the device's stream; returns once the copy
    /// is complete.
    /// A type without kernels is [`CudaError::UnsupportedElementType`].
    fn upload(&self, device: DeviceId, values: &HostValues) -> Result<CudaTensor> {
        self.upload_bytes(
            device,
            values.element_type(),
            values.len(),
            &to_bytes(values)?,
        )
    }

    /// Copy a tensor's elements to the host, after all work queued on its stream.
    fn download(&self, tensor: &CudaTensor) -> Result<HostValues> {
        let bytes = self.download_bytes(tensor)?;
        from_bytes(tensor.element_type(), &bytes)
    }

    /// Every operation on every type with kernels ([`kernels::supports`]).
    fn supports(&self, element_type: ElementType, operation: ReduceOperation) -> bool {
        kernels::supports(element_type, operation)
    }

    /// Every type with kernels ([`kernels::KERNEL_TYPES`]); any other is refused on upload and
    /// in `begin` with [`CudaError::UnsupportedElementType`].
    fn supports_type(&self, element_type: ElementType) -> bool {
        kernels::supports_type(element_type)
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
            let bytes = to_bytes(&values).expect("a known type");
            assert_eq!(bytes.len(), values.len() * values.element_type().size());
            assert_eq!(
                from_bytes(values.element_type(), &bytes).ok(),
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
        let bytes = to_bytes(&HostValues::BF16(vec![bf16::from_f32(1.0)])).ok();
        assert_eq!(bytes, Some(0x3f80_u16.to_ne_bytes().to_vec()));
        let bytes = to_bytes(&HostValues::F16(vec![f16::from_f32(1.0)])).ok();
        assert_eq!(bytes, Some(0x3c00_u16.to_ne_bytes().to_vec()));
    }

    #[test]
    fn integers_are_stored_in_their_own_width_as_twos_complement() {
        assert_eq!(
            to_bytes(&HostValues::I8(vec![-1, -128])).ok(),
            Some(vec![0xff, 0x80])
        );
        assert_eq!(
            to_bytes(&HostValues::U8(vec![255, 7])).ok(),
            Some(vec![0xff, 7])
        );
        assert_eq!(
            to_bytes(&HostValues::U32(vec![0xdead_beef])).ok(),
            Some(0xdead_beef_u32.to_ne_bytes().to_vec())
        );
        assert_eq!(
            to_bytes(&HostValues::U64(vec![u64::MAX - 1])).ok(),
            Some((u64::MAX - 1).to_ne_bytes().to_vec())
        );
        // The same byte reads back as the type says: signed or not.
        assert_eq!(
            from_bytes(ElementType::I8, &[0xfe]).ok(),
            Some(HostValues::I8(vec![-2]))
        );
        assert_eq!(
            from_bytes(ElementType::U8, &[0xfe]).ok(),
            Some(HostValues::U8(vec![254]))
        );
    }

    #[test]
    fn a_trailing_partial_element_is_ignored() {
        let bytes = [1, 0, 0, 0, 2, 0];
        let values = from_bytes(ElementType::U32, &bytes).ok();
        assert_eq!(values.map(|values| values.len()), Some(1));
        assert_eq!(
            from_bytes(ElementType::U64, &bytes).ok(),
            Some(HostValues::U64(vec![]))
        );
    }
}
