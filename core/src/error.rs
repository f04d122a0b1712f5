//! The one error type every rank of a generation receives, and the phases it can name.

use crate::{Algorithm, Collective, ReduceOperation, ScheduleViolation, TensorInfo};
use std::fmt;
use std::time::Duration;

/// Where in a generation a device failed or panicked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Phase {
    /// `NativeCollectiveDevice::prepare`, on the submitting rank's thread.
    Prepare,
    /// `NativeCollectiveDevice::describe`, on the submitting rank's thread.
    Describe,
    /// `NativeCollectiveDevice::begin`.
    Begin,
    /// `NativeCollectiveDevice::exchange`, at this step of the plan.
    Exchange {
        /// Index of the step in the plan.
        step: usize,
    },
    /// `NativeCollectiveDevice::finish`.
    Finish,
    /// Cloning the device handle for a new communicator.
    CloneDevice,
    /// `NativeCollectiveDevice::link_model`, when a communicator is created.
    LinkModel,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Phase::Prepare => f.write_str("prepare"),
            Phase::Describe => f.write_str("describe"),
            Phase::Begin => f.write_str("begin"),
            Phase::Exchange { step } => write!(f, "exchange step {step}"),
            Phase::Finish => f.write_str("finish"),
            Phase::CloneDevice => f.write_str("clone of the device handle"),
            Phase::LinkModel => f.write_str("link_model"),
        }
    }
}

/// A failure of a collective. Within one generation every participating rank receives the same
/// value (equal `Display` text, equal fields).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NativeCollectiveError {
    /// The device list given to a communicator is empty or names a device twice.
    #[error("invalid device group {devices:?}: {reason}")]
    InvalidGroup {
        /// The device indices as given.
        devices: Vec<u32>,
        /// What is wrong with them.
        reason: String,
    },
    /// A collective was called with a rank outside `0..world`.
    #[error("rank {rank} is outside the world of {world} ranks")]
    RankOutOfRange {
        /// The rank given.
        rank: usize,
        /// The communicator's world size.
        world: usize,
    },
    /// A rank called while its previous call on this communicator was still in progress (from a
    /// second thread): refused at once, without disturbing the call in progress.
    #[error(
        "rank {rank} already has a collective in progress on this communicator (one thread per rank)"
    )]
    RankBusy {
        /// The rank.
        rank: usize,
    },
    /// The ranks of one generation asked for the same reducing collective and algorithm with
    /// different reduce operations.
    #[error("ranks asked for different reduce operations in generation {generation}: {}", list_operations(.operations))]
    ReductionMismatch {
        /// The generation (0-based count of the communicator's collectives).
        generation: u64,
        /// The operation each rank asked for, in rank order.
        operations: Vec<ReduceOperation>,
    },
    /// The ranks of one generation asked for different collectives: another kind, root or
    /// algorithm, or different custom plans.
    #[error("ranks asked for different collectives in generation {generation}: {}", list_requests(.requests, *.plans_differ))]
    CollectiveMismatch {
        /// The generation (0-based count of the communicator's collectives).
        generation: u64,
        /// What each rank asked for, in rank order.
        requests: Vec<(Collective, Algorithm)>,
        /// Every rank asked for the same custom collective, with plans that differ.
        plans_differ: bool,
    },
    /// The ranks' input tensors differ in length or element type.
    #[error("ranks' inputs differ in generation {generation}: {}", list_shapes(.shapes))]
    ShapeMismatch {
        /// The generation.
        generation: u64,
        /// Each rank's input, in rank order.
        shapes: Vec<TensorInfo>,
    },
    /// The ranks agreed on a collective that cannot run: a broadcast root outside the world, a
    /// reduce-scatter input not divisible by the world, halving-doubling on a world that is not a
    /// power of two, a custom plan for another world or input length.
    #[error(
        "{collective} via {algorithm} cannot run on {world} ranks with {input_len} elements each: {reason}"
    )]
    InvalidCollective {
        /// The collective asked for.
        collective: Collective,
        /// The algorithm asked for.
        algorithm: Algorithm,
        /// The world size.
        world: usize,
        /// Elements of every rank's input.
        input_len: usize,
        /// Why it cannot run.
        reason: String,
    },
    /// A schedule failed the symbolic checker.
    #[error("the schedule is wrong: {0}")]
    InvalidSchedule(#[source] ScheduleViolation),
    /// The device executor returned an error; its message is kept.
    #[error("device error in {phase}{}: {message}", on_rank(*.rank))]
    Device {
        /// Where it failed.
        phase: Phase,
        /// The rank whose call failed, for per-rank phases (`prepare`).
        rank: Option<usize>,
        /// The executor error's `Display` text.
        message: String,
    },
    /// Device code (or a device value's `Drop`) panicked; the panic was contained.
    #[error("device panicked in {phase}{}: {message}", on_rank(*.rank))]
    Panicked {
        /// Where it panicked.
        phase: Phase,
        /// The rank whose call panicked, for per-rank phases.
        rank: Option<usize>,
        /// The panic payload, when it was a string.
        message: String,
    },
    /// `finish` returned a number of outputs other than the world size.
    #[error("the device returned {actual} outputs for {expected} ranks")]
    OutputCount {
        /// The world size.
        expected: usize,
        /// What `finish` returned.
        actual: usize,
    },
    /// `abort` was called on the communicator; sticky for every unpublished generation and every
    /// later call.
    #[error("the communicator was aborted: {reason}")]
    Aborted {
        /// The reason given to the first `abort`.
        reason: String,
    },
    /// A rank's deadline passed before its generation completed; this aborted the communicator.
    #[error("rank {rank} timed out after {timeout:?} in generation {generation}: {}", stragglers(.missing))]
    TimedOut {
        /// The rank whose deadline passed first.
        rank: usize,
        /// The generation it was waiting on.
        generation: u64,
        /// The timeout it was given.
        timeout: Duration,
        /// The ranks that never arrived in that generation. Empty when every rank had arrived
        /// and the schedule itself was still running.
        missing: Vec<usize>,
    },
}

fn list_operations(operations: &[ReduceOperation]) -> String {
    let names: Vec<String> = operations
        .iter()
        .enumerate()
        .map(|(rank, operation)| format!("rank {rank}: {operation}"))
        .collect();
    names.join(", ")
}

fn on_rank(rank: Option<usize>) -> String {
    rank.map(|rank| format!(" on rank {rank}"))
        .unwrap_or_default()
}

fn stragglers(missing: &[usize]) -> String {
    if missing.is_empty() {
        "every rank had arrived and the schedule was still running".to_owned()
    } else {
        format!("ranks {missing:?} never arrived")
    }
}

fn list_requests(requests: &[(Collective, Algorithm)], plans_differ: bool) -> String {
    let listed: Vec<String> = requests
        .iter()
        .enumerate()
        .map(|(rank, (collective, algorithm))| format!("rank {rank}: {collective} via {algorithm}"))
        .collect();
    let listed = listed.join(", ");
    if plans_differ {
        format!("{listed} (their custom plans differ)")
    } else {
        listed
    }
}

fn list_shapes(shapes: &[TensorInfo]) -> String {
    let listed: Vec<String> = shapes
        .iter()
        .enumerate()
        .map(|(rank, shape)| format!("rank {rank}: {shape}"))
        .collect();
    listed.join(", ")
}
