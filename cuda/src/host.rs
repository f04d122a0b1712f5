//! [`HostTensors`] for the CUDA executor (feature `harness`): how test and measurement harnesses
//! (the sim crate's conformance suite and fault trial, `ruccl-perf --backend cuda`) put values on
//! a logical device and read them back. The collective path never uses this.

use crate::device::CudaCollective;
use crate::error::{CudaError, Result};
use crate::kernels;
use crate::tensor::CudaTensor;
use ruccl_core::{DeviceId, ElementType, ReduceOperation};
use ruccl_host::{HostTensors, HostValues};

impl HostTensors for CudaCollective {
    /// Allocate on `device` and copy `values` in (their native-endian bytes,
    /// [`HostValues::to_ne_bytes`]), on the device's stream; returns once the copy is complete.
    /// A type without kernels is [`CudaError::UnsupportedElementType`].
    fn upload(&self, device: DeviceId, values: &HostValues) -> Result<CudaTensor> {
        self.upload_bytes(
            device,
            values.element_type(),
            values.len(),
            &values.to_ne_bytes(),
        )
    }

    /// Copy a tensor's elements to the host, after all work queued on its stream.
    fn download(&self, tensor: &CudaTensor) -> Result<HostValues> {
        let bytes = self.download_bytes(tensor)?;
        let element_type = tensor.element_type();
        HostValues::from_ne_bytes(element_type, &bytes)
            .ok_or(CudaError::UnsupportedElementType { element_type })
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
