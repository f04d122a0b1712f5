//! [`Backoff`]: a waiter's spin-then-yield budget before it parks, as a stateful object the
//! caller loops on (crossbeam-utils' `Backoff` is the model).
//!
//! ```
//! use ruccl_core::sync::SpinBudget;
//! use std::sync::atomic::{AtomicBool, Ordering};
//!
//! let ready = AtomicBool::new(true);
//! let mut backoff = SpinBudget::for_world(2).backoff();
//! while !ready.load(Ordering::Acquire) {
//!     if backoff.is_completed() {
//!         break; // time to park on a condition variable instead
//!     }
//!     backoff.snooze();
//! }
//! ```

use super::{backend, thread};

/// How many polls a waiter makes before parking, and how many of the first ones pause with the
/// CPU's spin hint rather than yielding the core. Each backend supplies its own: see
/// `core/src/rendezvous/README.md` for why std spins, shuttle polls once and loom never spins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpinBudget {
    /// Polls before parking, spins included.
    polls: u32,
    /// How many of the first polls pause with the spin hint; every later one yields.
    /// Invariant: `spins <= polls`.
    spins: u32,
}

impl SpinBudget {
    /// The budget for `world` ranks on this machine, under this backend.
    pub fn for_world(world: usize) -> Self {
        let (polls, spins) = backend::backoff(world);
        Self {
            polls,
            spins: spins.min(polls),
        }
    }

    /// How many polls before parking.
    pub fn polls(&self) -> u32 {
        self.polls
    }

    /// How many of the first polls pause with the spin hint rather than yielding the core.
    pub fn spins(&self) -> u32 {
        self.spins
    }

    /// A fresh waiter with this budget.
    pub fn backoff(&self) -> Backoff {
        Backoff {
            budget: *self,
            done: 0,
        }
    }
}

/// One wait's progress through its [`SpinBudget`]: [`snooze`](Self::snooze) between polls
/// until [`is_completed`](Self::is_completed), then park.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    budget: SpinBudget,
    /// Polls made so far in this wait.
    done: u32,
}

impl Backoff {
    /// Pause once: the spin hint for the budget's first polls, a yield of the core after.
    pub fn snooze(&mut self) {
        if self.done < self.budget.spins {
            std::hint::spin_loop();
        } else {
            thread::yield_now();
        }
        self.done = self.done.saturating_add(1);
    }

    /// Whether the budget is spent: the waiter should park now.
    pub fn is_completed(&self) -> bool {
        self.done >= self.budget.polls
    }
}
