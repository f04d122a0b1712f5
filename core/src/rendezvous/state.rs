//! The rendezvous state and its transitions. Everything here runs under the communicator's
//! mutex and touches no device code: values of device types are only *moved* in and out, never
//! dropped, so nothing here can panic on a device's behalf.
//!
//! ## One generation
//!
//! ```text
//!            deposit (W-th)             publish                 take (last)
//! Collecting(g) ───────────▶ Running(g) ───────▶ Delivering(g) ───────────▶ Collecting(g+1)
//!   ranks deposit              the last arriver      ranks take their
//!   into `slots`               runs the ring with    output from `outputs`
//!                              the lock released
//! ```
//!
//! A generation *opens* when the stage becomes `Collecting(g)` and *closes* when the last of its
//! ranks takes its output. A rank may deposit into `g + 1` only once `g` has closed, so a fast
//! re-entrant rank can never disturb a generation others are still leaving.
//!
//! ## Abort
//!
//! `aborted` is set once and never cleared. Once set, no generation is published again: deposits
//! of the collecting generation are handed back for dropping, waiters of the running generation
//! leave with the abort error, and the runner discards its outputs. A generation already in
//! `Delivering` is still delivered whole.

use crate::error::NativeCollectiveError;
use crate::{NativeCollectiveDevice, ReduceOperation};

/// Where the current generation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stage {
    /// Ranks deposit into `slots`; ends when the last rank arrives.
    Collecting,
    /// The last arriver holds the submissions and runs the ring with the lock released.
    Running,
    /// Outputs are published; ends when the last rank takes its own.
    Delivering,
}

/// What one rank brought to a generation.
pub(super) struct Submission<P> {
    /// The operation this rank asked for.
    pub(super) operation: ReduceOperation,
    /// Its prepared tensor, or why `prepare` failed.
    pub(super) prepared: Result<P, NativeCollectiveError>,
}

/// One rank's result, as delivered.
pub(super) type Delivery<T> = Result<T, NativeCollectiveError>;

/// A generation's result: one output per rank, in rank order, or the error every rank receives.
pub(super) type Outcome<T> = Result<Vec<T>, NativeCollectiveError>;

/// The guarded rendezvous state of one communicator.
pub(super) struct State<D: NativeCollectiveDevice> {
    /// The generation being collected, run or delivered. Incremented only when a generation
    /// closes (`Delivering` → `Collecting`).
    generation: u64,
    /// Where `generation` stands. Changes only through `deposit` (Collecting → Running), `publish`
    /// (Running → Delivering) and `take` (Delivering → Collecting).
    stage: Stage,
    /// `Collecting`: `slots[r]` is `Some` exactly when rank `r` has deposited into `generation`.
    /// `Running` and `Delivering`: all `None` (the runner took them). After an abort: all `None`.
    slots: Vec<Option<Submission<D::Prepared>>>,
    /// `Collecting`: the number of `Some` in `slots`, always `< world`.
    arrived: usize,
    /// `Delivering`: `outputs[r]` is `Some` until rank `r` takes it. Otherwise all `None`.
    outputs: Vec<Option<Delivery<D::Tensor>>>,
    /// `Delivering`: the number of `Some` in `outputs`, always `> 0`.
    undelivered: usize,
    /// The first abort's error. Set once, never cleared.
    aborted: Option<NativeCollectiveError>,
    /// Ranks blocked in the condition variable right now; a transition notifies only if `> 0`.
    pub(super) sleepers: usize,
}

impl<D: NativeCollectiveDevice> State<D> {
    /// An open, empty generation 0.
    pub(super) fn new(world: usize) -> Self {
        Self {
            generation: 0,
            stage: Stage::Collecting,
            slots: (0..world).map(|_| None).collect(),
            arrived: 0,
            outputs: (0..world).map(|_| None).collect(),
            undelivered: 0,
            aborted: None,
            sleepers: 0,
        }
    }

    /// The first abort's error, if any.
    pub(super) fn aborted(&self) -> Option<&NativeCollectiveError> {
        self.aborted.as_ref()
    }

