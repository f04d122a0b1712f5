//! The rendezvous state and its transitions. Everything here runs under the communicator's
//! mutex and touches no device code: values of device types are only *moved* in and out, never
//! dropped, so nothing here can panic on a device's behalf. The protocol as a whole — who waits
//! for what, who wakes whom, and why two rounds suffice — is told once, in `README.md` beside
//! this file.

use super::agreement::{CachedPlan, Request};
use super::delivery::Deliveries;
use super::padded::Padded;
use super::parity;
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
    /// Outcomes are published into the delivery slots, which the ranks take from without the
    /// lock; ends when the first rank deposits into the generation two ahead, which reopens the
    /// round for it (every rank took its delivery before anyone can deposit there).
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
    pub(super) cache: Option<Box<CachedPlan>>,
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
            parked: false,
        }
    }
}

/// The guarded rendezvous state of one communicator.
///
/// Generation `g` lives in `rounds[g % 2]` (its deliveries in the slots of parity `g % 2`,
/// outside this state: [`Deliveries`]). A rank's `k`-th call joins generation `k`, so at most
/// two generations are in flight: a rank can only reach `g + 1` once `g` is published, and it
/// only reaches `g + 2` once every rank deposited into `g + 1` — that is, once every rank has
/// taken its delivery of `g`. So the first deposit into `g + 2` may reopen `g`'s round for it,
/// a deposit always finds its round open, and nobody ever waits to enter.
pub(super) struct State<D: NativeCollectiveDevice> {
    /// `rounds[g % 2]` holds generation `g`.
    rounds: [Round<D>; 2],
    /// `next[r]`: the generation rank `r` joins with its next call; advanced by `deposit`. A
    /// rank's calls are sequential because the communicator refuses a call for a rank whose
    /// previous one is still in progress (`Deliveries::busy`, checked under this lock). Each on
    /// lines of its own: only rank `r`'s deposit writes `next[r]`, and the runner, reading its
    /// own, would otherwise fetch the line another rank's deposit just wrote.
    next: Box<[Padded<u64>]>,
    /// The first abort's error. Set once, never cleared.
    aborted: Option<NativeCollectiveError>,
    /// The last built-in plan resolved, kept for the next generation. `None` while a runner
    /// holds it, until `publish` puts it back.
    cache: Option<Box<CachedPlan>>,
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
            next: (0..world).map(|_| Padded(0)).collect(),
            aborted: None,
            cache: None,
            sleepers: 0,
            stats: WaitStats::default(),
        }
    }

    fn round(&mut self, generation: u64) -> &mut Round<D> {
        &mut self.rounds[parity(generation)]
    }

    /// The first abort's error, if any.
    pub(super) fn aborted(&self) -> Option<&NativeCollectiveError> {
        self.aborted.as_ref()
    }

    /// Deposit `rank`'s submission into the generation of its next call; requires no abort and
    /// no call of `rank` in progress.
    /// Returns the generation joined, and — for the last arriver — every submission in rank
    /// order and the kept plan, with the round now `Running`.
    pub(super) fn deposit(
        &mut self,
        rank: usize,
        submission: Submission<D::Prepared>,
    ) -> (u64, Option<Batch<D::Prepared>>) {
        debug_assert!(self.aborted.is_none());
        let generation = self.next[rank].0;
        self.next[rank].0 += 1;
        let round = self.round(generation);
        if round.stage == Stage::Delivering && round.generation + 2 == generation {
            // The first deposit two generations on: every rank took its delivery of
            // `round.generation` (the invariant on `State`), so the round reopens.
            round.generation = generation;
            round.stage = Stage::Collecting;
        }
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

    /// Publish running generation `generation`'s outcome into `deliveries`, put back the kept
    /// plan, and hand the runner (`rank`) its own delivery at once, with whatever an earlier
    /// generation left in a slot (nothing: see `Deliveries::publish`) for the caller to drop
    /// after unlocking. Requires `Running` and no abort. The slots are written here, under the
    /// lock, so that an abort either comes before the publication (and the runner discards the
    /// outcome) or finds it whole.
    pub(super) fn publish(
        &mut self,
        generation: u64,
        outcome: Outcome<D::Tensor>,
        cache: Option<Box<CachedPlan>>,
        rank: usize,
        deliveries: &Deliveries<D::Tensor>,
    ) -> (Delivery<D::Tensor>, Vec<Delivery<D::Tensor>>) {
        debug_assert!(self.aborted.is_none());
        self.cache = cache;
        let round = self.round(generation);
        debug_assert!(round.generation == generation && round.stage == Stage::Running);
        round.stage = Stage::Delivering;
        let parked = std::mem::take(&mut round.parked);
        self.stats.generations += 1;
        self.stats.parked_generations += u64::from(parked);
        deliveries.publish(generation, outcome, rank)
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
        let round = &self.rounds[parity(generation)];
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
    use super::super::delivery::Deliveries;
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

    /// The state and the delivery slots of one communicator.
    fn rendezvous(world: usize) -> (State<Numbers>, Deliveries<u32>) {
        (State::new(world), Deliveries::new(world))
    }

    /// Deposit `rank`'s `value` as the communicator does: its call is in progress from here.
    fn deposit(
        state: &mut State<Numbers>,
        deliveries: &Deliveries<u32>,
        rank: usize,
        value: u32,
    ) -> (u64, Option<Vec<Submission<u32>>>) {
        assert!(!deliveries.busy(rank), "rank {rank} has a call in progress");
        deliveries.enter(rank);
        let (generation, batch) = state.deposit(rank, submission(value));
        (generation, batch.map(|batch| batch.submissions))
    }

    /// Deposit every rank; returns the generation and the submissions the last one took.
    fn fill(
        state: &mut State<Numbers>,
        deliveries: &Deliveries<u32>,
        world: usize,
    ) -> (u64, Vec<Submission<u32>>) {
        for rank in 0..world - 1 {
            assert!(deposit(state, deliveries, rank, rank as u32).1.is_none());
        }
        let (generation, taken) = deposit(state, deliveries, world - 1, world as u32 - 1);
        (generation, taken.unwrap_or_default())
    }

    #[test]
    fn collecting_names_the_ranks_that_have_not_deposited() {
        let (mut state, deliveries) = rendezvous(4);
        deposit(&mut state, &deliveries, 2, 2);
        deposit(&mut state, &deliveries, 0, 0);
        assert_eq!(state.stragglers(0), vec![1, 3]);
    }

    #[test]
    fn the_last_arrival_runs_and_names_no_straggler() {
        let (mut state, deliveries) = rendezvous(3);
        let (generation, taken) = fill(&mut state, &deliveries, 3);
        assert_eq!((generation, taken.len()), (0, 3));
        assert_eq!(state.rounds[0].stage, Stage::Running);
        assert!(state.stragglers(0).is_empty());
    }

    #[test]
    fn the_runner_takes_its_own_delivery_when_it_publishes() {
        let (mut state, deliveries) = rendezvous(3);
        fill(&mut state, &deliveries, 3);
        assert_eq!(
            deliveries.take(1, 0),
            None,
            "nothing before the publication"
        );
        let own = state
            .publish(0, Ok(vec![10, 11, 12]), None, 2, &deliveries)
            .0;
        assert_eq!(own, Ok(12));
        assert!(!deliveries.busy(2) && deliveries.busy(1));
        assert_eq!(deliveries.take(1, 0), Some(Ok(11)));
        assert!(!deliveries.busy(1));
        assert_eq!(deliveries.take(1, 0), None, "a delivery is taken once");
        assert_eq!(deliveries.take(0, 0), Some(Ok(10)));
    }

    #[test]
    fn a_rank_of_the_next_generation_deposits_while_this_one_still_delivers() {
        let (mut state, deliveries) = rendezvous(2);
        fill(&mut state, &deliveries, 2);
        // Rank 1 ran generation 0 and leaves with its output; rank 0 has not taken its own.
        assert_eq!(
            state.publish(0, Ok(vec![7, 8]), None, 1, &deliveries).0,
            Ok(8)
        );
        assert!(deliveries.busy(0) && !deliveries.busy(1));
        // Rank 1 goes ahead into generation 1, in the other round.
        assert_eq!(deposit(&mut state, &deliveries, 1, 5).0, 1);
        assert_eq!(state.stragglers(1), vec![0]);
        // Rank 0 still gets generation 0's output, never generation 1's.
        assert_eq!(deliveries.take(0, 1), None);
        assert_eq!(deliveries.take(0, 0), Some(Ok(7)));
        // Round 0 stays as generation 0 left it until someone deposits into generation 2.
        assert_eq!(
            (state.rounds[0].generation, state.rounds[0].stage),
            (0, Stage::Delivering)
        );
        let (generation, taken) = deposit(&mut state, &deliveries, 0, 6);
        assert_eq!((generation, taken.map(|taken| taken.len())), (1, Some(2)));
        assert_eq!(
            state.publish(1, Ok(vec![1, 2]), None, 0, &deliveries).0,
            Ok(1)
        );
        // The first deposit into generation 2 reopens round 0 for it.
        assert_eq!(deposit(&mut state, &deliveries, 0, 3).0, 2);
        assert_eq!(
            (state.rounds[0].generation, state.rounds[0].stage),
            (2, Stage::Collecting)
        );
        // Rank 1's slot of parity 0 still says generation 0: a rank of 2 finds nothing yet.
        assert_eq!(deliveries.take(1, 1), Some(Ok(2)));
        assert_eq!(deliveries.take(1, 2), None);
    }

    #[test]
    fn a_failed_generation_delivers_one_error_to_every_rank() {
        let (mut state, deliveries) = rendezvous(3);
        fill(&mut state, &deliveries, 3);
        let error = NativeCollectiveError::OutputCount {
            expected: 3,
            actual: 1,
        };
        let own = state.publish(0, Err(error.clone()), None, 0, &deliveries).0;
        assert_eq!(own, Err(error.clone()));
        for rank in 1..3 {
            assert_eq!(deliveries.take(rank, 0), Some(Err(error.clone())));
        }
    }

    #[test]
    fn an_abort_hands_back_the_deposits_of_both_rounds_once() {
        let (mut state, deliveries) = rendezvous(2);
        fill(&mut state, &deliveries, 2);
        assert_eq!(
            state.publish(0, Ok(vec![1, 2]), None, 1, &deliveries).0,
            Ok(2)
        );
        deposit(&mut state, &deliveries, 1, 5);
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
        assert_eq!(deliveries.take(0, 0), Some(Ok(1)));
    }
}
