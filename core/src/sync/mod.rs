//! The synchronisation facade: the only way `ruccl-core` (and the simulated device) touches
//! threads, locks, condition variables and atomics.
//!
//! One backend is compiled in:
//!
//! | cfg               | backend            | used for                                  |
//! |-------------------|--------------------|-------------------------------------------|
//! | (none)            | [`std`](mod@std)   | production and real-thread tests         |
//! | `ruccl_loom`      | `loom`             | exhaustive model checking                 |
//! | `ruccl_shuttle`   | `shuttle`          | randomized / PCT model checking           |
//!
//! The API is the narrowest the three share, in the style of tokio's loom shim: [`Mutex::lock`]
//! cannot fail (poisoning is dropped, because the core never panics while holding a lock and the
//! state stays consistent where a foreign panic could unwind), [`Condvar::wait`] may wake
//! spuriously (and under shuttle it *does*, on purpose), and waiting with a deadline goes through
//! [`Deadline`], which never reads the clock under a checker, so replays stay deterministic.
//!
//! Everything a checker must see has to come from here: a `std::sync` type used directly is
//! invisible to loom and shuttle. `core/clippy.toml` forbids the std types outside the std backend.

#[cfg(all(ruccl_loom, ruccl_shuttle))]
compile_error!(
    "`--cfg ruccl_loom` and `--cfg ruccl_shuttle` are mutually exclusive: pick one checker"
);

#[cfg(not(any(ruccl_loom, ruccl_shuttle)))]
#[path = "std.rs"]
mod backend;

#[cfg(all(ruccl_loom, not(ruccl_shuttle)))]
#[path = "loom.rs"]
mod backend;

#[cfg(all(ruccl_shuttle, not(ruccl_loom)))]
#[path = "shuttle.rs"]
mod backend;

mod lock;

pub use backend::{Arc, Deadline, atomic, thread};
pub use lock::{Condvar, Mutex, MutexGuard};

/// `true` when a model checker (loom or shuttle) provides the primitives.
pub const CHECKED: bool = backend::CHECKED;

/// How a waiter polls for progress before it parks on a condition variable.
///
/// Spinning only pays while the rank being waited for is running. With every rank on a core of
/// its own, a waiter first polls with the CPU's spin hint (no system calls: a wake-up is noticed
/// within nanoseconds), then polls yielding the core between polls — on a machine shared with
/// other processes the rank that must make progress may have lost its core, and a yield hands it
/// back far sooner than the futex round trip of a park — and only then parks. With more ranks
/// than cores every poll yields. Either way the polls are bounded, then the waiter parks.
/// Under shuttle the budget is one poll and one yield: the spin path is still explored, but adds
/// only a couple of scheduling points. Under loom there is no spin at all: loom would explore
/// every value each poll's atomic load may return, and the parking path it checks instead is the
/// one correctness rests on (the spin only shortcuts it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Polls before parking, spins included.
    polls: u32,
    /// How many of the first polls pause with the spin hint; every later one yields.
    /// Invariant: `spins <= polls`.
    spins: u32,
}

impl Backoff {
    /// The policy for `world` ranks on this machine.
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

    /// The pause after `done` polls of the current wait: the spin hint for the first
    /// [`spins`](Self::spins), a yield of the core after that.
    pub fn pause(&self, done: u32) {
        if done < self.spins {
            std::hint::spin_loop();
        } else {
            thread::yield_now();
        }
    }
}
