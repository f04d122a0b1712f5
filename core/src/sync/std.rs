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

#[cfg(test)]
mod tests {
    //! The real clock's deadlines and the waiting budget, as the rendezvous reads them.

    use super::Deadline;
    use crate::sync::{Condvar, Mutex, SpinBudget};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_waiter_spins_then_yields_while_the_ranks_fit_the_cores_and_only_yields_beyond() {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let fitting = SpinBudget::for_world(1);
        assert!(
            0 < fitting.spins() && fitting.spins() < fitting.polls(),
            "{fitting:?}"
        );
        let crowded = SpinBudget::for_world(cores + 1);
        assert!(crowded.spins() == 0 && crowded.polls() > 0, "{crowded:?}");
        // The spins come on top of the yields: a rank that fits yields as often as one that
        // does not, before it parks.
        assert_eq!(fitting.polls() - fitting.spins(), crowded.polls());
        // A wait's budget ends after exactly its polls.
        for budget in [fitting, crowded] {
            let mut backoff = budget.backoff();
            for _ in 0..budget.polls() {
                assert!(!backoff.is_completed());
                backoff.snooze();
            }
            assert!(backoff.is_completed());
        }
    }

    #[test]
    fn a_deadline_passes_only_once_its_time_is_up() {
        assert!(!Deadline::never().expired());
        assert!(!Deadline::after(Duration::from_secs(3600)).expired());
        assert!(Deadline::after(Duration::ZERO).expired());
        // Past the clock's range: never.
        assert!(!Deadline::after(Duration::MAX).expired());
    }

    #[test]
    fn a_timed_wait_woken_before_its_deadline_does_not_report_it_passed() {
        let shared = Arc::new((Mutex::new(false), Condvar::new()));
        let notifier = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                *shared.0.lock() = true;
                shared.1.notify_all();
            })
        };
        let deadline = Deadline::after(Duration::from_secs(3600));
        let mut ready = shared.0.lock();
        while !*ready {
            let (woken, expired) = shared.1.wait_until(ready, &deadline);
            assert!(
                !expired,
                "woken an hour early, the wait says its deadline passed"
            );
            ready = woken;
        }
        drop(ready);
        notifier.join().unwrap();
    }

    #[test]
    fn notify_one_wakes_the_one_waiter() {
        let shared = Arc::new((Mutex::new(false), Condvar::new()));
        // Held until the wait releases it: the notifier cannot notify before the wait begins.
        let mut ready = shared.0.lock();
        let notifier = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                *shared.0.lock() = true;
                shared.1.notify_one();
            })
        };
        let deadline = Deadline::after(Duration::from_secs(10));
        while !*ready {
            let (woken, expired) = shared.1.wait_until(ready, &deadline);
            assert!(!expired, "notify_one woke nobody");
            ready = woken;
        }
        drop(ready);
        notifier.join().unwrap();
    }

    #[test]
    fn a_timed_wait_nobody_wakes_ends_when_its_deadline_passes() {
        let (mutex, condvar) = (Mutex::new(()), Condvar::new());
        let deadline = Deadline::after(Duration::from_millis(20));
        let mut guard = mutex.lock();
        loop {
            let (woken, expired) = condvar.wait_until(guard, &deadline);
            guard = woken;
            if expired {
                break;
            }
        }
        assert!(deadline.expired());
    }
}
