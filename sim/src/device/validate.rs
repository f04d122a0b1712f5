//! Contract checks of `begin`, run before any memory is touched (a step's checks are in
//! the core's [`Step::lay_out`](ruccl_core::Step::lay_out)).

use super::SimPrepared;
use super::error::SimError;
use crate::host::ElementType;
use ruccl_core::{DeviceId, Plan};

/// Check `begin`'s inputs against the plan: one per rank, at least one, each on its rank's
/// device, all of rank 0's element type and the plan's input length; and the plan's layout
/// inside its buffers. Returns the element type.
pub(crate) fn begin(
    devices: &[DeviceId],
    inputs: &[SimPrepared],
    plan: &Plan,
) -> Result<ElementType, SimError> {
    if devices.len() != inputs.len() || devices.len() != plan.world() {
        return Err(SimError::InputCount {
            devices: devices.len(),
            inputs: inputs.len(),
            planned: plan.world(),
        });
    }
    let Some(first) = inputs.first() else {
        return Err(SimError::EmptyWorld);
    };
    let element_type = first.tensor().element_type();
    for (rank, (input, &device)) in inputs.iter().zip(devices).enumerate() {
        let tensor = input.tensor();
        if tensor.device() != device {
            return Err(SimError::RankOnWrongDevice {
                rank,
                expected: device,
                actual: tensor.device(),
            });
        }
        if tensor.element_type() != element_type {
            return Err(SimError::ElementTypeMismatch {
                rank,
                expected: element_type,
                actual: tensor.element_type(),
            });
        }
        if tensor.len() != plan.input_len() {
            return Err(SimError::LengthMismatch {
                rank,
                expected: plan.input_len(),
                actual: tensor.len(),
            });
        }
        layout(plan, rank)?;
    }
    Ok(element_type)
}

/// Rank `rank`'s input and output lie inside its buffer.
fn layout(plan: &Plan, rank: usize) -> Result<(), SimError> {
    let buffer_len = plan.buffer_len();
    let input = plan.placement(rank)..plan.placement(rank).saturating_add(plan.input_len());
    let output = plan.output(rank);
    for (what, range) in [("input", input), ("output", output)] {
        if range.start > range.end || range.end > buffer_len {
            return Err(SimError::LayoutOutOfBounds {
                rank,
                what,
                start: range.start,
                end: range.end,
                buffer_len,
            });
        }
    }
    Ok(())
}
