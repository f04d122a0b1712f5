//! What the ranks of a scenario ask for: a [`Script`] of [`Call`]s, one per rank per generation,
//! mixing collectives, algorithms, lengths, element types and timeouts in one communicator — and
//! what each generation must then deliver, from the values' reference and the sim crate's one
//! outcome predictor ([`FaultPlan::predict`]).
//!
//! A script is plain data, built before a model runs (or drawn inside it from the checker's
//! random source, so a replayed schedule replays the script too).

use crate::values;
use ruccl_core::{
    Algorithm, Collective, ElementType, LinkModel, Plan, ReduceOperation, TensorInfo,
};
use ruccl_sim::FaultPlan;
use ruccl_sim::fault::{GenerationCalls, Outcome};
use std::time::Duration;

/// What one rank asks for in one generation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Call {
    /// The collective.
    pub collective: Collective,
    /// The algorithm asked for.
    pub algorithm: Algorithm,
    /// Elements of the input.
    pub length: usize,
    /// Their type: `I64`, or `I32` to make a shape mismatch (outputs are only read as `I64`).
    pub element: ElementType,
    /// How long the rank waits before it aborts the communicator with `TimedOut`, if at all.
    /// Under a checker the duration is not modelled: the deadline passes whenever the checker
    /// runs its timer thread.
    pub timeout: Option<Duration>,
}

impl Call {
    /// `collective` over `length` `i64` elements, algorithm `Auto`, no timeout.
    pub fn new(collective: Collective, length: usize) -> Self {
        Self {
            collective,
            algorithm: Algorithm::Auto,
            length,
            element: ElementType::I64,
            timeout: None,
        }
    }

    /// The same call with `algorithm`.
    pub fn via(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// The same call with a timeout.
    pub fn timing_out(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// What the core compares across ranks: the collective and the algorithm.
    pub fn request(&self) -> (Collective, Algorithm) {
        (self.collective, self.algorithm)
    }

    /// What the device describes the input as.
    pub fn info(&self) -> TensorInfo {
        TensorInfo {
            len: self.length,
            element: self.element,
        }
    }
}

/// A way the ranks of one generation disagree, or agree on something impossible. Each is a
/// shared error of the generation, which every rank must receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Slip {
    /// One rank asks for another reduce operation (`ReductionMismatch`); for a collective
    /// without one, another kind.
    Operation,
    /// One rank asks for another kind of collective (`CollectiveMismatch`).
    Kind,
    /// One rank names another broadcast root (`CollectiveMismatch`); for another collective,
    /// another kind.
    Root,
    /// One rank asks for another algorithm (`CollectiveMismatch`).
    Algorithm,
    /// One rank's input has another length (`ShapeMismatch`).
    Length,
    /// One rank's input has another element type (`ShapeMismatch`).
    Element,
    /// Every rank names a broadcast root outside the world (`InvalidCollective`).
    InvalidRoot,
    /// Every rank's reduce-scatter input is not divisible by the world (`InvalidCollective`;
    /// needs W > 1).
    Indivisible,
}

impl Slip {
    /// Every slip.
    pub const ALL: [Slip; 8] = [
        Slip::Operation,
        Slip::Kind,
        Slip::Root,
        Slip::Algorithm,
        Slip::Length,
        Slip::Element,
        Slip::InvalidRoot,
        Slip::Indivisible,
    ];
}

/// Every rank's calls: `calls[g][r]` is rank `r`'s call in generation `g` (a rank's `k`-th call
/// joins generation `k`), and `pauses[r]` how many times rank `r` yields after each return
/// before it calls again.
#[derive(Clone, Debug, PartialEq)]
pub struct Script {
    /// Ranks.
    pub world: usize,
    /// Per generation, per rank.
    pub calls: Vec<Vec<Call>>,
    /// Per rank.
    pub pauses: Vec<usize>,
}

impl Script {
    /// `generations` generations of `world` ranks, every rank calling `call(g)` in generation
    /// `g`, none pausing.
    pub fn uniform(world: usize, generations: usize, call: impl Fn(u64) -> Call) -> Self {
        Self {
            world,
            calls: (0..generations)
                .map(|generation| vec![call(generation as u64); world])
                .collect(),
            pauses: vec![0; world],
        }
    }

