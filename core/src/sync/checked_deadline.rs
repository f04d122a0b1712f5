//! Deadlines under a checker (loom or shuttle). Neither models time and the clock is never read
//! (a replay must not depend on it). Instead, a deadline is a **timer thread**, spawned the first
//! time a wait with that deadline would park: it takes the lock, marks the deadline passed, and
//! notifies the condition variable. The checker schedules it like every other thread, so a
//! deadline can pass at any point after the wait began — before the waiter parks, while it
//! sleeps, in the same instant a notification arrives — and loom explores every such point
//! (shuttle samples them from its seeded random source). Because the timer marks the deadline
//! under the lock the waiter checks it under, its notification is never lost: a waiter either
//! sees the mark before it parks or is parked when the timer notifies.
//!
//! A wait without a deadline ([`Deadline::never`]) spawns nothing: checked models without
//! timeouts keep their state spaces.

// The timer's handles and its flag are std's, not the checker's. The flag is written by the
// timer thread and read by the waiter only while each holds the checker's lock, whose every
// operation the checker explores; the handles' reference counts are the facade's own
// bookkeeping. Through loom's types each clone, drop and access would be a branch of its own,
// multiplying the state space of every model with a deadline by 2-5 (models/README.md, "loom
// cost") without exploring anything of the protocol. (Under shuttle they are std's anyway.)
#![allow(
    clippy::disallowed_types,
    reason = "accessed only under the checker's lock, or the facade's own reference counts"
)]

use super::{RawCondvar, RawGuard, RawMutex, Shared, thread};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// When a wait gives up: never, or when its timer thread has fired.
#[derive(Debug)]
pub struct Deadline {
    timer: Option<Timer>,
}

/// The state of one deadline's timer.
#[derive(Debug)]
struct Timer {
    /// Set by the timer thread, under the waiter's lock.
    fired: Arc<AtomicBool>,
    /// Whether the timer thread was spawned (by the first wait that would park).
    armed: Cell<bool>,
}

impl Deadline {
    /// A deadline that never passes.
    pub fn never() -> Self {
        Self { timer: None }
    }

    /// A deadline that passes whenever the checker runs its timer thread; the duration is not
    /// modelled.
    pub fn after(_timeout: Duration) -> Self {
        Self {
            timer: Some(Timer {
                fired: Arc::new(AtomicBool::new(false)),
                armed: Cell::new(false),
            }),
        }
    }

    /// Whether the timer has fired.
    pub fn expired(&self) -> bool {
        self.timer
            .as_ref()
            .is_some_and(|timer| timer.fired.load(Ordering::SeqCst))
    }

    /// Wait on `condvar` with `guard` (of `mutex`) until notified, woken spuriously or the timer
    /// fires; returns the guard and whether the deadline had passed on return.
    pub(in crate::sync) fn wait<'a, T: Send + 'static>(
        &self,
        condvar: &Shared<RawCondvar>,
        mutex: &Shared<RawMutex<T>>,
        guard: RawGuard<'a, T>,
    ) -> (RawGuard<'a, T>, bool) {
        if let Some(timer) = &self.timer {
            if timer.fired.load(Ordering::SeqCst) {
                return (guard, true);
            }
            if !timer.armed.replace(true) {
                let fired = Arc::clone(&timer.fired);
                let mutex = Arc::clone(mutex);
                let condvar = Arc::clone(condvar);
                // Detached: it ends on its own once it has fired.
                let _ = thread::spawn(move || {
                    let held = mutex
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    fired.store(true, Ordering::SeqCst);
                    drop(held);
                    condvar.notify_all();
                });
            }
        }
        let guard = condvar
            .wait(guard)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (guard, self.expired())
    }
}
