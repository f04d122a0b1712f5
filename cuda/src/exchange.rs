//! One step of a plan on the GPUs: staging copies, a copy per transfer (a peer copy, or a
//! local one on the rank's own stream), one fold per (receiver, segment). All ordering is by
//! events between the ranks' streams; nothing waits on the host.
//!
//! # Ordering of one step
//! `schedule.rs` lays the step out ([`StepQueue`], on the core's layout); here it is queued in
//! three phases, all of one phase (over every rank) before any of the next:
//!
//! ```text
//! A, every rank r:                S_r: stage[r] (copy W_r[range] -> G_r)
//!                                 S_r records begun[r], if another rank copies into r
//! B, every rank s that sends:     for each other receiver d of s: S_s waits begun[d]
//!                                 S_s: copy W_s[range] or G_s -> W_d[at..] (overwrite) or C_d (combine)
//!                                      (d = s: a local copy, no wait)
//!                                 S_s records sent[s]
//! C, every rank d that receives:  for each other sender s of d: S_d waits sent[s]
//!                                 S_d: fold W_d[segment] over its inputs (combine)
//! ```
//!
//! (`W_r` working buffer, `G_r` staging, `C_r` scratch, `S_r` stream; a rank stages only in an
//! overwriting step, and only a source a write of the step overlaps.) Every access to a buffer
//! is in one of these, and each pair of accesses that conflicts — one of them a write — is
//! ordered:
//!
//! 1. *A step's reads see the state before the step.* Reads of `W_s` are `s`'s own copies on
//!    `S_s` (a sender pushes; a local copy is its own), its staging copies, and in a combining
//!    step its folds (their own segment, and a self-transfer's source that no write of the step
//!    overlaps). In an overwriting step the writes of `W_s` are other ranks' copies into it,
//!    which wait `begun[s]`, and `s`'s local copies on `S_s`; both come after `s`'s staging
//!    copies — the reads of every range the step writes; an unstaged source is a range the step
//!    does not write. In a combining step the only writes of `W_s` are `s`'s folds, queued on
//!    `S_s` after all of `s`'s copies (a self-transfer whose source a fold writes is copied into
//!    `C_s` among them).
//! 2. *A fold reads complete data.* `S_d` waits `sent[s]` of every other sender before folding;
//!    its local copies are earlier on `S_d` itself.
//! 3. *One step's accesses precede the next step's conflicting ones.* Every access of `W_d`,
//!    `C_d` or `G_d` is on `S_d`, except other ranks' copies into `W_d` or `C_d`; those wait
//!    `begun[d]` of their own step (so they follow everything queued on `S_d` before), and `S_d`
//!    waits their `sent` in phase C of that step (so everything queued on `S_d` after follows
//!    them). `G_s` is only ever touched on `S_s`.
//! 4. *Writes of one step do not collide.* The core refuses an element written twice by an
//!    overwriting step; combining copies land at distinct scratch offsets; folds of a receiver
//!    cover disjoint segments.
//! 5. *Each wait binds to this step's record.* A wait on `begun[d]` (phase B) is queued after
//!    phase A recorded it in this step and before the next step's phase A records it again; the
//!    same for `sent[s]` between phases B and C. `begun[d]` is waited on only by another rank
//!    that copies into `d`, which is exactly when it was recorded; `sent[s]` only for senders.
//! 6. *Generations.* `begin` queues its input copies on each `S_r` before any step, and `finish`
//!    completes every stream before any buffer is released or reused (`work.rs`, `cache.rs`).
//!
//! Only ranks that exchange data wait on each other: a ring step costs each rank one wait per
//! phase, and no step adds a barrier across all ranks.

use crate::buffer::copy_async;
use crate::context::Scoped;
use crate::error::{CudaError, DriverResultExt, Result};
use crate::kernels::CombineOp;
use crate::schedule::{Fold, Input, Land, Read, StepQueue, launches};
use crate::work::{CudaWork, RankWork};
use cudarc::driver::CudaEvent;
use ruccl_core::{ElementType, Step};

