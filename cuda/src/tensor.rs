//! [`CudaTensor`] (the executor's device tensor) and [`CudaPrepared`] (a tensor plus the event
//! that captures its producer stream).

use crate::buffer::DeviceBuffer;
use crate::context::Scoped;
use crate::error::{CudaError, Result};
use cudarc::driver::{CudaEvent, CudaStream};
use ruccl_core::DeviceId;
use ruccl_core::ElementType;
use std::fmt;
use std::sync::Arc;

/// A tensor in device memory: `len` elements of one [`ElementType`] on one logical device.
///
/// Its elements never leave the device except through `HostTensors::download`. Work that
/// produces or consumes it belongs on [`CudaTensor::stream`] (its logical device's stream, where
/// collectives queue that device's work), or must be ordered with it by events. Dropping the
/// tensor hands its memory back to its device's buffer cache, where only work ordered after
/// everything queued on that stream reuses it; without a cache (or once the executor is gone)
/// the drop completes the stream and frees the memory.
pub struct CudaTensor {
    buffer: DeviceBuffer,
    element_type: ElementType,
    len: usize,
    device: DeviceId,
    ordinal: usize,
}

impl CudaTensor {
    /// Wrap `buffer` as a tensor of `len` elements of `element_type`; the buffer must hold
    /// exactly `len * element_type.size()` bytes ([`CudaError::TensorSize`] otherwise, in every
    /// build).
    pub(crate) fn from_buffer(
        buffer: DeviceBuffer,
        element_type: ElementType,
        len: usize,
        device: DeviceId,
        ordinal: usize,
    ) -> Result<Self> {
        if len.checked_mul(element_type.size()) != Some(buffer.bytes()) {
            return Err(CudaError::TensorSize {
                len,
                element_type,
                bytes: buffer.bytes(),
            });
        }
        Ok(Self {
            buffer,
            element_type,
            len,
            device,
            ordinal,
        })
    }

    /// The element type.
    pub fn element_type(&self) -> ElementType {
        self.element_type
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The size in bytes.
    pub fn bytes(&self) -> usize {
        self.buffer.bytes()
    }

    /// The logical device the tensor lives on.
    pub fn device(&self) -> DeviceId {
        self.device
    }

    /// The GPU ordinal its memory is on.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The stream that produces and consumes this tensor (its logical device's stream). Queue
    /// work that writes the tensor here before submitting it; work queued here after a
    /// collective returns sees the result.
    pub fn stream(&self) -> &Arc<CudaStream> {
        self.buffer.stream()
    }

    /// The device address of the first element (0 for an empty tensor), for interoperation with
    /// other CUDA code. The memory belongs to the tensor's context and is valid while the tensor
    /// lives; accessing it from another stream must be ordered with events.
    pub fn device_address(&self) -> u64 {
        self.buffer.base_address()
    }

    /// The underlying buffer.
    #[cfg(feature = "harness")]
    pub(crate) fn buffer(&self) -> &DeviceBuffer {
        &self.buffer
    }

    /// The context its memory belongs to.
    pub(crate) fn context_handle(&self) -> cudarc::driver::sys::CUcontext {
        self.buffer.context().cu_ctx()
    }

    /// The underlying buffer, taken out (for a collective working in place).
    pub(crate) fn into_buffer(self) -> DeviceBuffer {
        self.buffer
    }
}

impl fmt::Debug for CudaTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaTensor")
            .field("element_type", &self.element_type)
            .field("len", &self.len)
            .field("device", &self.device)
            .field("ordinal", &self.ordinal)
            .finish_non_exhaustive()
    }
}

/// A tensor submitted for a collective, with a capture of its producer stream at submission:
/// nothing when that stream is the one the collective runs on for its device (always so for
/// tensors this executor made: stream order is the capture), else an event recorded on it, which
/// the collective's stream waits on — never the host.
pub struct CudaPrepared {
    tensor: CudaTensor,
    ready: Option<Scoped<CudaEvent>>,
}

impl CudaPrepared {
    /// Pair a tensor with the event marking its producer stream's progress, if one is needed.
    pub(crate) fn new(tensor: CudaTensor, ready: Option<Scoped<CudaEvent>>) -> Self {
        Self { tensor, ready }
    }

    /// The submitted tensor.
    pub fn tensor(&self) -> &CudaTensor {
        &self.tensor
    }

    /// The tensor and the producer-stream event, taken apart (for `begin`).
    pub(crate) fn into_parts(self) -> (CudaTensor, Option<Scoped<CudaEvent>>) {
        (self.tensor, self.ready)
    }

    /// Give the tensor back.
    pub fn into_tensor(self) -> CudaTensor {
        self.tensor
    }
}

impl fmt::Debug for CudaPrepared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaPrepared")
            .field("tensor", &self.tensor)
            .finish_non_exhaustive()
    }
}
