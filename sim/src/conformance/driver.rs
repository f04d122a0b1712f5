//! Drives the device under test through the executor trait, one contained call at a time
//! ([`crate::contain`]): nothing a device does can unwind into the suite.

use crate::contain::{call, contained, release};
use crate::host::{HostTensors, HostValues};
use ruccl_core::{DeviceId, Plan, Step};

/// Expect `call` to be refused with an error: `Ok` and panics are failures.
pub(crate) fn refuses<T, E: std::error::Error>(
    what: &str,
    call: impl FnOnce() -> Result<T, E>,
) -> Result<(), String> {
    match contained(what, || call().map_err(|error| error.to_string()))? {
        Err(_) => Ok(()),
        Ok(accepted) => {
            release("drop of the accepted value", accepted)?;
            Err(format!("{what} returned Ok; it must return an error"))
        }
    }
}

/// Drives a device directly through the executor trait, one contained call at a time.
pub(crate) struct Driver<'a, D> {
    pub(crate) device: &'a D,
}

impl<D: HostTensors> Driver<'_, D> {
    /// Upload `values` to `device` and prepare it there.
    pub(crate) fn prepared(
        &self,
        device: DeviceId,
        values: &HostValues,
    ) -> Result<D::Prepared, String> {
        let tensor = call("upload", || self.device.upload(device, values))?;
        call("prepare", || self.device.prepare(tensor, device))
    }

    /// Upload and prepare one input per rank.
    pub(crate) fn prepare_all(
        &self,
        devices: &[DeviceId],
        values: &[HostValues],
    ) -> Result<Vec<D::Prepared>, String> {
        let mut prepared = Vec::with_capacity(values.len());
        for (&device, values) in devices.iter().zip(values) {
            match self.prepared(device, values) {
                Ok(input) => prepared.push(input),
                Err(message) => {
                    release("drop of prepared inputs", prepared)?;
                    return Err(message);
                }
            }
        }
        Ok(prepared)
    }

    /// Run `begin` with `plan`, the given steps (the plan's own, or crafted ones over its
    /// layout), and `finish`, and download every output.
    pub(crate) fn run(
        &self,
        devices: &[DeviceId],
        values: &[HostValues],
        plan: &Plan,
        steps: &[Step],
    ) -> Result<Vec<HostValues>, String> {
        let inputs = self.prepare_all(devices, values)?;
        let outputs = self.run_prepared(devices, inputs, plan, steps)?;
        if outputs.len() != devices.len() {
            let count = outputs.len();
            release("drop of outputs", outputs)?;
            return Err(format!(
                "finish returned {count} outputs for {} ranks",
                devices.len()
            ));
        }
        self.download_all(outputs)
    }

    fn run_prepared(
        &self,
        devices: &[DeviceId],
        inputs: Vec<D::Prepared>,
        plan: &Plan,
        steps: &[Step],
    ) -> Result<Vec<D::Tensor>, String> {
        let mut work = call("begin", || self.device.begin(devices, inputs, plan))?;
        for (index, step) in steps.iter().enumerate() {
            let what = format!("exchange step {index}");
            if let Err(message) = call(&what, || self.device.exchange(&mut work, step)) {
                release("drop of the work", work)?;
                return Err(message);
            }
        }
        call("finish", || self.device.finish(work, plan))
    }

    /// Download every output, then drop them.
    pub(crate) fn download_all(&self, outputs: Vec<D::Tensor>) -> Result<Vec<HostValues>, String> {
        let values: Result<Vec<HostValues>, String> = outputs
            .iter()
            .map(|output| call("download", || self.device.download(output)))
            .collect();
        release("drop of outputs", outputs)?;
        values
    }
}
