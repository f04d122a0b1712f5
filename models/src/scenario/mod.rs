//! The scenarios, written once against [`ruccl_core::sync`]: the same function runs inside
//! `loom::model`, inside a shuttle test, and on real threads. Each one builds its communicator
//! and devices itself (loom objects exist only inside a model execution), runs the ranks — the
//! calling thread is rank 0, the others are spawned through the facade — and hands what they got
//! back to [`crate::properties`], every one of them ending with the resource census
//! ([`properties::resources`]) once the ranks returned and again once the communicator is gone.
//!
//! The harness shares the communicator between its threads through a plain `std` `Arc`: the
//! `Arc` is not under test there, and a checker's `Arc` would add a scheduling point to every
//! clone and drop. The registry scenarios, where the facade's `Arc` *is* under test, use it.
//!
//! | file          | scenarios                                                                   |
//! |---------------|-----------------------------------------------------------------------------|
//! | `script.rs`   | a [`Script`] run as written: success, mismatches, mixed collectives; fast re-entry |
//! | `faults.rs`   | a fault at one site then clean generations; a fault plan                    |
//! | `abort.rs`    | abort racing the ranks; while the schedule runs; between the two generations in flight; deposits released |
//! | `timeout.rs`  | deadlines on some ranks: racing delivery, publication, an abort; while the schedule runs; in g+1 while g delivers |
//! | `busy.rs`     | a rank called twice at once (`RankBusy`)                                    |
//! | `registry.rs` | concurrent lookups; replacement of an aborted communicator                  |

mod abort;
mod busy;
mod faults;
mod registry;
mod script;
mod timeout;

pub use abort::{
    ABORT_IN_FLIGHT, abort_between_the_generations_in_flight, abort_racing_the_ranks,
    abort_releases_the_deposits, abort_while_the_schedule_runs,
};
pub use busy::a_rank_called_twice_at_once;
pub use faults::{fault_then_clean, faults_from_plan};
pub use registry::{aborted_communicator_is_replaced, concurrent_lookups};
pub use script::{fast_reentry, run_script};
pub use timeout::{
    TIMEOUT, TIMEOUT_IN_FLIGHT, TIMEOUT_WHILE_RUNNING, timeout_in_the_next_generation,
    timeout_while_the_schedule_runs, timeouts,
};

use crate::device::{ModelDevice, devices};
use crate::properties::{self, Delivered, Observed, Stops};
use crate::script::Script;
use crate::values;
use crate::watch::Watch;
use ruccl_core::sync::thread;
use ruccl_core::{CollectiveOptions, NativeCollectiveError, NativeCommunicator};
use ruccl_sim::FaultPlan;
use std::ops::Deref;

/// The harness's own sharing (a scenario's group, handed to the rank tasks): std's `Arc`, the
/// facade lint's deliberate exception in the models. Its reference counts are not under test,
/// and through the facade loom and shuttle would explore every interleaving of them.
#[allow(
    clippy::disallowed_types,
    reason = "harness sharing, not code under test: kept out of the checkers' state space"
)]
pub type HarnessArc<T> = std::sync::Arc<T>;

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

/// A communicator, the device the harness makes and reads tensors with, the script the ranks
/// follow and the fault plan the device injects (none for a plain device).
pub struct Group<D: ModelDevice> {
    /// The communicator.
    pub communicator: Handle<D>,
    /// A clone of its device, for the harness.
    pub device: D,
    /// What the ranks call with.
    pub script: Script,
    /// What the device injects.
    pub plan: FaultPlan,
    /// Where the ranks are, for the watchdog of a real-thread test (see [`crate::watch`]).
    watch: Watch,
}

impl<D: ModelDevice> Group<D> {
    /// A new communicator over `script.world` devices driving `device`, which injects `plan`.
    pub fn new(device: D, script: Script, plan: FaultPlan) -> HarnessArc<Self> {
        let communicator = match NativeCommunicator::new(devices(script.world), device.clone()) {
            Ok(communicator) => communicator,
            Err(error) => panic!("harness: cannot build the communicator: {error}"),
        };
        HarnessArc::new(Self {
            communicator: Handle::Owned(Box::new(communicator)),
            device,
            script,
            plan,
            watch: Watch::current(),
        })
    }

    /// Rank `rank`'s calls, one per generation, in order; what each returned.
    pub fn rank(&self, rank: usize) -> Vec<Delivered> {
        let pause = self.script.pauses.get(rank).copied().unwrap_or(0);
        (0..self.script.generations())
            .map(|generation| {
                let delivered = self.call(rank, generation);
                for _ in 0..pause {
                    thread::yield_now();
                }
                delivered
            })
            .collect()
    }

