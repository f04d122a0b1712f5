//! The loom backend: exhaustive exploration of interleavings. No spurious wake-ups (loom has
//! none and injecting them would multiply an already exhaustive state space), no spin before
//! parking (see [`backoff`]); no clock.

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

/// No spin under loom: waiters park at once (`core/src/rendezvous/README.md`, "Why the checkers
/// do not spin", says why and what it costs).
pub(super) fn backoff(_world: usize) -> (u32, u32) {
    (0, 0)
}