/// Queue one step on `work` (see the module docs for the ordering).
pub(crate) fn exchange(work: &mut CudaWork, step: &Step) -> Result<()> {
    let world = work.world();
    let queue = StepQueue::new(step, world, work.buffer_len)?;
    let size = work.element_type.size();
    let fold_with = match (step.combine, work.operation) {
        (false, _) => None,
        (true, Some(operation)) => Some((work.element_type, CombineOp::of(operation))),
        (true, None) => return Err(CudaError::CombineWithoutOperation),
    };
    for rank in 0..world {
        let scratch = queue.scratch[rank] * size;
        let staging = queue.staging[rank] * size;
        let state = &mut work.ranks[rank];
        grow(state, Room::Scratch, scratch)?;
        grow(state, Room::Staging, staging)?;
    }
    work.synchronized = false;

    // Phase A: staging copies, then `begun` where another rank copies in, on each rank's stream.
    for rank in 0..world {
        let state = &work.ranks[rank];
        let (stream, device) = (&state.lane.stream, state.lane.device);
        for stage in queue.stages.iter().filter(|stage| stage.rank == rank) {
            // SAFETY: `copy_async` checks both ranges against their buffers; the working and
            // staging buffers are distinct allocations of this rank. Ordering (module docs, 1
            // and 3): queued on this rank's stream after every earlier access of both, and
            // before `begun` and this rank's own local copies, which are every write of the
            // working buffer in this step.
            unsafe {
                copy_async(
                    (&state.staging, stage.offset * size),
                    (state.buffer()?, stage.range.start * size),
                    stage.range.len() * size,
                    stream,
                    device,
                )?;
            }
        }
        if !queue.senders_to(rank).is_empty() {
            event(&state.begun)?
                .record(stream)
                .during("cuEventRecord (begun)", Some(device))?;
        }
    }

    // Phase B: a copy per transfer, on the sender's stream.
    let mut waited = vec![false; world];
    for sender in 0..world {
        let sends: Vec<_> = queue
            .sends
            .iter()
            .filter(|send| send.from == sender)
            .collect();
        if sends.is_empty() {
            continue;
        }
        waited.fill(false);
        let from = &work.ranks[sender];
        let (stream, device) = (&from.lane.stream, from.lane.device);
        for send in sends {
            let to = &work.ranks[send.to];
            if send.to != sender && !waited[send.to] {
                stream
                    .wait(event(&to.begun)?)
                    .during("cuStreamWaitEvent (begun)", Some(device))?;
                waited[send.to] = true;
            }
            let source = match send.read {
                Read::Buffer { start } => (from.buffer()?, start * size),
                Read::Staging { offset } => (&from.staging, offset * size),
            };
            let target = match send.land {
                Land::Buffer { start } => (to.buffer()?, start * size),
                Land::Scratch { offset } => (&to.scratch, offset * size),
            };
            // SAFETY: `copy_async` checks both ranges against their buffers. They do not overlap:
            // between ranks they are distinct allocations; a local copy reads a range no write
            // of the step overlaps (else it reads staging, or lands in scratch). Ordering
            // (module docs): the source is not written in this step before this copy (1: staged,
            // not written at all, or written only by the sender's own later folds); the target
            // is not accessed by the receiver's stream between its `begun`, just waited for (or
            // this very stream, for a local copy), and its phase-C wait for `sent` below (3); no
            // other copy of this step writes the same target bytes (4).
            unsafe {
                copy_async(target, source, send.len * size, stream, device)?;
            }
        }
        event(&from.sent)?
            .record(stream)
            .during("cuEventRecord (sent)", Some(device))?;
    }

    // Phase C: arrivals, then folds, on every receiver's own stream.
    for receiver in 0..world {
        let state = &work.ranks[receiver];
        let (stream, device) = (&state.lane.stream, state.lane.device);
        for &sender in queue.senders_to(receiver) {
            stream
                .wait(event(&work.ranks[sender].sent)?)
                .during("cuStreamWaitEvent (sent)", Some(device))?;
        }
        let Some(kind) = fold_with else {
            continue;
        };
        for fold in queue.folds.iter().filter(|fold| fold.to == receiver) {
            queue_fold(state, kind, fold, size)?;
        }
    }
    Ok(())
}

