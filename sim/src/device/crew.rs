//! The crew: ranks waiting for their generation's outcome, running shares of the step the last
//! arriver is running.
//!
//! A step cut into shares ([`parallel`](super::parallel)) is posted here while it runs. A rank
//! that waits for its delivery calls [`help`] between two polls (through
//! [`NativeCollectiveDevice::assist`](ruccl_core::NativeCollectiveDevice::assist)) and runs
//! unclaimed shares on its own thread — a thread that is awake and on a core already, where
//! handing a share to a sleeping pool worker costs a wake-up (tens of microseconds on a VM, as
//! long as a megabyte's share takes). One step is posted at a time, process-wide: a step that
//! finds the slot taken (another communicator's) runs on rayon's pool as before.
//!
//! Not under a model checker: there no other thread ever runs a share (`parallel.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A posted task: a closure borrowed from the poster's stack, its lifetime erased. It is called
/// only between a helper's entry and exit under [`SLOT`]'s lock, which [`run_posted`] waits out
/// before the borrow ends.
#[derive(Clone, Copy)]
struct Task(*const (dyn Fn() + Sync));

// SAFETY: the pointee is `Sync` (a `dyn Fn() + Sync`), so calling it from any thread through a
// shared reference is sound; the pointer itself carries no thread affinity. Where it may be
// dereferenced (only while posted or while a helper that took it is inside) is `SLOT`'s
// invariant, not the thread's.
unsafe impl Send for Task {}

/// The posted task and the helpers running it.
///
/// Invariant: while `inside > 0` the task those helpers took is alive — [`run_posted`] clears
/// `task` and then returns only once it sees `inside == 0` under the lock, and a helper raises
/// `inside` under the lock only while `task` is `Some`.
struct Slot {
    task: Option<Task>,
    /// Helpers that took the task and have not returned from it.
    inside: usize,
}

thread_local! {
    /// The rank this thread last helped as ([`home`]).
    static HOME: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The rank this thread last helped as (0 for one that never helped): whose thread a step too
/// small to split is handed to (rank 0's), and where the CPU a thread runs on cannot be read,
/// the share it takes first (`parallel.rs`: so that in a loop of collectives the same elements
/// stay on one core).
pub(crate) fn home() -> usize {
    HOME.get()
}

static SLOT: Mutex<Slot> = Mutex::new(Slot {
    task: None,
    inside: 0,
});

/// Whether a task is posted: a hint read without the lock, so that a waiting rank's poll costs
/// one load when nothing is posted. Written under [`SLOT`]'s lock, with `task`.
static POSTED: AtomicBool = AtomicBool::new(false);

/// The slot, whatever a panic elsewhere left in it: no code runs under the lock but these
/// few lines, none of which panics, so its state is always whole.
fn slot() -> MutexGuard<'static, Slot> {
    SLOT.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Run a share of the posted step, if one is posted and unclaimed; return at once otherwise.
/// `task` must not panic (a [`parallel`](super::parallel) job catches its shares' panics and
/// hands them to its poster).
pub(crate) fn help(rank: usize) {
    HOME.set(rank);
    if !POSTED.load(Ordering::Acquire) {
        return;
    }
    let task = {
        let mut slot = slot();
        let Some(task) = slot.task else {
            return;
        };
        slot.inside += 1;
        task
    };
    let _leave = Leave;
    // SAFETY: `inside` was raised under the lock while `task` was posted, and is lowered only
    // by `Leave` after this call returns (or unwinds); `run_posted` keeps the closure's borrow
    // alive until it sees `inside == 0` (`Slot`'s invariant), so the pointee is alive and, being
    // `Sync`, callable from this thread.
    unsafe { (*task.0)() };
}

/// Lowers [`Slot::inside`] when a helper leaves its task, also if the task unwinds.
struct Leave;

impl Drop for Leave {
    fn drop(&mut self) {
        slot().inside -= 1;
    }
}

/// Post `task` for helpers, run `body`, then retract it and wait until no helper is inside it;
/// `false` (and `body` not run) if another step holds the slot.
pub(crate) fn run_posted(task: &(dyn Fn() + Sync), body: impl FnOnce()) -> bool {
    {
        let mut slot = slot();
        if slot.task.is_some() {
            return false;
        }
        let task: *const (dyn Fn() + Sync + '_) = task;
        // SAFETY: only the trait object's lifetime changes (same layout, same vtable). The
        // erased borrow is dereferenced only by helpers inside the task, and `Retract` (dropped
        // before this function returns, also on unwind) waits until none is: `Slot`'s invariant.
        let task = unsafe {
            std::mem::transmute::<*const (dyn Fn() + Sync + '_), *const (dyn Fn() + Sync)>(task)
        };
        slot.task = Some(Task(task));
        POSTED.store(true, Ordering::Release);
    }
    let _retract = Retract;
    body();
    true
}

/// Retracts the posted task and waits for its helpers to leave it.
struct Retract;

impl Drop for Retract {
    fn drop(&mut self) {
        {
            let mut slot = slot();
            slot.task = None;
            POSTED.store(false, Ordering::Release);
            if slot.inside == 0 {
                return;
            }
        }
        // A helper inside finishes the share it claimed and finds none left: short.
        while slot().inside > 0 {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{help, run_posted};
    use std::sync::atomic::{AtomicUsize, Ordering};

    // These tests share the process-wide slot with every other test in the binary: each posts
    // its own task and only counts what its own task did.

    #[test]
    fn a_helper_runs_the_posted_task_and_nothing_once_it_is_retracted() {
        let runs = AtomicUsize::new(0);
        let task = || {
            runs.fetch_add(1, Ordering::Relaxed);
        };
        // Another test may hold the slot for a moment: try until this one posts.
        let start = std::time::Instant::now();
        while !run_posted(&task, || help(0)) {
            assert!(start.elapsed().as_secs() < 10, "the slot stayed taken");
        }
        let during = runs.load(Ordering::Relaxed);
        help(0);
        assert!(during >= 1, "the helper ran the posted task");
        assert_eq!(
            runs.load(Ordering::Relaxed),
            during,
            "retracted: not run again"
        );
    }

    #[test]
    fn a_second_poster_is_refused_while_the_slot_is_taken() {
        let task = || {};
        let mut refused = None;
        let start = std::time::Instant::now();
        while refused.is_none() {
            assert!(start.elapsed().as_secs() < 10, "the slot stayed taken");
            run_posted(&task, || refused = Some(!run_posted(&task, || {})));
        }
        assert_eq!(refused, Some(true));
    }
}
