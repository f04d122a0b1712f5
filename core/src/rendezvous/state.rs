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
//!   into `slots`               runs the plan with    output from `outputs`
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

use super::agreement::{CachedPlan, Request};
use crate::error::NativeCollectiveError;
use crate::{NativeCollectiveDevice, TensorInfo};

/// Where the current generation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stage {
    /// Ranks deposit into `slots`; ends when the last rank arrives.
    Collecting,
    /// The last arriver holds the submissions and runs the plan with the lock released.
    Running,
    /// Outputs are published; ends when the last rank takes its own.
    Delivering,
}

/// What one rank brought to a generation.
pub(crate) struct Submission<P> {
    /// What this rank asked for.
    pub(crate) request: Request,
    /// Its prepared tensor and what the device says it is, or why `prepare` or `describe`
    /// failed.
    pub(crate) prepared: Result<(P, TensorInfo), NativeCollectiveError>,
}

/// What the last arriver takes out of the state to run a generation.
pub(super) struct Batch<P> {
    /// Every rank's submission, in rank order.
    pub(super) submissions: Vec<Submission<P>>,
    /// The last resolved plan, if one is kept.
    pub(super) cache: Option<CachedPlan>,
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
    /// The last built-in plan resolved, kept for the next generation. `Running`: `None` (the
    /// runner holds it) until `publish` puts it back.
    cache: Option<CachedPlan>,
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
            cache: None,
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
    /// generation joined, and — for the last arriver — every submission in rank order and the
    /// kept plan, with the stage now `Running`.
    pub(super) fn deposit(
        &mut self,
        rank: usize,
        submission: Submission<D::Prepared>,
    ) -> (u64, Option<Batch<D::Prepared>>) {
        debug_assert!(self.may_enter(rank) && self.aborted.is_none());
        self.slots[rank] = Some(submission);
        self.arrived += 1;
        if self.arrived < self.slots.len() {
            return (self.generation, None);
        }
        self.arrived = 0;
        self.stage = Stage::Running;
        let submissions = self.slots.iter_mut().filter_map(Option::take).collect();
        let batch = Batch {
            submissions,
            cache: self.cache.take(),
        };
        (self.generation, Some(batch))
    }

