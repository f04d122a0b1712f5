//! The steps of the last generation, checked, laid out and priced once, and the [`Cursor`] a
//! generation walks them with.
//!
//! A communicator runs the same plan generation after generation, and checking a step and laying
//! it out ([`Step::lay_out`]) costs more than moving a few elements: at W = 2 a one-element
//! all-reduce spent 0.75 µs of the device's 1.3 µs in `exchange`, mostly there. Both the layout
//! and the step's traffic are pure
//! functions of the step, the world and the buffer length, so a step equal to the one the last
//! generation ran at the same position, with the same world and buffer length, reuses them: the
//! same checks passed, the same layout results. Any other step is checked and laid out afresh,
//! so a caller that hands the device a different step (a wrong device under test, another plan)
//! is judged exactly as before.
//!
//! Bounded: one generation's steps are kept per thread, the last one that missed.
//!
//! **Per thread, not per device.** The generation's runner is whichever rank arrived last, so it
//! changes threads from one generation to the next (at W = 2, every generation). Books shared by
//! the device's clones — a lock, reference counts — were written by one core and then read and
//! written by the other in every generation, and each such cache line crossing cores cost more
//! than the step itself (at W = 2, one shared `Arc`'s count was 44 % of `exchange`). A laid-out
//! step is a pure function of the step, the world and the buffer length, so a memo per thread
//! is as sound as one per device: every runner finds its own, and nothing here is shared. Under
//! a checker the model's threads may share one memo (loom runs them on the test's thread), which
//! changes nothing but how often a step is laid out afresh: the memo is only borrowed inside
//! [`Cursor::start`] and [`Cursor::finish`], never across an operation the checker sees.

#![allow(
    clippy::disallowed_types,
    reason = "a per-thread memo: its `Arc`s never leave the thread's own books except inside a \
              generation's work, and are kept out of the checkers' state space"
)]

use super::error::SimError;
use crate::ledger::StepTraffic;
use ruccl_core::{Clique, Source, Step, StepLayout, WriteKind};
use std::cell::RefCell;
use std::sync::Arc;

/// One step as checked and laid out for a world and a buffer length.
#[derive(Debug)]
pub(crate) struct LaidOut {
    step: Step,
    world: usize,
    buffer_len: usize,
    /// What `exchange` executes.
    pub(crate) layout: StepLayout,
    /// What the ledger records for it.
    pub(crate) traffic: StepTraffic,
    /// The step as a clique ([`Step::clique`]): `exchange` then folds each element once and
    /// stores it on every rank of the group, and `layout` is only the step's check.
    pub(crate) clique: Option<Clique>,
}

impl LaidOut {
    /// Check and lay out `step` for `world` ranks with buffers of `buffer_len` elements.
    fn new(step: &Step, world: usize, buffer_len: usize) -> Result<Self, SimError> {
        Ok(Self {
            layout: local_sources_copied(step.lay_out(world, buffer_len)?),
            traffic: StepTraffic::of(step),
            clique: step.clique(),
            step: step.clone(),
            world,
            buffer_len,
        })
    }

    /// Whether this is `step`'s layout for `world` and `buffer_len`.
    fn is_for(&self, step: &Step, world: usize, buffer_len: usize) -> bool {
        self.world == world && self.buffer_len == buffer_len && self.step == *step
    }
}

/// `layout` with every source that a write's own receiver would read in place (a local copy or
/// fold, `from == to`, whose source no write of the step overlaps) also set aside: the device
/// takes a receiver's buffer out while it writes it, so it reads its own sources from a copy.
fn local_sources_copied(mut layout: StepLayout) -> StepLayout {
    let StepLayout { snapshots, writes } = &mut layout;
    for write in writes.iter_mut() {
        let pieces = match &mut write.kind {
            WriteKind::Copy(piece) => std::slice::from_mut(piece),
            WriteKind::Fold { before, after } => {
                // Only `after` can hold the receiver itself (senders below it are in `before`).
                debug_assert!(before.iter().all(|piece| piece.from != write.to));
                after.as_mut_slice()
            }
        };
        for piece in pieces {
            if let Source::Live { rank, start } = piece.source {
                if rank == write.to {
                    snapshots.push((rank, start..start + write.range.len()));
                    piece.source = Source::Copied {
                        snapshot: snapshots.len() - 1,
                        offset: 0,
                    };
                }
            }
        }
    }
    layout
}

/// The steps of one generation, in the order they ran. `Arc`, not `Rc`: a generation's work
/// holds them and may be moved to another thread by its owner.
type Steps = Arc<Vec<Arc<LaidOut>>>;

thread_local! {
    /// The steps of the last generation this thread ran that laid out a step afresh.
    static LAST: RefCell<Steps> = RefCell::new(Arc::default());
}

/// One generation's walk through its steps.
#[derive(Debug)]
pub(crate) struct Cursor {
    /// The last generation's steps, as kept when this one began.
    last: Steps,
    /// Steps exchanged so far.
    done: usize,
    /// This generation's steps so far, once one of them was not the last generation's.
    renewed: Option<Vec<Arc<LaidOut>>>,
}