    /// All-reduce in every generation, the operation cycling ([`values::operation`]), over
    /// `length` elements, algorithm `Auto`.
    pub fn all_reduce(world: usize, generations: usize, length: usize) -> Self {
        Self::uniform(world, generations, |generation| {
            Call::new(Collective::AllReduce(values::operation(generation)), length)
        })
    }

    /// The generations every rank calls.
    pub fn generations(&self) -> usize {
        self.calls.len()
    }

    /// Rank `rank`'s call in `generation`.
    pub fn call(&self, generation: usize, rank: usize) -> Call {
        self.calls[generation][rank]
    }

    /// Change rank `rank`'s call in `generation`.
    pub fn edit(mut self, generation: usize, rank: usize, edit: impl FnOnce(&mut Call)) -> Self {
        if let Some(call) = self
            .calls
            .get_mut(generation)
            .and_then(|row| row.get_mut(rank))
        {
            edit(call);
        }
        self
    }

    /// Change every rank's call in `generation`.
    pub fn edit_all(mut self, generation: usize, edit: impl Fn(&mut Call)) -> Self {
        if let Some(row) = self.calls.get_mut(generation) {
            row.iter_mut().for_each(edit);
        }
        self
    }

    /// Give rank `rank` a timeout in every generation.
    pub fn timing_out(mut self, rank: usize, timeout: Duration) -> Self {
        for row in &mut self.calls {
            if let Some(call) = row.get_mut(rank) {
                call.timeout = Some(timeout);
            }
        }
        self
    }

    /// Make generation `generation` fail with `slip`, on rank `rank` where it is one rank's.
    pub fn slip(self, generation: usize, rank: usize, slip: Slip) -> Self {
        let world = self.world;
        let Some(&first) = self.calls.get(generation).and_then(|row| row.first()) else {
            return self;
        };
        let other_kind = |collective: Collective| match collective {
            Collective::AllGather => Collective::Broadcast { root: 0 },
            _ => Collective::AllGather,
        };
        match slip {
            Slip::Operation => self.edit(generation, rank, |call| {
                call.collective = match call.collective.operation() {
                    Some(operation) => call.collective.with_operation(next(operation)),
                    None => other_kind(call.collective),
                }
            }),
            Slip::Kind => self.edit(generation, rank, |call| {
                call.collective = other_kind(call.collective);
            }),
            Slip::Root => self.edit(generation, rank, |call| {
                call.collective = match call.collective.root() {
                    Some(root) => call.collective.with_root((root + 1) % world.max(2)),
                    None => other_kind(call.collective),
                }
            }),
            Slip::Algorithm => self.edit(generation, rank, |call| {
                call.algorithm = if call.algorithm == Algorithm::Ring {
                    Algorithm::Direct
                } else {
                    Algorithm::Ring
                };
            }),
            Slip::Length => self.edit(generation, rank, |call| call.length += 1),
            Slip::Element => self.edit(generation, rank, |call| call.element = ElementType::I32),
            Slip::InvalidRoot => self.edit_all(generation, |call| {
                call.collective = Collective::Broadcast { root: world };
            }),
            Slip::Indivisible => self.edit_all(generation, |call| {
                call.collective = Collective::ReduceScatter(ReduceOperation::Sum);
                call.length = first.length / world.max(1) * world.max(1) + 1;
            }),
        }
    }

    /// What each rank asks for in `generation`.
    pub fn requests(&self, generation: usize) -> Vec<(Collective, Algorithm)> {
        self.calls[generation].iter().map(Call::request).collect()
    }

    /// Each rank's input in `generation`.
    pub fn inputs(&self, generation: usize) -> Vec<TensorInfo> {
        self.calls[generation].iter().map(Call::info).collect()
    }

