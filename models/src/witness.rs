//! [`Witness`]: how often a scenario hit the case it is about. Some cases (an abort landing
//! while a rank of g has not yet taken its output and a rank of g + 1 deposits) depend on the
//! schedule; a witness counts, over a checker's executions, those that hit the case, so a run
//! shows it was explored, not just possible. Harness bookkeeping in std atomics, outside the
//! checkers' view; never a pass/fail condition.
#![allow(
    clippy::disallowed_types,
    reason = "harness bookkeeping outside the checkers' view, as the execution counters"
)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Executions seen, and those that hit the case.
#[derive(Debug)]
pub struct Witness {
    hits: AtomicUsize,
    seen: AtomicUsize,
}

impl Witness {
    /// No execution seen yet.
    pub const fn new() -> Self {
        Self {
            hits: AtomicUsize::new(0),
            seen: AtomicUsize::new(0),
        }
    }

    /// Record one execution, which hit the case or not.
    pub fn saw(&self, hit: bool) {
        self.seen.fetch_add(1, Ordering::Relaxed);
        if hit {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `(hits, executions)` so far.
    pub fn counts(&self) -> (usize, usize) {
        (
            self.hits.load(Ordering::Relaxed),
            self.seen.load(Ordering::Relaxed),
        )
    }
}

impl Default for Witness {
    fn default() -> Self {
        Self::new()
    }
}

/// A flag a scenario's thread raises for a [`Witness`] to read (whether rank 0 had returned from
/// generation 0, say): harness bookkeeping like the witness, outside the checkers' view.
#[derive(Debug, Default)]
pub struct Flag(AtomicBool);

impl Flag {
    /// Raise the flag.
    pub fn raise(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether the flag was raised.
    pub fn is_raised(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}
