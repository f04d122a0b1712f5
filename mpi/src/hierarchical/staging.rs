//! What the hierarchical communicator needs from the local device ([`StagingDevice`]: tensors
//! into and out of the engine's buffers) and from the engine's buffer ([`LayoutBuffer`]: the
//! cutting and gluing between the local phases and the inter-process step).
//!
//! Both are small on purpose: they are all a GPU pair (a CUDA device, NCCL's device buffers)
//! has to provide to slot in; MPI's buffer, [`HostValues`], implements them here, and so do the
//! simulated device and its fault decorator with the `sim` feature (off by default).

use crate::buffer;
use ruccl_core::{DeviceId, ElementType, NativeCollectiveDevice, TensorInfo};
use ruccl_host::HostValues;
#[cfg(feature = "sim")]
use ruccl_sim::{FaultyDevice, FaultyError, FaultyTensor, SimDevice, SimTensor};
use std::ops::Range;

/// A device whose tensors move into and out of an inter-process engine's buffers `B` (host
/// memory for MPI; for a GPU engine the device buffer itself, and these moves are free).
///
/// Every method may fail or panic; the hierarchical communicator contains both and turns them
/// into a failure of the generation that every rank of every process receives.
pub trait StagingDevice<B>: NativeCollectiveDevice {
    /// The length and element type of a tensor, without moving its elements.
    fn tensor_info(&self, tensor: &Self::Tensor) -> TensorInfo;

    /// The tensor's elements as an engine buffer, consuming the tensor.
    fn stage_out(&self, tensor: Self::Tensor) -> Result<B, Self::Error>;

    /// A tensor on `device` holding `buffer`'s elements.
    fn stage_in(&self, device: DeviceId, buffer: B) -> Result<Self::Tensor, Self::Error>;
}

/// The simulated device keeps its tensors in host memory, as the same host values: staging moves
/// the vector, it never copies.
#[cfg(feature = "sim")]
impl StagingDevice<HostValues> for SimDevice {
    fn tensor_info(&self, tensor: &SimTensor) -> TensorInfo {
        TensorInfo {
            len: tensor.len(),
            element: tensor.element_type(),
        }
    }

    fn stage_out(&self, tensor: SimTensor) -> Result<HostValues, Self::Error> {
        Ok(tensor.into_values())
    }

    fn stage_in(&self, device: DeviceId, buffer: HostValues) -> Result<SimTensor, Self::Error> {
        Ok(SimTensor::new(device, buffer))
    }
}

/// The fault decorator stages through the device it wraps. A tensor armed to panic when dropped
/// (a `drop:what=output` fault) panics as `stage_out` takes its contents, as a device's would.
#[cfg(feature = "sim")]
impl<D: StagingDevice<B>, B> StagingDevice<B> for FaultyDevice<D> {
    fn tensor_info(&self, tensor: &FaultyTensor<D::Tensor>) -> TensorInfo {
        match tensor.get() {
            Some(inner) => self.inner().tensor_info(inner),
            None => TensorInfo {
                len: 0,
                element: ElementType::F32,
            },
        }
    }

    fn stage_out(&self, tensor: FaultyTensor<D::Tensor>) -> Result<B, Self::Error> {
        let inner = tensor.into_inner().ok_or(FaultyError::PhantomTensor)?;
        self.inner().stage_out(inner).map_err(FaultyError::Device)
    }

    fn stage_in(
        &self,
        device: DeviceId,
        buffer: B,
    ) -> Result<FaultyTensor<D::Tensor>, Self::Error> {
        self.inner()
            .stage_in(device, buffer)
            .map(FaultyTensor::new)
            .map_err(FaultyError::Device)
    }
}

/// The buffer operations the hierarchical communicator performs around the inter-process step:
/// gluing the local shards together, padding and trimming, cutting the result into shards, and
/// the `Mean` scaling. On host memory for MPI; a GPU engine's buffer would do them with kernels.
pub trait LayoutBuffer: Sized + Send {
    /// The element type.
    fn element_type(&self) -> ElementType;

    /// Number of elements.
    fn len(&self) -> usize;

    /// Whether there are no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Trims to `len` elements, or pads with zeros up to it.
    fn resize(&mut self, len: usize);

    /// Appends `other`'s elements; `false` (nothing changed) if the element types differ.
    fn append(&mut self, other: Self) -> bool;

    /// Splits off the elements from `at` on (all of them if `at` is 0; none past the end).
    fn split_off(&mut self, at: usize) -> Self;

    /// A copy.
    fn duplicate(&self) -> Self;

