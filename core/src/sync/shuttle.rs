//! The shuttle backend: randomized and PCT exploration. Condition variables wake spuriously about
//! one wait in eight, chosen by shuttle's deterministic random source, so schedules replay. No
//! clock: a deadline is a timer thread shuttle schedules like any other (`checked_deadline.rs`).

#[path = "checked_deadline.rs"]
mod deadline;

use shuttle::rand::{RngCore, thread_rng};

pub use deadline::Deadline;
pub use shuttle::sync::{Arc, atomic};
pub use shuttle::thread;

pub(super) use shuttle::sync::{Condvar as RawCondvar, Mutex as RawMutex, MutexGuard as RawGuard};

pub(super) const CHECKED: bool = true;

/// How the facade holds a raw lock or condition variable: shared, so that a deadline's timer
/// thread can take the lock and notify (see `checked_deadline.rs`).
pub(super) type Shared<T> = Arc<T>;

/// Hold `value` as [`Shared`].
pub(super) fn share<T>(value: T) -> Shared<T> {
    Arc::new(value)
}

/// One wait in `SPURIOUS_ONE_IN` returns without a notification.
const SPURIOUS_ONE_IN: u64 = 8;

pub(super) fn spurious_wakeup() -> bool {
    thread_rng().next_u64() % SPURIOUS_ONE_IN == 0
}

pub(super) fn backoff(_world: usize) -> (u32, u32) {
    (1, 0)
}