    /// Whether `rank` may deposit now: its slot in an open generation is free.
    pub(super) fn may_enter(&self, rank: usize) -> bool {
        self.stage == Stage::Collecting && self.slots[rank].is_none()
    }

    /// The generation `rank` would join, or is waiting to join.
    pub(super) fn joining_generation(&self) -> u64 {
        match self.stage {
            Stage::Collecting => self.generation,
            Stage::Running | Stage::Delivering => self.generation + 1,
        }
    }

    /// Deposit `rank`'s submission; requires `may_enter(rank)` and no abort. Returns the
    /// generation joined, and — for the last arriver — every submission in rank order, with the
    /// stage now `Running`.
    pub(super) fn deposit(
        &mut self,
        rank: usize,
        submission: Submission<D::Prepared>,
    ) -> (u64, Option<Vec<Submission<D::Prepared>>>) {
        debug_assert!(self.may_enter(rank) && self.aborted.is_none());
        self.slots[rank] = Some(submission);
        self.arrived += 1;
        if self.arrived < self.slots.len() {
            return (self.generation, None);
        }
        self.arrived = 0;
        self.stage = Stage::Running;
        let submissions = self.slots.iter_mut().filter_map(Option::take).collect();
        (self.generation, Some(submissions))
    }

    /// Publish the running generation's outcome; the stage becomes `Delivering`. Requires
    /// `Running`, no abort, and (for `Ok`) exactly one output per rank, which the ring driver
    /// guarantees by turning any other count into `OutputCount`.
    pub(super) fn publish(&mut self, outcome: Outcome<D::Tensor>) {
        debug_assert!(self.stage == Stage::Running && self.aborted.is_none());
        match outcome {
            Ok(outputs) => {
                debug_assert_eq!(outputs.len(), self.outputs.len());
                for (slot, output) in self.outputs.iter_mut().zip(outputs) {
                    *slot = Some(Ok(output));
                }
            }
            Err(error) => self.outputs.fill_with(|| Some(Err(error.clone()))),
        }
        self.undelivered = self.outputs.len();
        self.stage = Stage::Delivering;
    }

    /// Take `rank`'s delivery of `generation`, if published. The second value is `true` when this
    /// closed the generation (the last rank left), opening `generation + 1`.
    pub(super) fn take(
        &mut self,
        rank: usize,
        generation: u64,
    ) -> Option<(Delivery<D::Tensor>, bool)> {
        if self.stage != Stage::Delivering || self.generation != generation {
            return None;
        }
        let delivery = self.outputs[rank].take()?;
        self.undelivered -= 1;
        let closed = self.undelivered == 0;
        if closed {
            self.generation += 1;
            self.stage = Stage::Collecting;
        }
        Some((delivery, closed))
    }

    /// Record the first abort (later ones are ignored). Returns the deposits of the collecting
    /// generation, which the caller drops outside the lock, and whether this abort was the first.
    pub(super) fn abort(
        &mut self,
        error: NativeCollectiveError,
    ) -> (Vec<Submission<D::Prepared>>, bool) {
        if self.aborted.is_some() {
            return (Vec::new(), false);
        }
        self.aborted = Some(error);
        let deposits = if self.stage == Stage::Collecting {
            self.arrived = 0;
            self.slots.iter_mut().filter_map(Option::take).collect()
        } else {
            Vec::new()
        };
        (deposits, true)
    }

    /// The ranks holding up a rank that waits now: during `Collecting`, those that have not
    /// deposited; during `Delivering`, those that have not yet left; during `Running`, none (the
    /// ring itself is what is slow).
    pub(super) fn stragglers(&self) -> Vec<usize> {
        let pending = |(rank, present): (usize, bool)| present.then_some(rank);
        match self.stage {
            Stage::Collecting => self
                .slots
                .iter()
                .map(Option::is_none)
                .enumerate()
                .filter_map(pending)
                .collect(),
            Stage::Running => Vec::new(),
            Stage::Delivering => self
                .outputs
                .iter()
                .map(Option::is_some)
                .enumerate()
                .filter_map(pending)
                .collect(),
        }
    }
}