    /// One call of `rank` with its input, collective, algorithm and timeout of `generation`
    /// (rank 0's, for a rank outside the world).
    pub fn call(&self, rank: usize, generation: usize) -> Delivered {
        let row = &self.script.calls[generation];
        let call = row.get(rank).copied().unwrap_or(row[0]);
        let device = self
            .communicator
            .devices()
            .get(rank)
            .copied()
            .unwrap_or_else(|| ruccl_core::DeviceId::new(u32::MAX));
        let input = values::input(rank, generation as u64, call.length);
        let tensor = self.device.tensor(device, call.element, input);
        let mut options = CollectiveOptions::default().with_algorithm(call.algorithm);
        if let Some(timeout) = call.timeout {
            options = options.with_timeout(timeout);
        }
        self.watch.enter(rank, generation, call.collective);
        let delivered = self
            .communicator
            .collective(rank, tensor, call.collective, options)
            .map(|output| self.device.read(output));
        self.watch.leave(rank);
        delivered
    }

    /// What every rank of `generation` receives when nothing stops the communicator.
    pub fn outcome(&self, generation: usize) -> ruccl_sim::fault::Outcome {
        self.script
            .outcome(generation, &self.plan, self.device.link_model())
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

/// One task per rank of `group`, to be run with [`concurrently`] (possibly among others).
pub fn rank_tasks<D: ModelDevice>(group: &HarnessArc<Group<D>>) -> Vec<Task<Vec<Delivered>>> {
    (0..group.script.world)
        .map(|rank| {
            let group = HarnessArc::clone(group);
            Box::new(move || group.rank(rank)) as Task<Vec<Delivered>>
        })
        .collect()
}

/// The ranks' tasks followed by `others`, run concurrently; what the ranks got.
pub fn ranks_and<D: ModelDevice>(group: &HarnessArc<Group<D>>, others: Vec<Task<()>>) -> Observed {
    let mut tasks: Vec<Task<Option<Vec<Delivered>>>> = rank_tasks(group)
        .into_iter()
        .map(|task| Box::new(move || Some(task())) as Task<_>)
        .collect();
    for other in others {
        tasks.push(Box::new(move || {
            other();
            None
        }));
    }
    Observed {
        per_rank: concurrently(tasks).into_iter().flatten().collect(),
    }
}

/// What a scenario may see stop its communicator: `abort`s with `reasons` (and whether one is
/// certain to land), besides the deadlines its script gives.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stopping {
    /// The reasons `abort` is called with.
    pub reasons: &'static [&'static str],
    /// Whether the communicator is certainly aborted by the end.
    pub certain: bool,
}

/// Check a run of `group` against every property: no hang, a rank outside the world refused,
/// reuse, agreement in every generation, the outcome of every generation until the first stop
/// as the predictor says and the stop sticky from there on, a later call failing fast, and every
/// device value released once the ranks returned. Returns the stop, if any generation got it.
pub fn check<D: ModelDevice>(
    group: &Group<D>,
    observed: &Observed,
    stopping: Stopping,
) -> Option<NativeCollectiveError> {
    let script = &group.script;
    let generations = script.generations();
    properties::no_hang_no_poison(observed, generations, &group.communicator);
    let world = script.world;
    properties::refuses_rank_outside_world(world, &group.call(world, 0));
    let expected = script.all_expected();
    properties::reuse(observed, &expected);
    for (generation, own) in expected.iter().enumerate() {
        properties::agreement(generation, &observed.generation(generation), own);
    }
    let stops = Stops {
        reasons: stopping.reasons,
        script,
    };
    let winner = properties::abort(observed, stops, &expected, |generation| {
        group.outcome(generation)
    });
    properties::abort_fails_fast(
        &group.communicator,
        winner.as_ref(),
        stops,
        stopping.certain,
        || group.call(0, generations.saturating_sub(1)),
    );
    crate::device::census_check(&group.device, "once every rank returned");
    winner
}

/// Drop the group — the communicator with it — and check that no device value is left alive or
/// was dropped twice.
pub fn teardown<D: ModelDevice>(group: HarnessArc<Group<D>>) {
    let device = group.device.clone();
    drop(group);
    crate::device::census_check(&device, "after the communicator was dropped");
}

/// Run every rank of `group` (with `others` alongside), check every property, tear down.
pub fn run_and_check<D: ModelDevice>(
    group: HarnessArc<Group<D>>,
    others: Vec<Task<()>>,
    stopping: Stopping,
) -> Option<NativeCollectiveError> {
    let observed = ranks_and(&group, others);
    let winner = check(&group, &observed, stopping);
    teardown(group);
    winner
}