    /// Publish the running generation's outcome and put back the kept plan; the stage becomes
    /// `Delivering`. Requires `Running`, no abort, and (for `Ok`) exactly one output per rank,
    /// which the plan driver guarantees by turning any other count into `OutputCount`.
    pub(super) fn publish(&mut self, outcome: Outcome<D::Tensor>, cache: Option<CachedPlan>) {
        debug_assert!(self.stage == Stage::Running && self.aborted.is_none());
        self.cache = cache;
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
    /// schedule itself is what is slow).
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

#[cfg(test)]
mod tests {
    //! The state machine on its own, one transition at a time: what each stage reports to a rank
    //! that times out (`joining_generation`, `stragglers`), and what opens and closes a
    //! generation. Real threads cannot hold a rank inside `Delivering` on purpose, so these
    //! paths are pinned here.

    use super::super::agreement::Request;
    use super::{Stage, State, Submission};
    use crate::{
        Collective, DeviceId, ElementType, NativeCollectiveDevice, NativeCollectiveError, Plan,
        ReduceOperation, Step, TensorInfo,
    };

    /// A device whose values are plain numbers; its methods are never called here.
    #[derive(Clone)]
    struct Numbers;

    impl NativeCollectiveDevice for Numbers {
        type Tensor = u32;
        type Prepared = u32;
        type Work = ();
        type Error = std::fmt::Error;
        fn prepare(&self, tensor: u32, _: DeviceId) -> Result<u32, Self::Error> {
            Ok(tensor)
        }
        fn describe(&self, _: &u32) -> TensorInfo {
            TensorInfo {
                len: 1,
                element: ElementType::I32,
            }
        }
        fn begin(&self, _: &[DeviceId], _: Vec<u32>, _: &Plan) -> Result<(), Self::Error> {
            Ok(())
        }
        fn exchange(&self, _: &mut (), _: &Step) -> Result<(), Self::Error> {
            Ok(())
        }
        fn finish(&self, _: (), _: &Plan) -> Result<Vec<u32>, Self::Error> {
            Ok(Vec::new())
        }
    }

    fn submission(value: u32) -> Submission<u32> {
        let shape = Numbers.describe(&value);
        Submission {
            request: Request::built_in(
                Collective::AllReduce(ReduceOperation::Sum),
                Default::default(),
            ),
            prepared: Ok((value, shape)),
        }
    }

    /// Deposit every rank of a world of `world`; returns the submissions the last one took.
    fn fill(state: &mut State<Numbers>, world: usize) -> Vec<Submission<u32>> {
        for rank in 0..world - 1 {
            assert!(state.deposit(rank, submission(rank as u32)).1.is_none());
        }
        let (_, taken) = state.deposit(world - 1, submission(world as u32 - 1));
        taken.map(|batch| batch.submissions).unwrap_or_default()
    }

    #[test]
    fn collecting_names_the_ranks_that_have_not_deposited() {
        let mut state = State::<Numbers>::new(4);
        state.deposit(2, submission(2));
        state.deposit(0, submission(0));
        assert_eq!(state.stragglers(), vec![1, 3]);
        assert_eq!(state.joining_generation(), 0);
        assert!(!state.may_enter(2) && state.may_enter(1));
    }

    #[test]
    fn running_names_no_straggler_and_joiners_wait_for_the_next_generation() {
        let mut state = State::<Numbers>::new(3);
        let taken = fill(&mut state, 3);
        assert_eq!(taken.len(), 3);
        assert_eq!(state.stage, Stage::Running);
        assert!(state.stragglers().is_empty());
        assert_eq!(state.joining_generation(), 1);
        assert!(!state.may_enter(0));
    }

    #[test]
    fn delivering_names_the_ranks_that_have_not_left() {
        let mut state = State::<Numbers>::new(3);
        fill(&mut state, 3);
        state.publish(Ok(vec![10, 11, 12]), None);
        let (delivery, closed) = state.take(1, 0).unwrap_or((Ok(0), true));
        assert_eq!(delivery, Ok(11));
        assert!(!closed);
        assert_eq!(state.stragglers(), vec![0, 2]);
        assert_eq!(state.joining_generation(), 1);
        assert!(
            !state.may_enter(1),
            "rank 1 must wait until generation 0 closes"
        );
    }

    #[test]
    fn the_last_departure_closes_the_generation_and_opens_the_next() {
        let mut state = State::<Numbers>::new(2);
        fill(&mut state, 2);
        state.publish(Ok(vec![7, 8]), None);
        assert_eq!(state.take(0, 0).map(|(_, closed)| closed), Some(false));
        assert_eq!(state.take(0, 0), None, "a delivery is taken once");
        assert_eq!(state.take(1, 0).map(|(_, closed)| closed), Some(true));
        assert_eq!(state.stage, Stage::Collecting);
        assert_eq!(state.joining_generation(), 1);
        assert!(state.may_enter(0) && state.may_enter(1));
        assert_eq!(state.stragglers(), vec![0, 1]);
    }

    #[test]
    fn a_failed_generation_delivers_one_error_to_every_rank() {
        let mut state = State::<Numbers>::new(3);
        fill(&mut state, 3);
        let error = NativeCollectiveError::OutputCount {
            expected: 3,
            actual: 1,
        };
        state.publish(Err(error.clone()), None);
        for rank in 0..3 {
            assert_eq!(
                state.take(rank, 0).map(|(delivery, _)| delivery),
                Some(Err(error.clone()))
            );
        }
    }

    #[test]
    fn an_abort_while_collecting_hands_back_the_deposits_once() {
        let mut state = State::<Numbers>::new(3);
        state.deposit(0, submission(5));
        state.deposit(2, submission(6));
        let first = NativeCollectiveError::Aborted { reason: "a".into() };
        let (deposits, won) = state.abort(first.clone());
        assert!(won);
        let values: Vec<u32> = deposits
            .into_iter()
            .filter_map(|entry| entry.prepared.ok().map(|(value, _)| value))
            .collect();
        assert_eq!(values, vec![5, 6]);
        let (again, won) = state.abort(NativeCollectiveError::Aborted { reason: "b".into() });
        assert!(!won && again.is_empty());
        assert_eq!(state.aborted(), Some(&first));
    }

    #[test]
    fn an_abort_after_publication_keeps_the_deliveries() {
        let mut state = State::<Numbers>::new(2);
        fill(&mut state, 2);
        state.publish(Ok(vec![1, 2]), None);
        let (deposits, won) = state.abort(NativeCollectiveError::Aborted {
            reason: "late".into(),
        });
        assert!(won && deposits.is_empty());
        assert_eq!(state.take(0, 0).map(|(delivery, _)| delivery), Some(Ok(1)));
        assert_eq!(state.take(1, 0).map(|(delivery, _)| delivery), Some(Ok(2)));
    }
}
