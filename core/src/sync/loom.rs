//! The loom backend: exhaustive exploration of interleavings. No spurious wake-ups (loom has
//! none and injecting them would multiply an already exhaustive state space); no time.

#[path = "checked_deadline.rs"]
mod deadline;

use std::time::Duration;

pub use deadline::Deadline;
pub use loom::sync::{Arc, atomic};
pub use loom::thread;

pub(super) use loom::sync::{Condvar as RawCondvar, Mutex as RawMutex, MutexGuard as RawGuard};

pub(super) const CHECKED: bool = true;

pub(super) fn spurious_wakeup() -> bool {
    false
}

pub(super) fn wait_timeout<'a, T>(
    condvar: &RawCondvar,
    guard: RawGuard<'a, T>,
    _timeout: Duration,
) -> (RawGuard<'a, T>, bool) {
    // Unreachable in practice: a checked `Deadline` never has time remaining to wait for.
    let guard = condvar
        .wait(guard)
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    (guard, false)
}

pub(super) fn backoff(_world: usize) -> (u32, bool) {
    (1, true)
}
