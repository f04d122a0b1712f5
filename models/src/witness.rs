//! [`Witness`]: how often a scenario hit the case it is about. Some cases (an abort landing
//! while a rank of g has not yet taken its output and a rank of g + 1 deposits) depend on the
//! schedule; a witness counts, over a checker's executions, those that hit the case, so a run
//! shows it was explored, not just possible. Harness bookkeeping in std atomics, outside the
//! checkers' view; never a pass/fail condition.

use std::sync::atomic::{AtomicUsize, Ordering};

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
