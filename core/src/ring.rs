//! The ring all-reduce driver: runs one generation's [`RingSchedule`] on a device, outside the
//! state lock, containing every device error and panic.

use crate::contain::{device_call, discard, infallible_call, release};
use crate::error::{NativeCollectiveError, Phase};
use crate::{DeviceId, NativeCollectiveDevice, ReduceOperation, RingSchedule};

/// Run one all-reduce over `inputs` (one per rank, in rank order). Returns one output per rank or
/// the first failure. The prepared inputs live until the ring is finished (a device may still be
/// reading them on a stream until `finish` completes) and are dropped before returning.
pub(crate) fn ring_all_reduce<D: NativeCollectiveDevice>(
    device: &D,
    devices: &[DeviceId],
    inputs: Vec<D::Prepared>,
    operation: ReduceOperation,
) -> Result<Vec<D::Tensor>, NativeCollectiveError> {
    let outcome = run_schedule(device, devices, &inputs, operation);
    match (outcome, release(Phase::DropPrepared, inputs)) {
        (Ok(outputs), Ok(())) => Ok(outputs),
        (Ok(outputs), Err(drop_failure)) => {
            discard(outputs);
            Err(drop_failure)
        }
        (Err(failure), _) => Err(failure),
    }
}

fn run_schedule<D: NativeCollectiveDevice>(
    device: &D,
    devices: &[DeviceId],
    inputs: &[D::Prepared],
    operation: ReduceOperation,
) -> Result<Vec<D::Tensor>, NativeCollectiveError> {
    let world = devices.len();
    let mut work = device_call(Phase::Begin, None, || {
        device.begin(devices, inputs, operation)
    })?;
    let elements = match infallible_call(Phase::Elements, || device.elements(&work)) {
        Ok(elements) => elements,
        Err(failure) => {
            discard(work);
            return Err(failure);
        }
    };
    for step in RingSchedule::new(world, elements).steps() {
        let phase = Phase::Exchange { step: step.index };
        if let Err(failure) = device_call(phase, None, || {
            device.exchange(&mut work, &step.ranges, step.reduce)
        }) {
            discard(work);
            return Err(failure);
        }
    }
    let outputs = device_call(Phase::Finish, None, || device.finish(work, operation))?;
    if outputs.len() != world {
        let actual = outputs.len();
        discard(outputs);
        return Err(NativeCollectiveError::OutputCount {
            expected: world,
            actual,
        });
    }
    Ok(outputs)
}
