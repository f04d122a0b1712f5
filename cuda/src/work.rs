//! [`CudaWork`]: one generation's device state — per rank, its working buffer, scratch and
//! staging buffers, the input it still reads, and the two events that order the steps — from
//! `begin` to `finish`.
//!
//! # Events
//! Each rank `r` has two events, recorded only on its own stream `S_r` and re-recorded in every
//! step that needs them (a stream wait captures the event's most recent record at the time the
//! wait is queued):
//! - `begun[r]`: recorded after `r`'s staging copies of the step (and after everything earlier
//!   on `S_r`), so that senders into `r` wait for it before writing `r`'s buffers;
//! - `sent[r]`: recorded after `r`'s outgoing copies of the step, so that its receivers wait for
//!   the data to have arrived.
//!
//! `exchange.rs` has the ordering argument; every wait is queued after the record it refers to
//! and before that event's next record. Events come from the lane's idle set and go back to it
//! once the streams are complete.
//!
//! # Completion
//! Buffers are only released after every rank's stream is complete: `finish` synchronises all
//! streams before handing out outputs, and dropping an unfinished work (an error mid-plan)
//! synchronises them in `Drop` before the buffers' own drops run. Both wait through
//! `context::complete`, which never skips a wait because of an error deferred earlier. Released
//! buffers go back to their devices' pools (`cache.rs`).

use crate::buffer::DeviceBuffer;
use crate::context::{SavedContext, Scoped, complete};
use crate::error::Result;
use crate::lane::Lane;
use cudarc::driver::CudaEvent;
use ruccl_core::{ElementType, ReduceOperation};
use std::sync::Arc;

/// One rank's part of a generation.
pub(crate) struct RankWork {
    /// The rank's logical device.
    pub(crate) lane: Arc<Lane>,
    /// The working buffer of `buffer_len` elements: the input's own allocation (in place) or
    /// one from the pool holding the input at its placement. `None` only after `finish` moved it
    /// into an output.
    pub(crate) buffer: Option<DeviceBuffer>,
    /// An input used out of place: kept until the streams are complete, since the copy out of it
    /// may still be queued.
    pub(crate) input: Option<DeviceBuffer>,
    /// The copy of the rank's output range, where it is not the whole buffer: made in `finish`,
    /// handed out once the streams are complete.
    pub(crate) output: Option<DeviceBuffer>,
    /// Where received ranges of a combining step land, with a transfer to this rank itself
    /// whose source the step writes (and a chained fold's accumulator).
    pub(crate) scratch: DeviceBuffer,
    /// Where staged source ranges of an overwriting step are copied aside.
    pub(crate) staging: DeviceBuffer,
    /// Scratch or staging buffers outgrown mid-generation (a step larger than the plan's, which
    /// only a step outside the plan can be); kept until the streams are complete.
    pub(crate) retired: Vec<DeviceBuffer>,
    /// Recorded on this rank's stream once senders may write its buffers in the current step.
    pub(crate) begun: Option<Scoped<CudaEvent>>,
    /// Recorded on this rank's stream after its outgoing copies of the current step.
    pub(crate) sent: Option<Scoped<CudaEvent>>,
}

impl RankWork {
    /// The working buffer, or [`CudaError::WorkFinished`](crate::CudaError::WorkFinished).
    pub(crate) fn buffer(&self) -> Result<&DeviceBuffer> {
        self.buffer
            .as_ref()
            .ok_or(crate::error::CudaError::WorkFinished)
    }
}

impl Drop for RankWork {
    fn drop(&mut self) {
        // The owner of this work has completed every stream (`finish`, or `CudaWork`'s drop), so
        // no queued wait or record still refers to the events.
        for event in [self.begun.take(), self.sent.take()].into_iter().flatten() {
            self.lane.give_event(event);
        }
    }
}

/// The device state of one generation of a collective.
pub struct CudaWork {
    pub(crate) ranks: Vec<RankWork>,
    pub(crate) element_type: ElementType,
    /// The plan's operation; `None` for collectives that never fold (all-gather, broadcast).
    pub(crate) operation: Option<ReduceOperation>,
    pub(crate) buffer_len: usize,
    /// Whether every rank works in its input's own allocation.
    pub(crate) in_place: bool,
    /// Whether every rank's stream has been completed since the last queued work.
    pub(crate) synchronized: bool,
}

impl CudaWork {
    /// The number of ranks.
    pub fn world(&self) -> usize {
        self.ranks.len()
    }

    /// Elements of every rank's working buffer.
    pub fn buffer_len(&self) -> usize {
        self.buffer_len
    }

    /// The element type.
    pub fn element_type(&self) -> ElementType {
        self.element_type
    }

    /// The operation folds use, if the collective has one.
    pub fn operation(&self) -> Option<ReduceOperation> {
        self.operation
    }

    /// Whether every rank works in its input's own allocation (no copy in `begin`).
    pub fn is_in_place(&self) -> bool {
        self.in_place
    }

    /// Complete every rank's stream (host wait), each after draining its context's deferred
    /// error, so no wait is ever skipped. Returns the first failure, rank by rank: an error a
    /// drop had deferred ([`CudaError::Driver`](crate::CudaError::Driver)) or a fault in queued
    /// work ([`CudaError::Asynchronous`](crate::CudaError::Asynchronous)). The caller has
    /// saved the thread's context.
    pub(crate) fn synchronize(&mut self) -> Result<()> {
        let mut first_error = Ok(());
        for rank in &self.ranks {
            let completed = complete(&rank.lane.stream).into_result(rank.lane.device);
            first_error = first_error.and(completed);
        }
        self.synchronized = true;
        first_error
    }
}

impl Drop for CudaWork {
    fn drop(&mut self) {
        let _restore = SavedContext::save();
        if !self.synchronized {
            // An unfinished generation: let queued copies and kernels end — on every rank's
            // stream, since other ranks' streams write this rank's buffers — before any buffer
            // or event is released. Failures go back into each context's deferred slot.
            for rank in &self.ranks {
                complete(&rank.lane.stream).defer_into(rank.lane.context());
            }
        }
        // Release the buffers and events while the caller's context is saved.
        self.ranks.clear();
    }
}
