//! [`Stop`]: why a run should end early — Ctrl-C, or its output was closed (`| head`). Every
//! rank checks it before each collective call; the first to see it aborts the communicators, so
//! the others return at once, and the command writes what it has (the table's end, the JSON
//! document, the trace) with what happened.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

/// Why a run was stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// Ctrl-C (SIGINT), or SIGTERM.
    Interrupted,
    /// Writing the results failed because the reader went away (a closed pipe).
    OutputClosed,
}

impl StopReason {
    /// How the reason reads in messages and documents.
    pub fn describe(self) -> &'static str {
        match self {
            StopReason::Interrupted => "interrupted (SIGINT or SIGTERM)",
            StopReason::OutputClosed => "the output was closed",
        }
    }
}

/// A shared stop flag; clones share it.
#[derive(Clone, Debug, Default)]
pub struct Stop {
    reason: Arc<AtomicU8>,
}

const RUNNING: u8 = 0;
const INTERRUPTED: u8 = 1;
const OUTPUT_CLOSED: u8 = 2;

impl Stop {
    /// A flag that is not set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ask the run to stop for `reason` (the first reason given stays).
    pub fn request(&self, reason: StopReason) {
        let code = match reason {
            StopReason::Interrupted => INTERRUPTED,
            StopReason::OutputClosed => OUTPUT_CLOSED,
        };
        let _ = self
            .reason
            .compare_exchange(RUNNING, code, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Why the run should stop, if it should.
    pub fn requested(&self) -> Option<StopReason> {
        match self.reason.load(Ordering::Relaxed) {
            INTERRUPTED => Some(StopReason::Interrupted),
            OUTPUT_CLOSED => Some(StopReason::OutputClosed),
            _ => None,
        }
    }
}
