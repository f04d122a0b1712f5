//! The scenarios, written once against [`ruccl_core::sync`]: the same function runs inside
//! `loom::model`, inside a shuttle test, and on real threads. Each one builds its communicator
//! and devices itself (loom objects exist only inside a model execution), runs the ranks — the
//! calling thread is rank 0, the others are spawned through the facade — and hands what they got
//! back to [`crate::properties`].
//!
//! The harness shares the communicator between its threads through a plain `std` `Arc`: the
//! `Arc` is not under test there, and a checker's `Arc` would add a scheduling point to every
//! clone and drop. The registry scenarios, where the facade's `Arc` *is* under test, use it.
//!
//! | file          | scenarios                                                            |
//! |---------------|----------------------------------------------------------------------|
//! | `success.rs`  | W × G all succeeding; fast re-entry                                  |
//! | `faults.rs`   | a fault at one site then clean generations; a fault plan; mismatches |
//! | `abort.rs`    | abort racing the ranks; abort while the ring runs; first abort wins  |
//! | `registry.rs` | concurrent lookups; replacement of an aborted communicator           |

mod abort;
mod faults;
mod registry;
mod success;

pub use abort::{abort_racing_the_ranks, abort_releases_the_deposits, abort_while_the_ring_runs};
pub use faults::{fault_then_clean, faults_from_plan, mismatched_operations};
pub use registry::{aborted_communicator_is_replaced, concurrent_lookups};
pub use success::{all_succeed, fast_reentry};

use crate::device::{ModelDevice, devices};
use crate::properties::{self, Delivered, Observed};
use crate::values;
use ruccl_core::sync::thread;
use ruccl_core::{NativeCommunicator, ReduceOperation};
use ruccl_sim::FaultPlan;
use ruccl_sim::fault::GenerationCalls;
use std::ops::Deref;

/// The harness's own sharing (a scenario's group, its calls, handed to the rank tasks): std's
/// `Arc`, the facade lint's deliberate exception in the models. Its reference counts are not
/// under test, and through the facade loom and shuttle would explore every interleaving of them.
#[allow(
    clippy::disallowed_types,
    reason = "harness sharing, not code under test: kept out of the checkers' state space"
)]
pub type HarnessArc<T> = std::sync::Arc<T>;

/// The size of a scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Ranks, `W ≥ 1`.
    pub world: usize,
    /// Generations every rank calls, `G`.
    pub generations: usize,
    /// Elements per tensor (any, `0` and `< W` included).
    pub length: usize,
}

impl Shape {
    /// `world` ranks, `generations` generations, `world + 1` elements (so the ring's chunks
    /// differ in size).
    pub fn new(world: usize, generations: usize) -> Self {
        Self {
            world,
            generations,
            length: world + 1,
        }
    }
}

/// What every rank calls with: `operations[g][r]` is rank `r`'s operation in generation `g`;
/// `pauses[r]` is how many times rank `r` yields after each return before it calls again.
#[derive(Clone, Debug)]
pub struct Calls {
    /// The shape.
    pub shape: Shape,
    /// Per generation, per rank.
    pub operations: Vec<Vec<ReduceOperation>>,
    /// Per rank.
    pub pauses: Vec<usize>,
}

impl Calls {
    /// Every rank uses [`values::operation`] of the generation, and none pauses.
    pub fn uniform(shape: Shape) -> Self {
        let operations = (0..shape.generations)
            .map(|generation| vec![values::operation(generation as u64); shape.world])
            .collect();
        Self {
            shape,
            operations,
            pauses: vec![0; shape.world],
        }
    }

    /// Rank `rank` asks for another operation than the others in `generation`.
    pub fn mismatched(mut self, generation: usize, rank: usize) -> Self {
        if let Some(operation) = self
            .operations
            .get_mut(generation)
            .and_then(|row| row.get_mut(rank))
        {
            let other = values::operation(generation as u64 + 1);
            *operation = other;
        }
        self
    }

    /// The operations of `generation`.
    fn of(&self, generation: usize) -> &[ReduceOperation] {
        self.operations.get(generation).map_or(&[], Vec::as_slice)
    }

    /// The reduction generation `generation` must deliver if it succeeds (with rank 0's
    /// operation; a mismatched generation never succeeds).
    pub fn reduction(&self, generation: usize) -> Vec<i64> {
        let operation = self
            .of(generation)
            .first()
            .copied()
            .unwrap_or(ReduceOperation::Sum);
        values::reduction(
            operation,
            self.shape.world,
            generation as u64,
            self.shape.length,
        )
    }

    /// Every generation's reduction.
    pub fn reductions(&self) -> Vec<Vec<i64>> {
        (0..self.shape.generations)
            .map(|generation| self.reduction(generation))
            .collect()
    }
}