    /// Each rank's output in `generation` if it is delivered: the collective of rank 0's call
    /// over rank 0's length (a generation where the ranks disagree is never delivered).
    pub fn expected(&self, generation: usize) -> Vec<Vec<i64>> {
        let first = self.calls[generation][0];
        values::outputs(
            first.collective,
            self.world,
            generation as u64,
            first.length,
        )
    }

    /// Every generation's [`expected`](Self::expected) outputs.
    pub fn all_expected(&self) -> Vec<Vec<Vec<i64>>> {
        (0..self.generations())
            .map(|generation| self.expected(generation))
            .collect()
    }

    /// What every rank of `generation` receives on a device injecting `plan` (with `model`),
    /// when nothing aborts: the sim crate's predictor.
    pub fn outcome(&self, generation: usize, plan: &FaultPlan, model: LinkModel) -> Outcome {
        let requests = self.requests(generation);
        let inputs = self.inputs(generation);
        plan.predict(&GenerationCalls::new(
            generation as u64,
            &requests,
            &inputs,
            model,
        ))
    }

    /// The plan `generation` runs if its ranks agree (rank 0's request and input), for sizing
    /// fault plans; `None` where it cannot run.
    pub fn plan(&self, generation: usize, model: LinkModel) -> Option<Plan> {
        let first = self.calls[generation][0];
        Plan::with_model(
            first.collective,
            first.algorithm,
            self.world,
            first.info(),
            &model,
        )
        .ok()
    }

    /// The most steps any generation's plan has (on the default link model), for drawing fault
    /// plans: an `exchange` fault beyond a generation's steps never fires, as the predictor knows.
    pub fn max_steps(&self) -> usize {
        (0..self.generations())
            .filter_map(|generation| self.plan(generation, LinkModel::default()))
            .map(|plan| plan.steps().len())
            .max()
            .unwrap_or(0)
    }

    /// Whether rank `rank` waits with a timeout in `generation`.
    pub fn times_out(&self, generation: usize, rank: usize) -> bool {
        self.calls
            .get(generation)
            .and_then(|row| row.get(rank))
            .is_some_and(|call| call.timeout.is_some())
    }
}

fn next(operation: ReduceOperation) -> ReduceOperation {
    let all = ReduceOperation::ALL;
    let index = all.iter().position(|&o| o == operation).unwrap_or(0);
    all[(index + 1) % all.len()]
}

/// A source of choices: `draw(n)` is a number in `0..n` (`n > 0`). The shuttle models pass
/// shuttle's seeded random source, so a replayed schedule draws the same script; the real-thread
/// runs a seeded generator.
pub type Draw<'a> = &'a mut dyn FnMut(usize) -> usize;

/// A random valid call for `world` ranks in `generation`: any of the eight collectives (a root
/// in the world, a reduce-scatter, scatter or all-to-all length divisible by it), any algorithm
/// that can run it on the world (halving-doubling only on a power of two, all-to-all direct or
/// auto), up to `2W + 1` elements (so `n < W` and `n = 0` come up).
pub fn random_call(draw: Draw<'_>, world: usize) -> Call {
    let operation = ReduceOperation::ALL[draw(ReduceOperation::ALL.len())];
    let collective = match draw(8) {
        0 => Collective::AllReduce(operation),
        1 => Collective::ReduceScatter(operation),
        2 => Collective::AllGather,
        3 => Collective::Broadcast { root: draw(world) },
        4 => Collective::Reduce {
            op: operation,
            root: draw(world),
        },
        5 => Collective::Gather { root: draw(world) },
        6 => Collective::Scatter { root: draw(world) },
        _ => Collective::AllToAll,
    };
    let mut algorithms = vec![Algorithm::Auto, Algorithm::Direct];
    if collective != Collective::AllToAll {
        algorithms.push(Algorithm::Ring);
        if world.is_power_of_two() {
            algorithms.push(Algorithm::HalvingDoubling);
        }
    }
    let algorithm = algorithms[draw(algorithms.len())];
    let length = match collective {
        Collective::ReduceScatter(_) | Collective::Scatter { .. } | Collective::AllToAll => {
            world * draw(3)
        }
        _ => draw(2 * world + 2),
    };
    // A size the algorithm refuses for its traffic (ruccl_core::TRAFFIC_BOUND) asks for Auto.
    let algorithm = match Plan::new(collective, algorithm, world, length) {
        Err(_) if algorithm != Algorithm::Auto => Algorithm::Auto,
        _ => algorithm,
    };
    Call::new(collective, length).via(algorithm)
}

/// A random script: `world` ranks, `generations` generations, each generation a
/// [`random_call`] for every rank; each generation, with probability `slips_in` in 1 (never with
/// 0), made to fail by a random [`Slip`] on a random rank.
pub fn random_script(draw: Draw<'_>, world: usize, generations: usize, slips_in: usize) -> Script {
    let calls: Vec<Call> = (0..generations).map(|_| random_call(draw, world)).collect();
    let mut script = Script::uniform(world, generations, |generation| calls[generation as usize]);
    for generation in 0..generations {
        if slips_in > 0 && draw(slips_in) == 0 {
            let slip = Slip::ALL[draw(Slip::ALL.len())];
            let rank = draw(world);
            script = script.slip(generation, rank, slip);
        }
    }
    script
}

/// `script` with, in each generation and with probability 1 in `one_in`, one random rank
/// waiting with `timeout`.
pub fn random_timeouts(
    draw: Draw<'_>,
    mut script: Script,
    one_in: usize,
    timeout: Duration,
) -> Script {
    for generation in 0..script.generations() {
        if draw(one_in.max(1)) == 0 {
            let rank = draw(script.world);
            script = script.edit(generation, rank, |call| call.timeout = Some(timeout));
        }
    }
    script
}

#[cfg(test)]
mod tests {
    use super::*;
    use ruccl_core::NativeCollectiveError;

