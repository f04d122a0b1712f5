//! The shuttle side of the sync facade injects spurious condition-variable wake-ups (neither
//! checker produces them on its own). This shows they have teeth: a tiny reusable barrier built
//! on `ruccl_core::sync`, with an `if` where a `while` belongs around its wait, is caught; the
//! same barrier with `while` passes. A recorded failing schedule is kept as a replay regression.
#![cfg(ruccl_shuttle)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ruccl_core::sync::{Condvar, Mutex, thread};
use ruccl_models::checkers::shuttle::{pct, random};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// How the barrier re-checks its condition after a wake-up.
#[derive(Clone, Copy)]
enum Recheck {
    /// Once (the bug): a spurious wake-up lets a party through before everyone arrived.
    If,
    /// Until it holds (correct).
    While,
}

#[derive(Default)]
struct Arrivals {
    arrived: usize,
    generation: u64,
}

/// A reusable barrier for `parties` threads.
struct Barrier {
    state: Mutex<Arrivals>,
    changed: Condvar,
    parties: usize,
    recheck: Recheck,
}

impl Barrier {
    fn new(parties: usize, recheck: Recheck) -> Self {
        Self {
            state: Mutex::new(Arrivals::default()),
            changed: Condvar::new(),
            parties,
            recheck,
        }
    }

    /// Wait until all parties arrived; panics if this party was let through early.
    fn wait(&self) {
        let mut state = self.state.lock();
        let generation = state.generation;
        state.arrived += 1;
        if state.arrived == self.parties {
            state.arrived = 0;
            state.generation += 1;
            drop(state);
            self.changed.notify_all();
            return;
        }
        match self.recheck {
            Recheck::If => {
                if state.generation == generation {
                    state = self.changed.wait(state);
                }
            }
            Recheck::While => {
                while state.generation == generation {
                    state = self.changed.wait(state);
                }
            }
        }
        assert!(
            state.generation > generation,
            "a party left the barrier before every party arrived (generation {generation})"
        );
    }
}

/// Three parties pass the barrier three times.
fn parties_pass_the_barrier(recheck: Recheck) {
    let barrier = Arc::new(Barrier::new(3, recheck));
    let others: Vec<_> = (0..2)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                for _ in 0..3 {
                    barrier.wait();
                }
            })
        })
        .collect();
    for _ in 0..3 {
        barrier.wait();
    }
    for other in others {
        other.join().unwrap();
    }
}

#[test]
fn an_if_around_a_condvar_wait_is_caught_by_injected_spurious_wakeups() {
    let caught = catch_unwind(AssertUnwindSafe(|| {
        random("barrier with `if` (planted bug)", 1_000, || {
            parties_pass_the_barrier(Recheck::If);
        })
    }));
    assert!(caught.is_err(), "shuttle missed the `if` barrier");
}

#[test]
#[should_panic(expected = "a party left the barrier before every party arrived")]
fn an_if_around_a_condvar_wait_is_caught_by_pct_too() {
    pct("barrier with `if` (planted bug)", 1_000, 2, || {
        parties_pass_the_barrier(Recheck::If);
    });
}

#[test]
fn the_same_barrier_with_while_passes() {
    random("barrier with `while`", 1_000, || {
        parties_pass_the_barrier(Recheck::While);
    });
    pct("barrier with `while`", 1_000, 2, || {
        parties_pass_the_barrier(Recheck::While);
    });
}

/// The schedule shuttle printed when PCT (depth 2, this file's seed) caught the `if` barrier,
/// kept as a regression: replaying it fails the same way, deterministically.
const IF_BARRIER_FAILURE: &str = "91021eabe7a1dfc1b0a8b2348054201324482624a9480200";

#[test]
#[should_panic(expected = "a party left the barrier before every party arrived")]
fn replaying_the_recorded_if_barrier_failure_fails_again() {
    ruccl_models::quiet::silence_injected_panics();
    shuttle::replay(|| parties_pass_the_barrier(Recheck::If), IF_BARRIER_FAILURE);
}