    /// A new buffer of `len` zeros except that, for each `(from, to)`, elements `from` of this
    /// buffer land at `to..to + from.len()` (ranges outside either buffer are cut off).
    fn rearranged(&self, len: usize, moves: &[(Range<usize>, usize)]) -> Self;

    /// Divides every element by `count` as the simulated device's `Mean` does (one rounding for
    /// floats, toward zero for integers).
    fn divide_by(&mut self, count: usize);

    /// 64-bit integers (the layout exchange at creation).
    fn from_words(words: Vec<i64>) -> Self;

    /// The 64-bit integers of a buffer made by [`from_words`](Self::from_words) (or any `i64`
    /// buffer); `None` for another element type.
    fn into_words(self) -> Option<Vec<i64>>;
}

/// Runs the same expression on the vectors inside two buffers of one type; `$other` otherwise
/// (another type, or one added to ruccl-host after this crate).
macro_rules! pair {
    ($left:expr, $right:expr, ($a:ident, $b:ident) => $body:expr, $other:expr) => {
        match ($left, $right) {
            (HostValues::F32($a), HostValues::F32($b)) => $body,
            (HostValues::F64($a), HostValues::F64($b)) => $body,
            (HostValues::F16($a), HostValues::F16($b)) => $body,
            (HostValues::BF16($a), HostValues::BF16($b)) => $body,
            (HostValues::I32($a), HostValues::I32($b)) => $body,
            (HostValues::I64($a), HostValues::I64($b)) => $body,
            (HostValues::I8($a), HostValues::I8($b)) => $body,
            (HostValues::U8($a), HostValues::U8($b)) => $body,
            (HostValues::U32($a), HostValues::U32($b)) => $body,
            (HostValues::U64($a), HostValues::U64($b)) => $body,
            _ => $other,
        }
    };
}

impl LayoutBuffer for HostValues {
    fn element_type(&self) -> ElementType {
        HostValues::element_type(self)
    }

    fn len(&self) -> usize {
        HostValues::len(self)
    }

    fn resize(&mut self, len: usize) {
        HostValues::resize(self, len);
    }

    fn append(&mut self, other: Self) -> bool {
        HostValues::append(self, other).is_ok()
    }

    fn split_off(&mut self, at: usize) -> Self {
        HostValues::split_off(self, at)
    }

    fn duplicate(&self) -> Self {
        self.clone()
    }

    fn rearranged(&self, len: usize, moves: &[(Range<usize>, usize)]) -> Self {
        let mut target = self.zeros_like(len);
        pair!(&mut target, self, (into, from) => {
            for (range, to) in moves {
                let end = range.end.min(from.len());
                let start = range.start.min(end);
                let count = (end - start).min(into.len().saturating_sub(*to));
                if count > 0 {
                    into[*to..*to + count].copy_from_slice(&from[start..start + count]);
                }
            }
        }, ());
        target
    }

    fn divide_by(&mut self, count: usize) {
        buffer::divide_by(self, count);
    }

    fn from_words(words: Vec<i64>) -> Self {
        HostValues::I64(words)
    }

    fn into_words(self) -> Option<Vec<i64>> {
        match self {
            HostValues::I64(words) => Some(words),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rearranged_places_ranges_and_zero_fills_the_rest() {
        let source = HostValues::I32(vec![1, 2, 3, 4, 5, 6]);
        let moved = source.rearranged(8, &[(0..2, 0), (4..6, 5)]);
        assert_eq!(moved, HostValues::I32(vec![1, 2, 0, 0, 0, 5, 6, 0]));
        // Ranges past either end are cut, never a panic.
        let cut = source.rearranged(3, &[(4..9, 1)]);
        assert_eq!(cut, HostValues::I32(vec![0, 5, 6]));
    }

    #[test]
    fn append_refuses_another_element_type() {
        let mut buffer = HostValues::F32(vec![1.0]);
        assert!(!LayoutBuffer::append(&mut buffer, HostValues::I32(vec![2])));
        assert!(LayoutBuffer::append(
            &mut buffer,
            HostValues::F32(vec![2.0])
        ));
        assert_eq!(buffer, HostValues::F32(vec![1.0, 2.0]));
    }

    #[cfg(feature = "sim")]
    #[test]
    fn staging_the_simulated_device_moves_the_vector() {
        let device = SimDevice::new();
        let tensor = device
            .stage_in(DeviceId::new(3), HostValues::F64(vec![1.5, 2.5]))
            .unwrap();
        assert_eq!(tensor.device(), DeviceId::new(3));
        let info = device.tensor_info(&tensor);
        assert_eq!((info.len, info.element), (2, ElementType::F64));
        assert_eq!(
            device.stage_out(tensor).unwrap(),
            HostValues::F64(vec![1.5, 2.5])
        );
    }
}