/// The communicator a scenario drives: owned, or handed out by the registry.
pub enum Handle<D: ModelDevice> {
    /// Built by the scenario.
    Owned(Box<NativeCommunicator<D>>),
    /// From a registry (the facade's `Arc`).
    Shared(ruccl_core::sync::Arc<NativeCommunicator<D>>),
}

impl<D: ModelDevice> Deref for Handle<D> {
    type Target = NativeCommunicator<D>;
    fn deref(&self) -> &NativeCommunicator<D> {
        match self {
            Handle::Owned(communicator) => communicator,
            Handle::Shared(communicator) => communicator,
        }
    }
}

/// A communicator, the device the harness makes and reads tensors with, and the calls.
pub struct Group<D: ModelDevice> {
    /// The communicator.
    pub communicator: Handle<D>,
    /// A clone of its device, for the harness.
    pub device: D,
    /// What the ranks call with.
    pub calls: Calls,
}

impl<D: ModelDevice> Group<D> {
    /// A new communicator over `calls.shape.world` devices driving `device`.
    pub fn new(device: D, calls: Calls) -> HarnessArc<Self> {
        let communicator = match NativeCommunicator::new(devices(calls.shape.world), device.clone())
        {
            Ok(communicator) => communicator,
            Err(error) => panic!("harness: cannot build the communicator: {error}"),
        };
        HarnessArc::new(Self {
            communicator: Handle::Owned(Box::new(communicator)),
            device,
            calls,
        })
    }

    /// Rank `rank`'s calls, one per generation, in order; what each returned.
    pub fn rank(&self, rank: usize) -> Vec<Delivered> {
        let pause = self.calls.pauses.get(rank).copied().unwrap_or(0);
        (0..self.calls.shape.generations)
            .map(|generation| {
                let delivered = self.call(rank, generation);
                for _ in 0..pause {
                    thread::yield_now();
                }
                delivered
            })
            .collect()
    }

    /// One call of `rank` with its input and operation of `generation`.
    pub fn call(&self, rank: usize, generation: usize) -> Delivered {
        let operation = self
            .calls
            .of(generation)
            .get(rank)
            .copied()
            .unwrap_or(ReduceOperation::Sum);
        let device = self
            .communicator
            .devices()
            .get(rank)
            .copied()
            .unwrap_or_else(|| ruccl_core::DeviceId::new(u32::MAX));
        let input = values::input(rank, generation as u64, self.calls.shape.length);
        let tensor = self.device.tensor(device, input);
        self.communicator
            .all_reduce(rank, tensor, operation)
            .map(|output| self.device.read(output))
    }
}

/// A piece of work for one thread of a scenario.
pub type Task<R> = Box<dyn FnOnce() -> R + Send + 'static>;

/// Run `tasks` concurrently: the first on the calling thread, the others on threads spawned
/// through the facade. Returns their results in order; a task's panic is resumed here.
pub fn concurrently<R: Send + 'static>(tasks: Vec<Task<R>>) -> Vec<R> {
    let mut tasks = tasks.into_iter();
    let first = tasks.next();
    let spawned: Vec<_> = tasks.map(thread::spawn).collect();
    let mut results = Vec::with_capacity(spawned.len() + 1);
    if let Some(first) = first {
        results.push(first());
    }
    for handle in spawned {
        match handle.join() {
            Ok(result) => results.push(result),
            Err(payload) => std::panic::resume_unwind(payload),
        }
    }
    results
}

/// Every rank of `group` calls once per generation, concurrently (rank 0 on this thread).
pub fn run_ranks<D: ModelDevice>(group: &HarnessArc<Group<D>>) -> Observed {
    Observed {
        per_rank: concurrently(rank_tasks(group)),
    }
}

/// One task per rank of `group`, to be run with [`concurrently`] (possibly among others).
pub fn rank_tasks<D: ModelDevice>(group: &HarnessArc<Group<D>>) -> Vec<Task<Vec<Delivered>>> {
    (0..group.calls.shape.world)
        .map(|rank| {
            let group = HarnessArc::clone(group);
            Box::new(move || group.rank(rank)) as Task<Vec<Delivered>>
        })
        .collect()
}

/// Check every generation against the sim crate's predictor for `plan`: agreement, failure delivery, reuse, no
/// hang and no poison.
pub fn check_against_plan<D: ModelDevice>(group: &Group<D>, plan: &FaultPlan, observed: &Observed) {
    let calls = &group.calls;
    properties::no_hang_no_poison(observed, calls.shape.generations, &group.communicator);
    let world = calls.shape.world;
    properties::refuses_rank_outside_world(world, &group.call(world, 0));
    properties::reuse(observed, &calls.reductions());
    for generation in 0..calls.shape.generations {
        let deliveries = observed.generation(generation);
        let reduction = calls.reduction(generation);
        let outcome = plan.predict(&GenerationCalls::new(
            generation as u64,
            calls.of(generation),
        ));
        properties::agreement(generation, &deliveries, &reduction);
        properties::failure_delivery(generation, &deliveries, &outcome, &reduction);
    }
}
