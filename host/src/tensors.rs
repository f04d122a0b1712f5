//! [`HostTensors`]: what a harness needs from a device besides the collective contract.

use crate::{ElementType, HostValues};
use ruccl_core::{DeviceId, NativeCollectiveDevice, ReduceOperation};

/// A device whose tensors a harness can create from and read back to host values. Only test and
/// measurement code uses this; the collective path never leaves the device.
///
/// An adapter implements `upload` and `download` (usually through
/// [`HostValues::to_ne_bytes`] and [`HostValues::from_ne_bytes`], or the raw pointers of
/// [`HostValues::as_ptr`]) and narrows `supports`/`supports_type` when it lacks kernels for some
/// combinations.
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

    /// Give back to the system the memory the device keeps for reuse (a caching allocator's
    /// free blocks, as `torch.cuda.empty_cache` does), so that a caller about to time calls of
    /// one size does not pay, inside its timing, for freeing what calls of other sizes left
    /// behind. Tensors alive are untouched. A device that keeps nothing does nothing, the
    /// default.
    fn release_cached(&self) {}
}
