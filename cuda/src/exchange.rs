//! One ring step: every rank sends a range to its successor, then every destination combines or
//! overwrites. All ordering is by events between the ranks' streams; nothing waits on the host.
//!
//! # Ordering of one step
//! For a world of `W` ranks with streams `S_0..S_W`, rank `r` sends `ranges[r]` of its output to
//! rank `d = (r + 1) % W`, landing at offset 0 of `d`'s scratch buffer. The step is queued in two
//! phases, all of phase A before any of phase B:
//!
//! ```text
//! phase A (sends), for each r:      phase B (receives), for each d, with r = d - 1:
//!   S_r waits free[d]                 S_d waits sent[r]
//!   S_r: copy out_r[range] -> scr_d   S_d: combine out_d[range] op= scr_d  (or copy scr_d -> out_d)
//!   S_r records sent[r]               S_d records free[d]
//! ```
//!
//! Why that is the contract ("all sends of the step read the state from before the step; a source
//! is never overwritten while a copy still reads it"):
//! - A send reads `out_r`. The only write of `out_r` in this step is `r`'s own receive, queued on
//!   `S_r` *after* `r`'s send (phase B follows phase A on every stream), so it cannot start until
//!   the send has completed: every send reads pre-step state, for any ranges (even overlapping
//!   ones), and the writes of the previous step are complete because they were queued earlier on
//!   the same stream.
//! - A send writes `scr_d`. The previous step's reader of `scr_d` is `d`'s receive, which records
//!   `free[d]` when done; `S_r` waits on it first. (`begin` records `free[d]` once after
//!   allocating, so the first step's wait is well-defined.)
//! - A receive reads `scr_d` only after `S_d` waited `sent[r]`: the data has fully arrived.
//! - Each wait is queued after the record it refers to (phase A's `free` waits follow the
//!   previous step's phase B records; phase B's `sent` waits follow this step's phase A records)
//!   and before that event is recorded again, so it binds to exactly this step's record.
//!
//! This is the per-buffer form of "all sends complete before any destination is written": the
//! only send that reads a destination's memory is that destination's own, and it precedes the
//! destination's write on the same stream; a global barrier (every receive waiting for every
//! send, `W²` waits per step) would add no ordering that any buffer needs.

use crate::buffer::{DeviceBuffer, copy_async};
use crate::error::{CudaError, DriverResultExt, Result};
use crate::work::CudaWork;
use std::ops::Range;

/// Queue one ring step on `work` (see the module docs for the ordering).
pub(crate) fn exchange(work: &mut CudaWork, ranges: &[Range<usize>], reduce: bool) -> Result<()> {
    let world = work.world();
    validate_ranges(ranges, world, work.len)?;
    let size = work.element_type.size();
    work.synchronized = false;

    // Make room: rank d receives ranges[d - 1], at offset 0 of its scratch.
    for destination in 0..world {
        let bytes = ranges[predecessor(destination, world)].len() * size;
        ensure_scratch(work, destination, bytes)?;
    }

    // Phase A: every send.
    for (sender, range) in ranges.iter().enumerate() {
        let destination = successor(sender, world);
        let lane = &work.ranks[sender].lane;
        let (stream, device) = (&lane.stream, lane.device);
        if !range.is_empty() {
            stream
                .wait(&work.ranks[destination].free)
                .during("cuStreamWaitEvent (scratch free)", Some(device))?;
            let (Some(output), Some(scratch)) = (
                work.ranks[sender].output.as_ref(),
                work.ranks[destination].scratch.as_ref(),
            ) else {
                return Err(finished());
            };
            // SAFETY: `copy_async` checks the source range against the sender's output (also
            // validated above) and the destination against the receiver's scratch (grown above);
            // the buffers are distinct allocations. Ordering: S_sender has just waited for the receiver's previous read
            // of its scratch (free), and the sender's own later write of its output is queued
            // after this copy on the same stream (phase B) — see the module docs.
            unsafe {
                copy_async(
                    (scratch, 0),
                    (output, range.start * size),
                    range.len() * size,
                    stream,
                    device,
                )?;
            }
        }
        work.ranks[sender]
            .sent
            .record(stream)
            .during("cuEventRecord (sent)", Some(device))?;
    }

    // Phase B: every receive.
    for destination in 0..world {
        let range = ranges[predecessor(destination, world)].clone();
        let sender = predecessor(destination, world);
        let rank = &work.ranks[destination];
        let (stream, device) = (&rank.lane.stream, rank.lane.device);
        if !range.is_empty() {
            stream
                .wait(&work.ranks[sender].sent)
                .during("cuStreamWaitEvent (data sent)", Some(device))?;
            let (Some(output), Some(scratch)) = (rank.output.as_ref(), rank.scratch.as_ref())
            else {
                return Err(finished());
            };
            if reduce {
                let bytes = range.len() * size;
                let (into, from) = (
                    output.span(range.start * size, bytes)?,
                    scratch.span(0, bytes)?,
                );
                // SAFETY: both spans are checked to hold `range.len()` elements; the scratch
                // holds the received ones (the copy S_d just waited for), both buffers belong to
                // this lane's context, and they are distinct allocations. No other stream touches
                // them until `free` is recorded below.
                unsafe {
                    rank.lane.kernels.combine(
                        stream,
                        device,
                        (work.element_type, work.op),
                        into,
                        from,
                        range.len(),
                    )?;
                }
            } else {
                // SAFETY: as for the combine: ranges of two distinct buffers of this context
                // (checked in bounds by `copy_async`), ordered after the arrival of the data and
                // before `free`.
                unsafe {
                    copy_async(
                        (output, range.start * size),
                        (scratch, 0),
                        range.len() * size,
                        stream,
                        device,
                    )?;
                }
            }
        }
        rank.free
            .record(stream)
            .during("cuEventRecord (scratch free)", Some(device))?;
    }
    Ok(())
}