impl Cursor {
    /// A generation beginning now on this thread: it may reuse the steps of the last one this
    /// thread ran.
    pub(crate) fn start() -> Self {
        Self {
            last: LAST.with(|last| Arc::clone(&last.borrow())),
            done: 0,
            renewed: None,
        }
    }

    /// The generation finished: keep its steps for the next one on this thread, if any of them
    /// was laid out afresh.
    pub(crate) fn finish(self) {
        if let Some(renewed) = self.renewed {
            // The old steps are freed after the memo is released.
            let previous = LAST.with(|last| last.replace(Arc::new(renewed)));
            drop(previous);
        }
    }

    /// The layout of this generation's next step, `step`: the last generation's at the same
    /// position if it is the same step for the same world and buffer length, else checked and
    /// laid out now.
    pub(crate) fn next(
        &mut self,
        step: &Step,
        world: usize,
        buffer_len: usize,
    ) -> Result<Arc<LaidOut>, SimError> {
        let position = self.done;
        let kept = self
            .last
            .get(position)
            .filter(|laid_out| laid_out.is_for(step, world, buffer_len));
        let laid_out = match kept {
            Some(laid_out) => Arc::clone(laid_out),
            None => {
                let fresh = Arc::new(LaidOut::new(step, world, buffer_len)?);
                let last = &self.last;
                self.renewed
                    .get_or_insert_with(|| last.iter().take(position).cloned().collect());
                fresh
            }
        };
        if let Some(renewed) = &mut self.renewed {
            renewed.push(Arc::clone(&laid_out));
        }
        self.done += 1;
        Ok(laid_out)
    }
}

#[cfg(test)]
mod tests {
    use super::Cursor;
    use crate::SimError;
    use ruccl_core::{Step, Transfer};

    fn step(range: std::ops::Range<usize>) -> Step {
        Step {
            combine: true,
            transfers: vec![
                Transfer::new(0, 1, range.clone()),
                Transfer::new(1, 0, range),
            ],
        }
    }

    #[test]
    fn a_repeated_generation_reuses_the_laid_out_steps() {
        let mut first = Cursor::start();
        let a = first.next(&step(0..2), 2, 4).unwrap();
        first.finish();
        let mut second = Cursor::start();
        let b = second.next(&step(0..2), 2, 4).unwrap();
        assert!(std::sync::Arc::ptr_eq(&a, &b));
        assert!(second.renewed.is_none());
    }

    #[test]
    fn each_thread_keeps_its_own_steps() {
        let mut here = Cursor::start();
        let a = here.next(&step(0..2), 2, 4).unwrap();
        here.finish();
        let elsewhere = std::thread::spawn(|| {
            let mut there = Cursor::start();
            let b = there.next(&step(0..2), 2, 4).unwrap();
            let fresh = there.renewed.is_some();
            there.finish();
            (b, fresh)
        })
        .join()
        .unwrap();
        assert!(elsewhere.1, "another thread found this thread's steps");
        assert!(!std::sync::Arc::ptr_eq(&a, &elsewhere.0));
        let mut again = Cursor::start();
        assert!(std::sync::Arc::ptr_eq(
            &a,
            &again.next(&step(0..2), 2, 4).unwrap()
        ));
    }

    #[test]
    fn another_step_world_or_length_is_laid_out_afresh() {
        let mut first = Cursor::start();
        let a = first.next(&step(0..2), 2, 4).unwrap();
        first.finish();
        for (other, world, buffer_len) in
            [(step(0..3), 2, 4), (step(0..2), 3, 4), (step(0..2), 2, 5)]
        {
            let mut cursor = Cursor::start();
            let b = cursor.next(&other, world, buffer_len).unwrap();
            assert!(!std::sync::Arc::ptr_eq(&a, &b));
        }
    }

    #[test]
    fn a_step_that_was_once_valid_is_still_checked_when_it_changes() {
        let mut first = Cursor::start();
        first.next(&step(0..2), 2, 4).unwrap();
        first.finish();
        let mut second = Cursor::start();
        // The same transfers, but past the end of a shorter buffer.
        assert!(matches!(
            second.next(&step(0..2), 2, 1),
            Err(SimError::Step(
                ruccl_core::StepViolation::OutOfBounds { .. }
            ))
        ));
    }

    #[test]
    fn a_generation_that_diverges_keeps_its_own_steps_for_the_next() {
        let mut first = Cursor::start();
        first.next(&step(0..1), 2, 4).unwrap();
        first.next(&step(1..2), 2, 4).unwrap();
        first.finish();
        let mut second = Cursor::start();
        let same = second.next(&step(0..1), 2, 4).unwrap();
        let changed = second.next(&step(2..3), 2, 4).unwrap();
        second.finish();
        let mut third = Cursor::start();
        assert!(std::sync::Arc::ptr_eq(
            &same,
            &third.next(&step(0..1), 2, 4).unwrap()
        ));
        assert!(std::sync::Arc::ptr_eq(
            &changed,
            &third.next(&step(2..3), 2, 4).unwrap()
        ));
        assert!(third.renewed.is_none());
    }
}
