//! [`SimTensor`] and [`SimPrepared`]: the simulated device's values.

use crate::host::{ElementType, HostValues};
use ruccl_core::DeviceId;

/// A tensor in simulated device memory: typed elements owned by one device.
#[derive(Clone, Debug, PartialEq)]
pub struct SimTensor {
    device: DeviceId,
    values: HostValues,
}

impl SimTensor {
    /// A tensor holding `values` in `device`'s memory.
    pub fn new(device: DeviceId, values: HostValues) -> Self {
        Self { device, values }
    }

    /// The device whose memory holds the tensor.
    pub fn device(&self) -> DeviceId {
        self.device
    }

    /// The element type.
    pub fn element_type(&self) -> ElementType {
        self.values.element_type()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The elements (host memory is the simulated device memory, so this is free).
    pub fn values(&self) -> &HostValues {
        &self.values
    }

    /// The elements, consuming the tensor.
    pub fn into_values(self) -> HostValues {
        self.values
    }
}

/// A tensor checked to live on the device it was prepared for. The simulated device has no
/// streams, so there is nothing else to capture; `begin` takes the tensor's elements as the
/// rank's working buffer when the plan works in place.
#[derive(Clone, Debug, PartialEq)]
pub struct SimPrepared {
    tensor: SimTensor,
}

impl SimPrepared {
    /// Prepare `tensor` (checked by the caller to be on the right device).
    pub(crate) fn new(tensor: SimTensor) -> Self {
        Self { tensor }
    }

    /// The prepared tensor.
    pub fn tensor(&self) -> &SimTensor {
        &self.tensor
    }

    /// The prepared tensor, consuming the preparation.
    pub fn into_tensor(self) -> SimTensor {
        self.tensor
    }
}
