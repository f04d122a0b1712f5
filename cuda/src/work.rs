//! [`CudaWork`]: one generation's device state — per rank, its output buffer, its scratch
//! buffer and the two events that order the ring steps — from `begin` to `finish`.
//!
//! # Events
//! Each rank `r` has two events, recorded only on its own stream `S_r` and re-recorded every
//! step (a stream wait captures the event's most recent record at the time the wait is queued):
//! - `sent[r]`: recorded after `r`'s outgoing copy of the step, so its successor's stream can
//!   wait for the data to have arrived;
//! - `free[r]`: recorded after `r`'s combine (or overwrite) of the step — and once in `begin`,
//!   after the input clone — so its predecessor's stream can wait until `r`'s scratch buffer is
//!   no longer being read before copying into it again.
//!
//! `exchange.rs` queues every wait after the record it refers to and before that event's next
//! record, which is what makes re-recording the same two events per rank sound.
//!
//! # Completion
//! Buffers are only released after every rank's stream is complete: `finish` synchronises all
//! streams before handing out outputs, and dropping an unfinished work (an error mid-ring)
//! synchronises them in `Drop` before the buffers' own drops run. Both wait through
//! `context::complete`, which never skips a wait because of an error deferred earlier.

use crate::buffer::DeviceBuffer;
use crate::context::{SavedContext, complete};
use crate::error::Result;
use crate::kernels::CombineOp;
use crate::lane::Lane;
use cudarc::driver::CudaEvent;
use ruccl_core::ElementType;
use std::sync::Arc;

/// One rank's part of a generation.
pub(crate) struct RankWork {
    /// The rank's logical device.
    pub(crate) lane: Arc<Lane>,
    /// The rank's output: its input's clone, combined in place step by step. `None` only after
    /// `finish` moved it into the returned tensor.
    pub(crate) output: Option<DeviceBuffer>,
    /// Where the rank's predecessor's range lands each step. `None` only after `finish`.
    pub(crate) scratch: Option<DeviceBuffer>,
    /// Scratch buffers outgrown mid-generation (a range larger than the first one); kept alive
    /// until the streams are complete, since queued copies may still use them.
    pub(crate) retired: Vec<DeviceBuffer>,
    /// Recorded on this rank's stream after its outgoing copy of the current step.
    pub(crate) sent: CudaEvent,
    /// Recorded on this rank's stream once its scratch buffer is free to be overwritten.
    pub(crate) free: CudaEvent,
}

/// The device state of one all-reduce generation.
pub struct CudaWork {
    pub(crate) ranks: Vec<RankWork>,
    pub(crate) element_type: ElementType,
    pub(crate) len: usize,
    pub(crate) op: CombineOp,
    /// Whether every rank's stream has been completed since the last queued work.
    pub(crate) synchronized: bool,
}

impl CudaWork {
    /// The number of ranks.
    pub fn world(&self) -> usize {
        self.ranks.len()
    }

    /// Elements per rank.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the tensors are empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The element type.
    pub fn element_type(&self) -> ElementType {
        self.element_type
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
            // An unfinished generation: let queued copies and kernels end before any buffer is
            // freed. Failures go back into each context's deferred slot.
            for rank in &self.ranks {
                complete(&rank.lane.stream).defer_into(rank.lane.context());
            }
        }
        // Release the buffers and events while the caller's context is saved.
        self.ranks.clear();
    }
}