/// Queue the launches of one fold on the receiver's stream.
fn queue_fold(
    state: &RankWork,
    kind: (ElementType, CombineOp),
    fold: &Fold,
    size: usize,
) -> Result<()> {
    let (stream, device) = (&state.lane.stream, state.lane.device);
    let (len, bytes) = (fold.range.len(), fold.range.len() * size);
    let buffer = state.buffer()?;
    let own = buffer.span(fold.range.start * size, bytes)?;
    let address = |input: &Input| match *input {
        Input::Own => Ok(own),
        Input::Buffer { start } => buffer.span(start * size, bytes),
        Input::Scratch { offset, .. } => state.scratch.span(offset * size, bytes),
    };
    let inputs = fold
        .inputs
        .iter()
        .map(address)
        .collect::<Result<Vec<u64>>>()?;
    let accumulator = fold
        .accumulator
        .map(|offset| state.scratch.span(offset * size, bytes))
        .transpose()?;
    for launch in launches(inputs.len()) {
        // `schedule.rs` gives a fold beyond the fan-in an accumulator; without one a chained
        // launch would have nowhere to go, which is refused rather than folded short.
        let accumulator = || {
            accumulator.ok_or(CudaError::FoldSources {
                sources: inputs.len(),
                max: crate::kernels::FOLD_MAX,
            })
        };
        let mut sources = Vec::with_capacity(launch.operands.len() + 1);
        if launch.from_accumulator {
            sources.push(accumulator()?);
        }
        sources.extend_from_slice(&inputs[launch.operands.clone()]);
        let into = if launch.into_accumulator {
            accumulator()?
        } else {
            own
        };
        // SAFETY: every address was checked (`span`) to hold `len` elements of this rank's
        // working or scratch buffer, both in this rank's context. The sources are the segment of
        // the working buffer (`own`, which may also be `into`: the kernel reads an element of
        // every source before writing it), a self-transfer's source in the working buffer (a
        // range no write of the step overlaps, so apart from `own`), received ranges at distinct
        // scratch offsets, and the accumulator, a scratch range after all of them: none overlaps
        // another. Ordering (module docs, 2 and 3): queued on the receiver's stream after its
        // own copies and after it waited for every other sender's `sent`; nothing else accesses
        // these bytes until the next step's `begun`.
        unsafe {
            state
                .lane
                .kernels
                .fold(stream, device, kind, into, &sources, len)?;
        }
    }
    Ok(())
}

/// Which of a rank's step buffers to grow.
#[derive(Clone, Copy)]
enum Room {
    Scratch,
    Staging,
}

/// Grow `state`'s scratch or staging buffer to at least `bytes`. `begin` sizes both for the
/// largest step of the plan, so this only allocates for a step outside it. The old buffer may
/// still be used by queued work, so it is retired (kept until the streams complete), not
/// released.
fn grow(state: &mut RankWork, room: Room, bytes: usize) -> Result<()> {
    let current = match room {
        Room::Scratch => &mut state.scratch,
        Room::Staging => &mut state.staging,
    };
    if current.bytes() >= bytes {
        return Ok(());
    }
    let grown = state.lane.take_buffer(bytes)?;
    let old = std::mem::replace(current, grown);
    state.retired.push(old);
    // The new buffer is accessed like the old one: after `begun` waits or on the rank's own
    // stream. Nothing to order.
    Ok(())
}

/// A rank's event, or [`CudaError::WorkFinished`] if the work no longer holds it.
fn event(slot: &Option<Scoped<CudaEvent>>) -> Result<&CudaEvent> {
    slot.as_deref().ok_or(CudaError::WorkFinished)
}
