//! [`SimTensor`] and [`SimPrepared`]: the simulated device's values.

use super::census::{Registry, Token, ValueKind};
use super::memory::Keeping;
use super::pool::Pool;
use crate::host::{ElementType, HostValues};
use ruccl_core::DeviceId;

/// A tensor in simulated device memory: typed elements owned by one device.
///
/// A tensor the device made (by `upload`, or as an output of `finish`) is counted in the
/// device's [census](crate::SimDevice::census) until it is dropped; one made with
/// [`SimTensor::new`] outside the device is not. A clone is a new tensor (counted if the
/// original was). Equality compares the device and the elements. When a tensor the device made
/// is dropped, its allocation goes back to the device's pool for reuse (see
/// [`SimDeviceBuilder::pool_bytes`](crate::SimDeviceBuilder::pool_bytes)).
#[derive(Clone, Debug)]
pub struct SimTensor {
    device: DeviceId,
    values: HostValues,
    token: Option<Token>,
    /// Where the allocation goes when the tensor is dropped; `None` for one made outside, and
    /// for one too small for the pool to keep.
    pool: Option<Pool>,
}

impl Drop for SimTensor {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            pool.give_values(std::mem::replace(
                &mut self.values,
                HostValues::F32(Vec::new()),
            ));
        }
    }
}

impl PartialEq for SimTensor {
    fn eq(&self, other: &Self) -> bool {
        self.device == other.device && self.values == other.values
    }
}

impl SimTensor {
    /// A tensor holding `values` in `device`'s memory, made outside the device: not counted in
    /// any census.
    pub fn new(device: DeviceId, values: HostValues) -> Self {
        Self {
            device,
            values,
            token: None,
            pool: None,
        }
    }

    /// A tensor the device made, counted in its census (if it keeps one), its allocation given
    /// back to its pool when dropped.
    pub(crate) fn counted(device: DeviceId, values: HostValues, keeping: Keeping<'_>) -> Self {
        Self {
            device,
            pool: keeping.pool.keeper_of(&values),
            values,
            token: keeping.census.map(|census| census.token(ValueKind::Tensor)),
        }
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

    /// Whether the tensor is counted in a device's census.
    pub fn is_counted(&self) -> bool {
        self.token.is_some()
    }

    /// The elements, consuming the tensor (their allocation leaves the device's pool's reach).
    pub fn into_values(mut self) -> HostValues {
        std::mem::replace(&mut self.values, HostValues::F32(Vec::new()))
    }
}

/// A tensor checked to live on the device it was prepared for. The simulated device has no
/// streams, so there is nothing else to capture; `begin` takes the tensor's elements as the
/// rank's working buffer when the plan works in place.
///
/// Counted in the device's [census](crate::SimDevice::census) from `prepare` until it is
/// dropped (by `begin`, which takes it, or by whoever holds it); the tensor inside is counted
/// as a tensor as well, if it was. Equality compares the tensors.
#[derive(Clone, Debug)]
pub struct SimPrepared {
    tensor: SimTensor,
    /// The preparation's entry in the census.
    _token: Option<Token>,
}

impl PartialEq for SimPrepared {
    fn eq(&self, other: &Self) -> bool {
        self.tensor == other.tensor
    }
}

impl SimPrepared {
    /// Prepare `tensor` (checked by the caller to be on the right device), counted in `census`.
    pub(crate) fn new(tensor: SimTensor, census: Option<&Registry>) -> Self {
        Self {
            tensor,
            _token: census.map(|census| census.token(ValueKind::Prepared)),
        }
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
