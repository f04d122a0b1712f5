//! The devices the scenarios drive.
//!
//! - [`lean`]: a [`SimDevice`] that records no traffic, so its ledger lock stays off the
//!   collective path and adds no interleavings; the success scenarios run on it.
//! - [`faulty`]: the same, wrapped in a [`FaultyDevice`] with a [`FaultPlan`].
//! - [`HeldSchedule`]: a decorator (an [`Intercept`]) that holds the first schedule at `begin`
//!   until the harness releases it, so that an abort or a deadline can be made to land while the
//!   schedule runs.
//!
//! [`ModelDevice`] is what the scenarios need on top of the executor trait: turn host values into
//! a rank's tensor and back.

use ruccl_core::sync::{Arc, Condvar, Mutex};
use ruccl_core::{DeviceId, ElementType, NativeCollectiveDevice, Plan};
use ruccl_sim::ValueKind;
use ruccl_sim::{
    FaultPlan, FaultyDevice, FaultyTensor, HostTensors, HostValues, Intercept, Intercepted,
    SimDevice,
};
use std::fmt;

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
    /// The device values alive now, by kind (kinds with none left out), and the drops of values
    /// already dropped: the simulated device's census ([`SimDevice::census`]), which every
    /// device here ends in.
    fn census(&self) -> (Vec<(String, i64)>, Vec<String>);

    /// Make a tensor that no fault will make panic when dropped (an output the fault injector
    /// armed is defused here; the harness is not device code under test).
    fn defuse(&self, tensor: &mut Self::Tensor);

    /// `values` as a tensor of `element`s (`I64`, or `I32`, narrowing) on `device`. A device that
    /// cannot hold them is a harness bug.
    fn tensor(&self, device: DeviceId, element: ElementType, values: Vec<i64>) -> Self::Tensor {
        let values = match element {
            ElementType::I32 => HostValues::I32(
                values
                    .into_iter()
                    .map(|value| i32::try_from(value).unwrap_or(i32::MAX))
                    .collect(),
            ),
            _ => HostValues::I64(values),
        };
        match self.upload(device, &values) {
            Ok(tensor) => tensor,
            Err(error) => panic!("harness: upload to {device} failed: {error}"),
        }
    }

    /// The elements of an output tensor (integers, widened to `i64`), which is then dropped
    /// (defused).
    fn read(&self, mut tensor: Self::Tensor) -> Vec<i64> {
        self.defuse(&mut tensor);
        match self.download(&tensor) {
            Ok(HostValues::I64(values)) => values,
            Ok(HostValues::I32(values)) => values.into_iter().map(i64::from).collect(),
            Ok(other) => panic!(
                "harness: an output of element type {} instead of an integer type",
                other.element_type()
            ),
            Err(error) => panic!("harness: download failed: {error}"),
        }
    }
}

impl ModelDevice for SimDevice {
    fn census(&self) -> (Vec<(String, i64)>, Vec<String>) {
        let census = SimDevice::census(self);
        let live = ValueKind::ALL
            .iter()
            .filter(|&&kind| census.live.of(kind) > 0)
            .map(|&kind| {
                let count = i64::try_from(census.live.of(kind)).unwrap_or(i64::MAX);
                (kind.to_string(), count)
            })
            .collect();
        let double = census
            .double_drops
            .iter()
            .map(|drop| format!("{} #{}", drop.kind, drop.id))
            .collect();
        (live, double)
    }

    fn defuse(&self, _tensor: &mut Self::Tensor) {}
}

impl<D: ModelDevice> ModelDevice for FaultyDevice<D> {
    fn census(&self) -> (Vec<(String, i64)>, Vec<String>) {
        self.inner().census()
    }

    fn defuse(&self, tensor: &mut FaultyTensor<D::Tensor>) {
        tensor.disarm();
        if let Some(inner) = tensor.get_mut() {
            self.inner().defuse(inner);
        }
    }
}

/// Where the held schedule stands.
#[derive(Debug)]
struct Hold {
    /// The first `begin` is still to be held.
    armed: bool,
    /// A `begin` is being held now (the schedule is running, outside the state lock).
    running: bool,
    /// The harness let it go on.
    released: bool,
}

/// The hold shared by a [`ScheduleHold`] and its clones.
#[derive(Debug)]
struct Gate {
    hold: Mutex<Hold>,
    changed: Condvar,
}

/// A device that holds the first schedule at `begin` until [`ScheduleHold::release`]: the
/// schedule is running (the last arriver has released the state lock and called the device) and
/// stays so while the harness does something — aborts, or lets a waiter's deadline pass. Every
/// other call goes straight to `D`.
pub type HeldSchedule<D> = Intercepted<D, ScheduleHold>;

/// The hold of a [`HeldSchedule`]: reach it with [`Intercepted::intercept`].
///
/// Synchronises through [`ruccl_core::sync`], so it is visible to loom and shuttle; a core that
/// ran the schedule under the state lock would deadlock against it, which the checkers report.
#[derive(Clone)]
pub struct ScheduleHold {
    gate: Arc<Gate>,
}

impl fmt::Debug for ScheduleHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScheduleHold").finish_non_exhaustive()
    }
}

/// `inner`, whose first `begin` will be held.
pub fn held_schedule<D>(inner: D) -> HeldSchedule<D> {
    let hold = Hold {
        armed: true,
        running: false,
        released: false,
    };
    let gate = Arc::new(Gate {
        hold: Mutex::new(hold),
        changed: Condvar::new(),
    });
    Intercepted::with(inner, ScheduleHold { gate })
}

impl ScheduleHold {
    /// Block until the first schedule is being held.
    pub fn wait_until_running(&self) {
        let mut hold = self.gate.hold.lock();
        while !hold.running {
            hold = self.gate.changed.wait(hold);
        }
    }

    /// Let the held schedule go on (and never hold another).
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

impl<D: NativeCollectiveDevice> Intercept<D> for ScheduleHold {
    fn begin(
        &self,
        inner: &D,
        devices: &[DeviceId],
        inputs: Vec<D::Prepared>,
        plan: &Plan,
    ) -> Result<D::Work, D::Error> {
        self.hold_if_armed();
        inner.begin(devices, inputs, plan)
    }
}

impl<D: ModelDevice> ModelDevice for HeldSchedule<D> {
    fn census(&self) -> (Vec<(String, i64)>, Vec<String>) {
        self.inner().census()
    }

    fn defuse(&self, tensor: &mut D::Tensor) {
        self.inner().defuse(tensor);
    }
}

/// **Resources** (DESIGN.md property 9): check through the device's census that no device value
/// is alive and none was dropped twice, `when` (named in the report).
pub fn census_check<D: ModelDevice>(device: &D, when: &str) {
    let (live, double) = device.census();
    crate::properties::resources(when, &live, &double);
}
