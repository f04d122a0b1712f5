//! [`SimTensor`] and [`SimPrepared`]: the simulated device's values.

use super::pool::{self, Pool};
use crate::host::{ElementType, HostValues};
use ruccl_core::DeviceId;
use std::fmt;

/// A large prepared tensor, shared between the prepared input and the work that reads it: the
/// facade lint's one deliberate exception in the simulated device. Every reference-count change
/// happens on the thread that runs the generation (the prepared value is moved there before
/// `begin`), and the elements are never written, so there is nothing here for a model checker to
/// see: std's `Arc` is used under every cfg.
#[allow(
    clippy::disallowed_types,
    reason = "immutable sharing on one thread: nothing for loom or shuttle to check"
)]
pub(crate) type SharedTensor = std::sync::Arc<SimTensor>;

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
/// streams, so there is nothing else to capture.
///
/// `begin` does not copy a large prepared tensor: the generation's work shares it (read-only)
/// until `finish`, and a prepared value dropped holding the last reference gives the buffer back
/// to its device, which reuses it for a later generation's outputs. A small tensor (below
/// 64 KiB) is held directly and copied by `begin`, which is cheaper than
/// sharing it. Clones share a large tensor and copy a small one.
#[derive(Clone)]
pub struct SimPrepared {
    tensor: Held,
    /// Where a large buffer goes when this is the last reference (`None`: nowhere).
    pool: Option<Pool>,
}

/// How a prepared tensor is held.
#[derive(Clone)]
enum Held {
    /// A small tensor, copied by `begin`.
    Own(SimTensor),
    /// A large tensor, shared with the work.
    Shared(SharedTensor),
}

impl SimPrepared {
    /// Prepare `tensor`, returning a large buffer to `pool` when dropped.
    pub(crate) fn new(tensor: SimTensor, pool: Option<Pool>) -> Self {
        if pool::worth_pooling(&tensor.values) {
            Self {
                tensor: Held::Shared(SharedTensor::new(tensor)),
                pool,
            }
        } else {
            Self {
                tensor: Held::Own(tensor),
                pool: None,
            }
        }
    }

    /// The prepared tensor.
    pub fn tensor(&self) -> &SimTensor {
        match &self.tensor {
            Held::Own(tensor) => tensor,
            Held::Shared(tensor) => tensor,
        }
    }

    /// The prepared tensor, consuming the preparation.
    pub fn into_tensor(mut self) -> SimTensor {
        self.pool = None;
        let placeholder = Held::Own(SimTensor::new(
            self.tensor().device(),
            HostValues::F32(Vec::new()),
        ));
        match std::mem::replace(&mut self.tensor, placeholder) {
            Held::Own(tensor) => tensor,
            // The last reference unless a generation's work (or a clone) still shares it.
            Held::Shared(shared) => {
                SharedTensor::try_unwrap(shared).unwrap_or_else(|shared| SimTensor::clone(&shared))
            }
        }
    }

    /// A handle on the tensor for the work of a generation, if it is shared (large) rather than
    /// to be copied (small).
    pub(crate) fn shared(&self) -> Option<SharedTensor> {
        match &self.tensor {
            Held::Own(_) => None,
            Held::Shared(tensor) => Some(SharedTensor::clone(tensor)),
        }
    }
}

impl Drop for SimPrepared {
    fn drop(&mut self) {
        let Some(pool) = self.pool.take() else {
            return;
        };
        if let Held::Shared(shared) = &mut self.tensor {
            if let Some(tensor) = SharedTensor::get_mut(shared) {
                let values = std::mem::replace(&mut tensor.values, HostValues::F32(Vec::new()));
                pool.give(values);
            }
        }
    }
}

impl PartialEq for SimPrepared {
    fn eq(&self, other: &Self) -> bool {
        self.tensor() == other.tensor()
    }
}

impl fmt::Debug for SimPrepared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimPrepared")
            .field("tensor", self.tensor())
            .finish_non_exhaustive()
    }
}
