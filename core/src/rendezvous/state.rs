//! The rendezvous state and its transitions. Everything here runs under the communicator's
//! mutex and touches no device code: values of device types are only *moved* in and out, never
//! dropped, so nothing here can panic on a device's behalf. The protocol as a whole — who waits
//! for what, who wakes whom, and why two rounds suffice — is told once, in `README.md` beside
//! this file.

use super::agreement::{CachedPlan, Request};
use crate::NativeCollectiveDevice;
use crate::TensorInfo;
use crate::error::NativeCollectiveError;

/// Where a round's generation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stage {
    /// Ranks deposit into `slots`; ends when the last rank arrives.
    Collecting,
    /// The last arriver holds the submissions and runs the plan with the lock released.
    Running,
    /// Outcomes are published; ends when the last rank takes its own, which reopens the round
    /// for the generation two ahead.
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

/// One of the two rounds: the generations of one parity, one at a time.
struct Round<D: NativeCollectiveDevice> {
    /// The generation this round holds; it advances by two when the round reopens.
    generation: u64,
    /// Where `generation` stands.
    stage: Stage,
    /// `Collecting`: `slots[r]` is `Some` exactly when rank `r` has deposited into `generation`.
    /// Otherwise all `None` (the runner took them, or an abort handed them back).
    slots: Vec<Option<Submission<D::Prepared>>>,
    /// `Collecting`: the number of `Some` in `slots`, always `< world`.
    arrived: usize,
    /// `Delivering`: `outputs[r]` is `Some` until rank `r` takes it. Otherwise all `None`.
    outputs: Vec<Option<Delivery<D::Tensor>>>,
    /// `Delivering`: the number of `Some` in `outputs`, always `> 0`.
    undelivered: usize,
    /// Whether a rank waiting for this round's generation parked (for [`WaitStats`]).
    parked: bool,
}

/// How the ranks of a communicator waited so far; read with
/// [`NativeCommunicator::wait_stats`](crate::NativeCommunicator::wait_stats).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaitStats {
    /// Generations published (successes and shared errors alike).
    pub generations: u64,
    /// Of those, the generations in which at least one rank parked on the condition variable
    /// instead of seeing the publication while it polled.
    pub parked_generations: u64,
    /// Times any rank parked (a rank may park more than once in one wait).
    pub parks: u64,
}

impl<D: NativeCollectiveDevice> Round<D> {
    fn new(world: usize, generation: u64) -> Self {
        Self {
            generation,
            stage: Stage::Collecting,
            slots: (0..world).map(|_| None).collect(),
            arrived: 0,
            outputs: (0..world).map(|_| None).collect(),
            undelivered: 0,
            parked: false,
        }
    }
}

/// The guarded rendezvous state of one communicator.
///
/// Generation `g` lives in `rounds[g % 2]`. A rank's `k`-th call joins generation `k`, so at most
/// two generations are in flight: a rank can only reach `g + 1` once `g` is published, and it
/// only reaches `g + 2` once every rank deposited into `g + 1` — that is, once every rank has
/// taken its delivery of `g`, which reopened `g`'s round for `g + 2`. A deposit therefore always
/// finds its round open, and nobody ever waits to enter.
pub(super) struct State<D: NativeCollectiveDevice> {
    /// `rounds[g % 2]` holds generation `g`.
    rounds: [Round<D>; 2],
    /// `next[r]`: the generation rank `r` joins with its next call; advanced by `deposit`.
    next: Vec<u64>,
    /// `busy[r]`: rank `r` has deposited and not yet taken its delivery. A rank's calls are
    /// sequential only while this refuses a second, concurrent one — which the two-round
    /// invariant on `State` rests on.
    busy: Vec<bool>,
    /// The first abort's error. Set once, never cleared.
    aborted: Option<NativeCollectiveError>,
    /// The last built-in plan resolved, kept for the next generation. `None` while a runner
    /// holds it, until `publish` puts it back.
    cache: Option<CachedPlan>,
    /// Ranks blocked in the condition variable right now; a transition notifies only if `> 0`.
    pub(super) sleepers: usize,
    /// How ranks waited so far.
    stats: WaitStats,
}

impl<D: NativeCollectiveDevice> State<D> {
    /// Open, empty generations 0 and 1.
    pub(super) fn new(world: usize) -> Self {
        Self {
            rounds: [Round::new(world, 0), Round::new(world, 1)],
            next: vec![0; world],
            busy: vec![false; world],
            aborted: None,
            cache: None,
            sleepers: 0,
            stats: WaitStats::default(),
        }
    }

    fn round(&mut self, generation: u64) -> &mut Round<D> {
        &mut self.rounds[(generation % 2) as usize]
    }

    /// The first abort's error, if any.
    pub(super) fn aborted(&self) -> Option<&NativeCollectiveError> {
        self.aborted.as_ref()
    }

