//! Contract checks of the simulated device, run before any memory is touched.

use super::SimPrepared;
use super::error::SimError;
use crate::host::ElementType;
use ruccl_core::DeviceId;
use std::ops::Range;

/// What `begin` learned from valid inputs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    /// The element type every input shares.
    pub(crate) element_type: ElementType,
    /// The length every input shares.
    pub(crate) length: usize,
}

/// Check `begin`'s inputs: as many as devices, at least one, each on its rank's device, all of
/// rank 0's length and element type.
pub(crate) fn begin(devices: &[DeviceId], inputs: &[SimPrepared]) -> Result<Shape, SimError> {
    if devices.len() != inputs.len() {
        return Err(SimError::InputCount {
            devices: devices.len(),
            inputs: inputs.len(),
        });
    }
    let Some(first) = inputs.first() else {
        return Err(SimError::EmptyWorld);
    };
    let shape = Shape {
        element_type: first.tensor().element_type(),
        length: first.tensor().len(),
    };
    for (rank, (input, &device)) in inputs.iter().zip(devices).enumerate() {
        let tensor = input.tensor();
        if tensor.device() != device {
            return Err(SimError::RankOnWrongDevice {
                rank,
                expected: device,
                actual: tensor.device(),
            });
        }
        if tensor.element_type() != shape.element_type {
            return Err(SimError::ElementTypeMismatch {
                rank,
                expected: shape.element_type,
                actual: tensor.element_type(),
            });
        }
        if tensor.len() != shape.length {
            return Err(SimError::LengthMismatch {
                rank,
                expected: shape.length,
                actual: tensor.len(),
            });
        }
    }
    Ok(shape)
}

/// Check one step's ranges: one per rank, each a forward range within `0..length`, and — when
/// `balanced` — lengths that differ by at most one.
pub(crate) fn ranges(
    ranges: &[Range<usize>],
    world: usize,
    length: usize,
    balanced: bool,
) -> Result<(), SimError> {
    if ranges.len() != world {
        return Err(SimError::RangeCount {
            ranges: ranges.len(),
            world,
        });
    }
    for (rank, range) in ranges.iter().enumerate() {
        if range.start > range.end {
            return Err(SimError::InvertedRange {
                rank,
                start: range.start,
                end: range.end,
            });
        }
        if range.end > length {
            return Err(SimError::RangeOutOfBounds {
                rank,
                start: range.start,
                end: range.end,
                length,
            });
        }
    }
    if balanced {
        let by_length = |(_, range): &(usize, &Range<usize>)| range.len();
        let shortest = ranges.iter().enumerate().min_by_key(by_length);
        let longest = ranges.iter().enumerate().max_by_key(by_length);
        if let (Some((short_rank, short)), Some((long_rank, long))) = (shortest, longest) {
            if long.len() > short.len() + 1 {
                return Err(SimError::UnbalancedStep {
                    short_rank,
                    short: short.len(),
                    long_rank,
                    long: long.len(),
                });
            }
        }
    }
    Ok(())
}
