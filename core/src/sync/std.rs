//! The production backend: `std`'s primitives and the real clock.

use std::time::{Duration, Instant};

pub use std::sync::{Arc, atomic};
pub use std::thread;

pub(super) use std::sync::{Condvar as RawCondvar, Mutex as RawMutex, MutexGuard as RawGuard};

pub(super) const CHECKED: bool = false;

/// How the facade holds a raw lock or condition variable: by value (a checker backend shares
/// them with its timer threads instead).
pub(super) type Shared<T> = T;

/// Hold `value` as [`Shared`].
pub(super) fn share<T>(value: T) -> Shared<T> {
    value
}

/// Polls with the spin hint when every rank has a core: a few microseconds, about what a partner
/// that is running needs to arrive and publish a small generation. Longer spins fall off a cliff
/// when a partner is *not* running (a busy machine): measured on a 2-vCPU VM with a CPU hog on
/// one core, a W = 2 generation took 84 µs with 256 spins, 28 µs with 64, 4–5 µs with 32 and
/// 4–9 µs with 16, against 0.9 µs idle for all of them.
const SPIN_POLLS: u32 = 32;
/// Polls that each yield the core, after the spins (or from the start, when ranks outnumber
/// cores): every yield lets a rank that must make progress run, at the price of a system call.
/// A waiter left waiting for a slow peer parks after these.
const YIELD_POLLS: u32 = 256;

pub(super) fn spurious_wakeup() -> bool {
    false
}

/// `(polls, spins)` for `world` ranks: spin, then yield, then park when the ranks fit the
/// cores; only yield, then park, when they do not (a spinning rank would keep a peer off a core).
pub(super) fn backoff(world: usize) -> (u32, u32) {
    let cores = thread::available_parallelism().map_or(1, usize::from);
    if world <= cores {
        (SPIN_POLLS + YIELD_POLLS, SPIN_POLLS)
    } else {
        (YIELD_POLLS, 0)
    }
}

/// A point in time after which a wait gives up; `None` inside means "never".
#[derive(Clone, Copy, Debug)]
pub struct Deadline(Option<Instant>);

impl Deadline {
    /// A deadline that never passes.
    pub fn never() -> Self {
        Self(None)
    }

    /// The deadline `timeout` from now (never, if that overflows the clock).
    pub fn after(timeout: Duration) -> Self {
        Self(Instant::now().checked_add(timeout))
    }

    /// Whether the deadline has passed.
    pub fn expired(&self) -> bool {
        self.0.is_some_and(|at| Instant::now() >= at)
    }

    /// Wait on `condvar` with `guard` (of `mutex`) until notified or this deadline passes;
    /// returns the guard and whether the deadline had passed on return.
    pub(in crate::sync) fn wait<'a, T: Send + 'static>(
        &self,
        condvar: &Shared<RawCondvar>,
        _mutex: &Shared<RawMutex<T>>,
        guard: RawGuard<'a, T>,
    ) -> (RawGuard<'a, T>, bool) {
        let Some(at) = self.0 else {
            let guard = condvar
                .wait(guard)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            return (guard, false);
        };
        let left = at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return (guard, true);
        }
        let guard = match condvar.wait_timeout(guard, left) {
            Ok((guard, _)) => guard,
            Err(poisoned) => poisoned.into_inner().0,
        };
        (guard, self.expired())
    }
}