/// Check there is one range per rank, each within `0..len`.
fn validate_ranges(ranges: &[Range<usize>], world: usize, len: usize) -> Result<()> {
    if ranges.len() != world {
        return Err(CudaError::RangeCount {
            expected: world,
            actual: ranges.len(),
        });
    }
    match ranges
        .iter()
        .enumerate()
        .find(|(_, range)| range.start > range.end || range.end > len)
    {
        Some((rank, range)) => Err(CudaError::RangeOutOfBounds {
            rank,
            range: range.clone(),
            len,
        }),
        None => Ok(()),
    }
}

/// Grow rank `rank`'s scratch to at least `bytes` bytes. The old buffer may still be read or
/// written by queued work, so it is retired (kept until the streams complete), not freed.
fn ensure_scratch(work: &mut CudaWork, rank: usize, bytes: usize) -> Result<()> {
    let state = &mut work.ranks[rank];
    let current = state.scratch.as_ref().map_or(0, DeviceBuffer::bytes);
    if current >= bytes {
        return Ok(());
    }
    let grown = DeviceBuffer::alloc(&state.lane.stream, bytes, state.lane.device)?;
    if let Some(old) = state.scratch.replace(grown) {
        state.retired.push(old);
    }
    // The new buffer is only ever accessed after `free` waits, like the old one: nothing to order.
    Ok(())
}

fn successor(rank: usize, world: usize) -> usize {
    (rank + 1) % world
}

fn predecessor(rank: usize, world: usize) -> usize {
    (rank + world - 1) % world
}

/// The error for a work whose buffers were already handed out (unreachable through the core,
/// which never calls `exchange` after `finish`; kept typed rather than panicking).
fn finished() -> CudaError {
    CudaError::WorkFinished
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_neighbours_wrap_around() {
        assert_eq!(successor(3, 4), 0);
        assert_eq!(predecessor(0, 4), 3);
        assert_eq!(successor(0, 1), 0);
        assert_eq!(predecessor(0, 1), 0);
    }

    #[test]
    fn ranges_must_match_the_world_and_stay_in_bounds() {
        assert!(validate_ranges(&[0..2, 2..4], 2, 4).is_ok());
        assert!(validate_ranges(&[0..0, 4..4], 2, 4).is_ok());
        let one = std::iter::once(0..2).collect::<Vec<_>>();
        assert!(matches!(
            validate_ranges(&one, 2, 4),
            Err(CudaError::RangeCount {
                expected: 2,
                actual: 1
            })
        ));
        assert!(matches!(
            validate_ranges(&[0..2, 3..5], 2, 4),
            Err(CudaError::RangeOutOfBounds { rank: 1, .. })
        ));
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = [3..1, 0..1];
        assert!(matches!(
            validate_ranges(&reversed, 2, 4),
            Err(CudaError::RangeOutOfBounds { rank: 0, .. })
        ));
    }
}