    /// Whether `rank` has a call in progress (deposited, delivery not yet taken).
    pub(super) fn busy(&self, rank: usize) -> bool {
        self.busy[rank]
    }

    /// Deposit `rank`'s submission into the generation of its next call; requires no abort and
    /// `!busy(rank)`.
    /// Returns the generation joined, and — for the last arriver — every submission in rank
    /// order and the kept plan, with the round now `Running`.
    pub(super) fn deposit(
        &mut self,
        rank: usize,
        submission: Submission<D::Prepared>,
    ) -> (u64, Option<Batch<D::Prepared>>) {
        debug_assert!(self.aborted.is_none() && !self.busy[rank]);
        let generation = self.next[rank];
        self.next[rank] += 1;
        self.busy[rank] = true;
        let round = self.round(generation);
        // The round is open for this generation: see the invariant on `State`.
        debug_assert!(round.generation == generation && round.stage == Stage::Collecting);
        debug_assert!(round.slots[rank].is_none());
        round.slots[rank] = Some(submission);
        round.arrived += 1;
        if round.arrived < round.slots.len() {
            return (generation, None);
        }
        round.arrived = 0;
        round.stage = Stage::Running;
        let submissions = round.slots.iter_mut().filter_map(Option::take).collect();
        let batch = Batch {
            submissions,
            cache: self.cache.take(),
        };
        (generation, Some(batch))
    }

    /// Publish running generation `generation`'s outcome, put back the kept plan, and hand the
    /// runner (`rank`) its own delivery at once. Requires `Running`, no abort, and (for `Ok`)
    /// exactly one output per rank, which the plan driver guarantees by turning any other count
    /// into `OutputCount`.
    pub(super) fn publish(
        &mut self,
        generation: u64,
        outcome: Outcome<D::Tensor>,
        cache: Option<CachedPlan>,
        rank: usize,
    ) -> Delivery<D::Tensor> {
        debug_assert!(self.aborted.is_none());
        self.cache = cache;
        let round = self.round(generation);
        debug_assert!(round.generation == generation && round.stage == Stage::Running);
        match outcome {
            Ok(outputs) => {
                debug_assert_eq!(outputs.len(), round.outputs.len());
                for (slot, output) in round.outputs.iter_mut().zip(outputs) {
                    *slot = Some(Ok(output));
                }
            }
            Err(error) => round.outputs.fill_with(|| Some(Err(error.clone()))),
        }
        round.undelivered = round.outputs.len();
        round.stage = Stage::Delivering;
        let parked = std::mem::take(&mut round.parked);
        self.stats.generations += 1;
        self.stats.parked_generations += u64::from(parked);
        // The runner's own delivery is there: it was just published.
        self.take(rank, generation).unwrap_or_else(|| {
            Err(NativeCollectiveError::OutputCount {
                expected: 1,
                actual: 0,
            })
        })
    }

    /// Take `rank`'s delivery of `generation`, if published. The last rank to take reopens the
    /// round for `generation + 2`.
    pub(super) fn take(&mut self, rank: usize, generation: u64) -> Option<Delivery<D::Tensor>> {
        let round = self.round(generation);
        if round.stage != Stage::Delivering || round.generation != generation {
            return None;
        }
        let delivery = round.outputs[rank].take()?;
        round.undelivered -= 1;
        if round.undelivered == 0 {
            round.generation += 2;
            round.stage = Stage::Collecting;
        }
        self.busy[rank] = false;
        Some(delivery)
    }

    /// Record the first abort (later ones are ignored). Returns the deposits of both rounds that
    /// are still collecting, which the caller drops outside the lock, and whether this abort was
    /// the first.
    pub(super) fn abort(
        &mut self,
        error: NativeCollectiveError,
    ) -> (Vec<Submission<D::Prepared>>, bool) {
        if self.aborted.is_some() {
            return (Vec::new(), false);
        }
        self.aborted = Some(error);
        let mut deposits = Vec::new();
        for round in &mut self.rounds {
            if round.stage == Stage::Collecting {
                round.arrived = 0;
                deposits.extend(round.slots.iter_mut().filter_map(Option::take));
            }
        }
        (deposits, true)
    }

    /// A rank waiting for `generation` is about to park.
    pub(super) fn note_park(&mut self, generation: u64) {
        self.stats.parks += 1;
        let round = self.round(generation);
        if round.generation == generation {
            round.parked = true;
        }
    }

    /// How ranks waited so far.
    pub(super) fn stats(&self) -> WaitStats {
        self.stats
    }

