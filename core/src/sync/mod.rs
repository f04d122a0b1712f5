//! The synchronisation facade: the only way `ruccl-core` touches threads, locks, condition
//! variables and atomics, and the way the simulated device shares what the checkers must see
//! (its ledger, fault counters, tracer, the conformance suite's queues).
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
//! invisible to loom and shuttle, and a `std::cell::UnsafeCell` is one whose races loom cannot
//! report ([`cell::UnsafeCell`] is the checked one). `core/facade-lint/clippy.toml` forbids the
//! std types (CI runs clippy with it under `--cfg ruccl_loom` over core, sim and models); the std
//! backend re-exports them, and every other use — here, the facade's own plumbing (a checker's
//! shared lock, the deadline timer, the std cell behind [`cell::UnsafeCell`]); outside, harness
//! bookkeeping kept out of the state space — carries an
//! `#[allow(clippy::disallowed_types, reason = …)]`. `ARCHITECTURE.md` lists them.
//!
//! How the rendezvous uses these: a waiter polls its own delivery slot and the abort flag without
//! the lock, for a bounded [`SpinBudget`] (spin hints, then yields of the core, as its
//! [`Backoff`] says), then parks on the condition variable until the publication or an abort
//! notifies it. Under loom the budget is zero — every waiter parks at once — unless a model asks
//! for one poll (`poll_delivery_once`); under shuttle it is one poll and one yield. Why, in
//! `core/src/rendezvous/README.md`.

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

mod backoff;
pub mod cell;
mod lock;

#[cfg(all(ruccl_loom, not(ruccl_shuttle)))]
pub use backend::poll_delivery_once;
pub use backend::{Arc, Deadline, atomic, thread};
pub use backoff::{Backoff, SpinBudget};
pub use lock::{Condvar, Mutex, MutexGuard};

/// `true` when a model checker (loom or shuttle) provides the primitives.
pub const CHECKED: bool = backend::CHECKED;
