//! [`NativeCommunicators`]: the registry that hands out one communicator per exact, ordered
//! device list.

use crate::contain::infallible_call;
use crate::error::{NativeCollectiveError, Phase};
use crate::sync::{Arc, Mutex};
use crate::{DeviceId, NativeCollectiveDevice, NativeCommunicator};
use std::collections::BTreeMap;
use std::fmt;

/// A registry of communicators keyed by the exact ordered device list.
///
/// Concurrent [`communicator`](Self::communicator) calls for one list get the same communicator;
/// different lists — the same devices in another order included — never share one. An aborted
/// communicator is never handed out again: the next request for its list replaces it with a
/// fresh one (holders of the old one keep it, aborted).
pub struct NativeCommunicators<D: NativeCollectiveDevice> {
    device: D,
    /// Lookup and insertion happen under one acquisition of this lock, so two callers can never
    /// both miss and create two communicators for one list.
    groups: Mutex<BTreeMap<Vec<DeviceId>, Arc<NativeCommunicator<D>>>>,
}

impl<D: NativeCollectiveDevice> NativeCommunicators<D> {
    /// An empty registry whose communicators drive `device`.
    pub fn new(device: D) -> Self {
        Self {
            device,
            groups: Mutex::new(BTreeMap::new()),
        }
    }

    /// The communicator for exactly this ordered device list, created on first use (or after the
    /// previous one was aborted). Fails with [`NativeCollectiveError::InvalidGroup`] for an empty
    /// list or a repeated device.
    pub fn communicator(
        &self,
        devices: Vec<DeviceId>,
    ) -> Result<Arc<NativeCommunicator<D>>, NativeCollectiveError> {
        let mut groups = self.groups.lock();
        if let Some(existing) = groups.get(&devices) {
            if !existing.is_aborted() {
                return Ok(Arc::clone(existing));
            }
        }
        // Cloning the device handle is device code: a panic there must not unwind through us.
        let device = infallible_call(Phase::CloneDevice, None, || self.device.clone())?;
        let created = Arc::new(NativeCommunicator::new(devices.clone(), device)?);
        // An aborted predecessor is replaced here; dropping our reference to it drops no device
        // value (an aborted communicator holds no deposits), only its state.
        groups.insert(devices, Arc::clone(&created));
        Ok(created)
    }
}

impl<D: NativeCollectiveDevice> fmt::Debug for NativeCommunicators<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NativeCommunicators")
            .finish_non_exhaustive()
    }
}
