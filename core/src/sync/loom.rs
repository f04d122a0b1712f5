//! The loom backend: exhaustive exploration of interleavings. No spurious wake-ups (loom has
//! none and injecting them would multiply an already exhaustive state space), no poll before
//! parking unless a model asks for one ([`poll_delivery_once`]); no clock: a deadline is a timer
//! thread loom schedules like any other (`checked_deadline.rs`), so it explores the timeout
//! firing at every point.

#[path = "checked_deadline.rs"]
mod deadline;

pub use deadline::Deadline;
pub use loom::sync::{Arc, atomic};
pub use loom::thread;

pub(super) use loom::sync::{Condvar as RawCondvar, Mutex as RawMutex, MutexGuard as RawGuard};

pub(super) const CHECKED: bool = true;

/// How the facade holds a raw lock or condition variable: shared, so that a deadline's timer
/// thread can take the lock and notify (see `checked_deadline.rs`). A std `Arc`, not loom's: its
/// reference counts are the facade's own bookkeeping, not under test, and loom branches on every
/// clone and drop of its own `Arc` — with a timer thread holding two of them, that multiplied the
/// timeout models' state spaces by 2–5 (models/README.md, "loom cost"). The lock and condition
/// variable inside are loom's, so every operation on them is still explored.
#[allow(
    clippy::disallowed_types,
    reason = "the facade's own sharing of a loom lock, kept out of loom's state space"
)]
pub(super) type Shared<T> = std::sync::Arc<T>;

/// Hold `value` as [`Shared`].
pub(super) fn share<T>(value: T) -> Shared<T> {
    Shared::new(value)
}

pub(super) fn spurious_wakeup() -> bool {
    false
}

std::thread_local! {
    /// Polls before parking for communicators built on this OS thread; see [`poll_delivery_once`].
    static POLLS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Under loom a waiter parks at once by default: every poll without the lock multiplies a
/// model's state space (`core/src/rendezvous/README.md`, "How the checkers poll"). With
/// `poll = true`, communicators built from now on *by this thread* — loom runs a model's threads
/// as coroutines of the thread that runs the model — make their waiters read their delivery slot
/// once without the lock before they park, so that loom checks that lock-free read against the
/// publication. The models that need it (`models/tests/loom.rs`, "Delivery without the lock") set
/// it before they run.
pub fn poll_delivery_once(poll: bool) {
    POLLS.set(u32::from(poll));
}

/// No poll, or one (see [`poll_delivery_once`]); never a spin hint or a yield.
pub(super) fn backoff(_world: usize) -> (u32, u32) {
    let polls = POLLS.get();
    (polls, polls)
}
