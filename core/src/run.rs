//! Runs one generation's [`Plan`] on a device, outside the state lock, containing every device
//! error and panic.

use crate::contain::{device_call, discard};
use crate::error::{NativeCollectiveError, Phase};
use crate::{DeviceId, NativeCollectiveDevice, Plan};

/// Run `plan` over `inputs` (one per rank, in rank order): `begin`, one `exchange` per step,
/// `finish`. Returns one output per rank, or the first failure. The inputs belong to the device
/// from `begin` on (it keeps those it still reads inside the work).
pub(crate) fn run_plan<D: NativeCollectiveDevice>(
    device: &D,
    devices: &[DeviceId],
    inputs: Vec<D::Prepared>,
    plan: &Plan,
) -> Result<Vec<D::Tensor>, NativeCollectiveError> {
    let world = devices.len();
    let mut work = device_call(Phase::Begin, None, || device.begin(devices, inputs, plan))?;
    for (step, exchange) in plan.steps().iter().enumerate() {
        if let Err(failure) = device_call(Phase::Exchange { step }, None, || {
            device.exchange(&mut work, exchange)
        }) {
            discard(work);
            return Err(failure);
        }
    }
    let outputs = device_call(Phase::Finish, None, || device.finish(work, plan))?;
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
