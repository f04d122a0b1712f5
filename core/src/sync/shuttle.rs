//! The shuttle backend: randomized and PCT exploration. Condition variables wake spuriously about
//! one wait in eight, chosen by shuttle's deterministic random source, so schedules replay.

#[path = "checked_deadline.rs"]
mod deadline;

use shuttle::rand::{RngCore, thread_rng};
use std::time::Duration;

pub use deadline::Deadline;
pub use shuttle::sync::{Arc, atomic};
pub use shuttle::thread;

pub(super) use shuttle::sync::{Condvar as RawCondvar, Mutex as RawMutex, MutexGuard as RawGuard};

pub(super) const CHECKED: bool = true;

/// One wait in `SPURIOUS_ONE_IN` returns without a notification.
const SPURIOUS_ONE_IN: u64 = 8;

pub(super) fn spurious_wakeup() -> bool {
    thread_rng().next_u64() % SPURIOUS_ONE_IN == 0
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

pub(super) fn backoff(_world: usize) -> (u32, u32) {
    (1, 0)
}
