//! [`HostTensors`] for the CUDA executor (feature `harness`): how test and measurement harnesses
//! (the sim crate's conformance suite and fault trial, `ruccl-perf --backend cuda`) put values on
//! a logical device and read them back. The collective path never uses this.

use crate::device::CudaCollective;
use crate::error::Result;
use crate::tensor::CudaTensor;
use half::{bf16, f16};
use ruccl_core::DeviceId;
use ruccl_sim::host::{ElementType, HostTensors, HostValues};

/// The values' elements as native-endian bytes, as they lie in device memory (f16 and bf16 as
/// their 16-bit patterns).
pub fn to_bytes(values: &HostValues) -> Vec<u8> {
    fn flatten<const N: usize, T: Copy>(items: &[T], bytes: impl Fn(T) -> [u8; N]) -> Vec<u8> {
        items.iter().flat_map(|&item| bytes(item)).collect()
    }
    match values {
        HostValues::F32(items) => flatten(items, f32::to_ne_bytes),
        HostValues::F64(items) => flatten(items, f64::to_ne_bytes),
        HostValues::F16(items) => flatten(items, |v| v.to_bits().to_ne_bytes()),
        HostValues::BF16(items) => flatten(items, |v| v.to_bits().to_ne_bytes()),
        HostValues::I32(items) => flatten(items, i32::to_ne_bytes),
        HostValues::I64(items) => flatten(items, i64::to_ne_bytes),
    }
}

/// Read `bytes` (native-endian elements of `element_type`; a trailing partial element is
/// ignored) back into host values.
pub fn from_bytes(element_type: ElementType, bytes: &[u8]) -> HostValues {
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
    match element_type {
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
    }
}

impl HostTensors for CudaCollective {
    /// Allocate on `device` and copy `values` in, on the device's stream; returns once the copy
    /// is complete.
    fn upload(&self, device: DeviceId, values: &HostValues) -> Result<CudaTensor> {
        self.upload_bytes(
            device,
            values.element_type(),
            values.len(),
            &to_bytes(values),
        )
    }

    /// Copy a tensor's elements to the host, after all work queued on its stream.
    fn download(&self, tensor: &CudaTensor) -> Result<HostValues> {
        let bytes = self.download_bytes(tensor)?;
        Ok(from_bytes(tensor.element_type(), &bytes))
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
            HostValues::I32(vec![]),
        ]
    }

    #[test]
    fn every_element_type_round_trips_through_bytes() {
        for values in samples() {
            let bytes = to_bytes(&values);
            assert_eq!(bytes.len(), values.len() * values.element_type().size());
            assert_eq!(from_bytes(values.element_type(), &bytes), values);
        }
    }

    #[test]
    fn half_precision_is_stored_as_its_bit_pattern() {
        let bytes = to_bytes(&HostValues::BF16(vec![bf16::from_f32(1.0)]));
        assert_eq!(bytes, 0x3f80_u16.to_ne_bytes());
        let bytes = to_bytes(&HostValues::F16(vec![f16::from_f32(1.0)]));
        assert_eq!(bytes, 0x3c00_u16.to_ne_bytes());
    }
}
