//! The devices the scenarios drive.
//!
//! - [`lean`]: a [`SimDevice`] that records no traffic, so its ledger lock stays off the
//!   collective path and adds no interleavings; the success scenarios run on it.
//! - [`faulty`]: the same, wrapped in a [`FaultyDevice`] with a [`FaultPlan`].
//! - [`HeldRing`]: a decorator that holds the first ring at `begin` until the harness releases it,
//!   so that an abort can be made to land while the ring runs.
//!
//! [`ModelDevice`] is what the scenarios need on top of the executor trait: turn host values into
//! a rank's tensor and back.

use ruccl_core::sync::{Arc, Condvar, Mutex};
use ruccl_core::{DeviceId, NativeCollectiveDevice, ReduceOperation};
use ruccl_sim::{FaultPlan, FaultyDevice, FaultyTensor, HostTensors, HostValues, SimDevice};
use std::fmt;
use std::ops::Range;

/// The devices of a world of `world` ranks: rank `r` on device `r`.
pub fn devices(world: usize) -> Vec<DeviceId> {
    (0..world)
        .map(|rank| DeviceId::new(u32::try_from(rank).unwrap_or(u32::MAX)))
        .collect()
}

/// A simulated device that records no traffic: no lock on the collective path.
pub fn lean() -> SimDevice {
    SimDevice::builder().record_traffic(false).build()
}

/// A lean simulated device for `world` ranks, injecting `plan`.
pub fn faulty(world: usize, plan: FaultPlan) -> FaultyDevice<SimDevice> {
    FaultyDevice::new(lean(), devices(world), plan)
}

/// A device the scenarios can feed and read: host `i64` values in, host values out.
pub trait ModelDevice: HostTensors {
    /// Make a tensor that no fault will make panic when dropped (an output the fault injector
    /// armed is defused here; the harness is not device code under test).
    fn defuse(&self, tensor: &mut Self::Tensor);

    /// `values` as a tensor on `device`. A device that cannot hold them is a harness bug.
    fn tensor(&self, device: DeviceId, values: Vec<i64>) -> Self::Tensor {
        match self.upload(device, &HostValues::I64(values)) {
            Ok(tensor) => tensor,
            Err(error) => panic!("harness: upload to {device} failed: {error}"),
        }
    }

    /// The elements of an output tensor, which is then dropped (defused).
    fn read(&self, mut tensor: Self::Tensor) -> Vec<i64> {
        self.defuse(&mut tensor);
        match self.download(&tensor) {
            Ok(HostValues::I64(values)) => values,
            Ok(other) => panic!(
                "harness: an output of element type {} instead of int64",
                other.element_type()
            ),
            Err(error) => panic!("harness: download failed: {error}"),
        }
    }
}

impl ModelDevice for SimDevice {
    fn defuse(&self, _tensor: &mut Self::Tensor) {}
}

impl<D: ModelDevice> ModelDevice for FaultyDevice<D> {
    fn defuse(&self, tensor: &mut FaultyTensor<D::Tensor>) {
        tensor.disarm();
        if let Some(inner) = tensor.get_mut() {
            self.inner().defuse(inner);
        }
    }
}

/// Where the held ring stands.
#[derive(Debug)]
struct Hold {
    /// The first `begin` is still to be held.
    armed: bool,
    /// A `begin` is being held now (the ring is running, outside the state lock).
    running: bool,
    /// The harness let it go on.
    released: bool,
}

/// The hold shared by a [`HeldRing`] and its clones.
#[derive(Debug)]
struct Gate {
    hold: Mutex<Hold>,
    changed: Condvar,
}

/// A device that holds the first ring at `begin` until [`HeldRing::release`]: the ring is
/// running (the last arriver has released the state lock and called the device) and stays so
/// while the harness does something — aborts, say. Every other call goes straight to `D`.
///
/// Synchronises through [`ruccl_core::sync`], so it is visible to loom and shuttle; a core that
/// ran the ring under the state lock would deadlock against it, which the checkers report.
pub struct HeldRing<D> {
    inner: D,
    gate: Arc<Gate>,
}

impl<D: Clone> Clone for HeldRing<D> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            gate: Arc::clone(&self.gate),
        }
    }
}

impl<D> fmt::Debug for HeldRing<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldRing").finish_non_exhaustive()
    }
}

impl<D> HeldRing<D> {
    /// Wrap `inner`; its first `begin` will be held.
    pub fn new(inner: D) -> Self {
        let hold = Hold {
            armed: true,
            running: false,
            released: false,
        };
        Self {
            inner,
            gate: Arc::new(Gate {
                hold: Mutex::new(hold),
                changed: Condvar::new(),
            }),
        }
    }

    /// Block until the first ring is being held.
    pub fn wait_until_running(&self) {
        let mut hold = self.gate.hold.lock();
        while !hold.running {
            hold = self.gate.changed.wait(hold);
        }
    }

    /// Let the held ring go on (and never hold another).
    pub fn release(&self) {
        let mut hold = self.gate.hold.lock();
        hold.armed = false;
        hold.released = true;
        drop(hold);
        self.gate.changed.notify_all();
    }

    fn hold_if_armed(&self) {
        let mut hold = self.gate.hold.lock();
        if !hold.armed {
            return;
        }
        hold.armed = false;
        hold.running = true;
        self.gate.changed.notify_all();
        while !hold.released {
            hold = self.gate.changed.wait(hold);
        }
        hold.running = false;
    }
}

impl<D: NativeCollectiveDevice> NativeCollectiveDevice for HeldRing<D> {
    type Tensor = D::Tensor;
    type Prepared = D::Prepared;
    type Work = D::Work;
    type Error = D::Error;

    fn prepare(&self, tensor: D::Tensor, device: DeviceId) -> Result<D::Prepared, D::Error> {
        self.inner.prepare(tensor, device)
    }

    fn begin(
        &self,
        devices: &[DeviceId],
        inputs: &[D::Prepared],
        operation: ReduceOperation,
    ) -> Result<D::Work, D::Error> {
        self.hold_if_armed();
        self.inner.begin(devices, inputs, operation)
    }

    fn elements(&self, work: &D::Work) -> usize {
        self.inner.elements(work)
    }

    fn exchange(
        &self,
        work: &mut D::Work,
        ranges: &[Range<usize>],
        reduce: bool,
    ) -> Result<(), D::Error> {
        self.inner.exchange(work, ranges, reduce)
    }

    fn finish(
        &self,
        work: D::Work,
        operation: ReduceOperation,
    ) -> Result<Vec<D::Tensor>, D::Error> {
        self.inner.finish(work, operation)
    }
}

impl<D: HostTensors> HostTensors for HeldRing<D> {
    fn upload(&self, device: DeviceId, values: &HostValues) -> Result<D::Tensor, D::Error> {
        self.inner.upload(device, values)
    }

    fn download(&self, tensor: &D::Tensor) -> Result<HostValues, D::Error> {
        self.inner.download(tensor)
    }
}

impl<D: ModelDevice> ModelDevice for HeldRing<D> {
    fn defuse(&self, tensor: &mut D::Tensor) {
        self.inner.defuse(tensor);
    }
}