    /// The ranks holding up a rank waiting on `generation`: while it collects, those that have
    /// not deposited; while it runs, none (the schedule itself is what is slow).
    pub(super) fn stragglers(&self, generation: u64) -> Vec<usize> {
        let round = &self.rounds[(generation % 2) as usize];
        if round.generation != generation || round.stage != Stage::Collecting {
            return Vec::new();
        }
        round
            .slots
            .iter()
            .enumerate()
            .filter_map(|(rank, slot)| slot.is_none().then_some(rank))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    //! The state machine on its own, one transition at a time — including orders real threads
    //! cannot force on purpose (a rank of `g + 1` depositing while a rank of `g` has not yet
    //! taken its output).

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

    /// Deposit every rank; returns the generation and the submissions the last one took.
    fn fill(state: &mut State<Numbers>, world: usize) -> (u64, Vec<Submission<u32>>) {
        for rank in 0..world - 1 {
            assert!(state.deposit(rank, submission(rank as u32)).1.is_none());
        }
        let (generation, taken) = state.deposit(world - 1, submission(world as u32 - 1));
        let submissions = taken.map(|batch| batch.submissions).unwrap_or_default();
        (generation, submissions)
    }

    #[test]
    fn collecting_names_the_ranks_that_have_not_deposited() {
        let mut state = State::<Numbers>::new(4);
        state.deposit(2, submission(2));
        state.deposit(0, submission(0));
        assert_eq!(state.stragglers(0), vec![1, 3]);
    }

    #[test]
    fn the_last_arrival_runs_and_names_no_straggler() {
        let mut state = State::<Numbers>::new(3);
        let (generation, taken) = fill(&mut state, 3);
        assert_eq!((generation, taken.len()), (0, 3));
        assert_eq!(state.rounds[0].stage, Stage::Running);
        assert!(state.stragglers(0).is_empty());
    }

    #[test]
    fn the_runner_takes_its_own_delivery_when_it_publishes() {
        let mut state = State::<Numbers>::new(3);
        fill(&mut state, 3);
        assert_eq!(state.publish(0, Ok(vec![10, 11, 12]), None, 2), Ok(12));
        assert_eq!(state.take(1, 0), Some(Ok(11)));
        assert_eq!(state.take(1, 0), None, "a delivery is taken once");
        assert_eq!(state.take(0, 0), Some(Ok(10)));
    }

    #[test]
    fn a_rank_of_the_next_generation_deposits_while_this_one_still_delivers() {
        let mut state = State::<Numbers>::new(2);
        fill(&mut state, 2);
        assert!(state.busy(0) && state.busy(1));
        // Rank 1 ran generation 0 and leaves with its output; rank 0 has not taken its own.
        assert_eq!(state.publish(0, Ok(vec![7, 8]), None, 1), Ok(8));
        assert!(state.busy(0) && !state.busy(1));
        // Rank 1 goes ahead into generation 1, in the other round.
        assert_eq!(state.deposit(1, submission(5)).0, 1);
        assert_eq!(state.stragglers(1), vec![0]);
        // Rank 0 still gets generation 0's output, never generation 1's.
        assert_eq!(state.take(0, 1), None);
        assert_eq!(state.take(0, 0), Some(Ok(7)));
        // The last take reopened round 0 for generation 2.
        assert_eq!(
            (state.rounds[0].generation, state.rounds[0].stage),
            (2, Stage::Collecting)
        );
        let (generation, taken) = state.deposit(0, submission(6));
        assert_eq!(
            (generation, taken.map(|batch| batch.submissions.len())),
            (1, Some(2))
        );
    }

    #[test]
    fn a_failed_generation_delivers_one_error_to_every_rank() {
        let mut state = State::<Numbers>::new(3);
        fill(&mut state, 3);
        let error = NativeCollectiveError::OutputCount {
            expected: 3,
            actual: 1,
        };
        assert_eq!(
            state.publish(0, Err(error.clone()), None, 0),
            Err(error.clone())
        );
        for rank in 1..3 {
            assert_eq!(state.take(rank, 0), Some(Err(error.clone())));
        }
    }

    #[test]
    fn an_abort_hands_back_the_deposits_of_both_rounds_once() {
        let mut state = State::<Numbers>::new(2);
        fill(&mut state, 2);
        assert_eq!(state.publish(0, Ok(vec![1, 2]), None, 1), Ok(2));
        state.deposit(1, submission(5));
        let first = NativeCollectiveError::Aborted { reason: "a".into() };
        let (deposits, won) = state.abort(first.clone());
        assert!(won);
        let values: Vec<u32> = deposits
            .into_iter()
            .filter_map(|entry| entry.prepared.ok().map(|(value, _)| value))
            .collect();
        assert_eq!(values, vec![5]);
        let (again, won) = state.abort(NativeCollectiveError::Aborted { reason: "b".into() });
        assert!(!won && again.is_empty());
        assert_eq!(state.aborted(), Some(&first));
        // Generation 0 was published before the abort: still delivered.
        assert_eq!(state.take(0, 0), Some(Ok(1)));
    }
}