    fn error_of(script: &Script, generation: usize) -> Option<NativeCollectiveError> {
        script
            .outcome(generation, &FaultPlan::none(), LinkModel::default())
            .error()
            .cloned()
    }

    #[test]
    fn every_slip_makes_its_generation_fail_and_leaves_the_next_one_alone() {
        for world in 2..=5 {
            for slip in Slip::ALL {
                let script = Script::all_reduce(world, 2, 2 * world).slip(0, world - 1, slip);
                assert!(error_of(&script, 0).is_some(), "{slip:?} W={world}");
                assert!(error_of(&script, 1).is_none(), "{slip:?} W={world}");
            }
        }
    }

    #[test]
    fn slips_yield_the_error_kind_they_are_named_after() {
        let script = Script::all_reduce(3, 1, 6);
        let of = |slip| error_of(&script.clone().slip(0, 1, slip), 0);
        assert!(matches!(
            of(Slip::Operation),
            Some(NativeCollectiveError::ReductionMismatch { .. })
        ));
        assert!(matches!(
            of(Slip::Algorithm),
            Some(NativeCollectiveError::CollectiveMismatch { .. })
        ));
        assert!(matches!(
            of(Slip::Element),
            Some(NativeCollectiveError::ShapeMismatch { .. })
        ));
        assert!(matches!(
            of(Slip::InvalidRoot),
            Some(NativeCollectiveError::InvalidCollective { .. })
        ));
        assert!(matches!(
            of(Slip::Indivisible),
            Some(NativeCollectiveError::InvalidCollective { .. })
        ));
    }

    #[test]
    fn random_calls_are_valid_for_their_world() {
        let mut state = 7_u64;
        let mut draw = |n: usize| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            usize::try_from(state >> 33).unwrap_or(0) % n
        };
        for world in 1..=8 {
            for _ in 0..200 {
                let call = random_call(&mut draw, world);
                let script = Script::uniform(world, 1, |_| call);
                assert_eq!(error_of(&script, 0), None, "{call:?} W={world}");
                assert_eq!(script.expected(0).len(), world);
            }
        }
    }
}
