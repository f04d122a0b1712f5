//! What a generation must return, predicted from the fault plan and the operations the ranks
//! asked for — the oracle of the failure-delivery property.
//!
//! The core checks, in this order: the operations agree (else `ReductionMismatch`); every rank's
//! `prepare` succeeded (else the lowest failing rank's error); then the ring runs `begin`, the
//! `2(W-1)` exchanges, `finish` (where the fault injector also drops the work — a panicking drop
//! there beats an injected `finish` error — and pads or cuts the outputs); then the prepared inputs are dropped. The first failure on that path is the
//! generation's error. A panicking drop of an *output* fails nothing: the output is delivered
//! armed, and whoever drops it pays.

use ruccl_core::{NativeCollectiveError, Phase, ReduceOperation};
use ruccl_sim::fault::{DropTarget, FaultAction, FaultSite};
use ruccl_sim::{FaultPlan, FaultSpec};
use std::fmt;

/// The error a failing generation must deliver, up to the device's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorShape {
    /// `ReductionMismatch` with exactly these fields.
    Mismatch {
        /// The generation.
        generation: u64,
        /// Each rank's operation.
        operations: Vec<ReduceOperation>,
    },
    /// `Device` (an injected error) in this phase, attributed to this rank.
    Device {
        /// The phase.
        phase: Phase,
        /// The rank (per-rank phases only).
        rank: Option<usize>,
    },
    /// `Panicked` (an injected panic) in this phase, attributed to this rank.
    Panicked {
        /// The phase.
        phase: Phase,
        /// The rank (per-rank phases only).
        rank: Option<usize>,
    },
    /// `OutputCount` with exactly these fields.
    OutputCount {
        /// The world.
        expected: usize,
        /// What `finish` returned.
        actual: usize,
    },
}

impl ErrorShape {
    /// Whether `error` has this shape.
    pub fn matches(&self, error: &NativeCollectiveError) -> bool {
        match (self, error) {
            (
                ErrorShape::Mismatch {
                    generation,
                    operations,
                },
                NativeCollectiveError::ReductionMismatch {
                    generation: actual_generation,
                    operations: actual_operations,
                },
            ) => generation == actual_generation && operations == actual_operations,
            (
                ErrorShape::Device { phase, rank },
                NativeCollectiveError::Device {
                    phase: actual_phase,
                    rank: actual_rank,
                    ..
                },
            )
            | (
                ErrorShape::Panicked { phase, rank },
                NativeCollectiveError::Panicked {
                    phase: actual_phase,
                    rank: actual_rank,
                    ..
                },
            ) => phase == actual_phase && rank == actual_rank,
            (
                ErrorShape::OutputCount { expected, actual },
                NativeCollectiveError::OutputCount {
                    expected: actual_expected,
                    actual: actual_actual,
                },
            ) => expected == actual_expected && actual == actual_actual,
            _ => false,
        }
    }

    fn of_action(action: FaultAction, phase: Phase, rank: Option<usize>) -> Self {
        match action {
            FaultAction::Error => ErrorShape::Device { phase, rank },
            FaultAction::Panic => ErrorShape::Panicked { phase, rank },
        }
    }
}

impl fmt::Display for ErrorShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorShape::Mismatch {
                generation,
                operations,
            } => write!(
                f,
                "ReductionMismatch in generation {generation}: {operations:?}"
            ),
            ErrorShape::Device { phase, rank } => write!(f, "Device error in {phase}, {rank:?}"),
            ErrorShape::Panicked { phase, rank } => write!(f, "Panicked in {phase}, {rank:?}"),
            ErrorShape::OutputCount { expected, actual } => {
                write!(f, "OutputCount {actual} for {expected}")
            }
        }
    }
}

/// What one generation must return.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prediction {
    /// Every rank gets the generation's reduction.
    Success,
    /// Every rank gets the same error, of this shape.
    Failure(ErrorShape),
}

/// The outcome of `generation` for a world of `world` ranks under `plan`, where rank `r` asks for
/// `operations[r]`.
pub fn predict(
    plan: &FaultPlan,
    world: usize,
    generation: u64,
    operations: &[ReduceOperation],
) -> Prediction {
    if let Some(first) = operations.first() {
        if operations.iter().any(|operation| operation != first) {
            return Prediction::Failure(ErrorShape::Mismatch {
                generation,
                operations: operations.to_vec(),
            });
        }
    }
    let fault = |rank: Option<usize>, select: &dyn Fn(&FaultSite) -> bool| {
        first_fault(plan, generation, rank, select)
    };
    for rank in 0..world {
        if let Some(FaultSite::Prepare(action)) =
            fault(Some(rank), &|site| matches!(site, FaultSite::Prepare(_)))
        {
            return Prediction::Failure(ErrorShape::of_action(action, Phase::Prepare, Some(rank)));
        }
    }
    if let Some(FaultSite::Begin(action)) = fault(None, &|site| matches!(site, FaultSite::Begin(_)))
    {
        return Prediction::Failure(ErrorShape::of_action(action, Phase::Begin, None));
    }
    for step in 0..2 * world.saturating_sub(1) {
        let at_step = |site: &FaultSite| match site {
            FaultSite::Exchange { step: wanted, .. } => wanted.is_none_or(|wanted| wanted == step),
            _ => false,
        };
        if let Some(FaultSite::Exchange { action, .. }) = fault(None, &at_step) {
            return Prediction::Failure(ErrorShape::of_action(
                action,
                Phase::Exchange { step },
                None,
            ));
        }
    }
    // An armed work panics when it is dropped inside `finish` — also when `finish` returns an
    // injected error, which drops it on the way out (an injected panic there wins instead: a drop
    // during unwinding does not panic again). Either way `finish` panicked.
    let work_armed = fault(None, &|site| *site == FaultSite::Drop(DropTarget::Work)).is_some();
    if work_armed {
        return Prediction::Failure(ErrorShape::Panicked {
            phase: Phase::Finish,
            rank: None,
        });
    }
    if let Some(FaultSite::Finish(action)) =
        fault(None, &|site| matches!(site, FaultSite::Finish(_)))
    {
        return Prediction::Failure(ErrorShape::of_action(action, Phase::Finish, None));
    }
    if let Some(FaultSite::Outputs { count }) =
        fault(None, &|site| matches!(site, FaultSite::Outputs { .. }))
    {
        if count != world {
            return Prediction::Failure(ErrorShape::OutputCount {
                expected: world,
                actual: count,
            });
        }
    }
    let prepared_drop = |site: &FaultSite| *site == FaultSite::Drop(DropTarget::Prepared);
    if (0..world).any(|rank| fault(Some(rank), &prepared_drop).is_some()) {
        return Prediction::Failure(ErrorShape::Panicked {
            phase: Phase::DropPrepared,
            rank: None,
        });
    }
    Prediction::Success
}

/// The site of the first spec of `plan` at a site `select` accepts that hits a call of `rank` in
/// `generation` — the one the fault injector fires there.
fn first_fault(
    plan: &FaultPlan,
    generation: u64,
    rank: Option<usize>,
    select: &dyn Fn(&FaultSite) -> bool,
) -> Option<FaultSite> {
    plan.specs()
        .iter()
        .find(|spec| select(&spec.site) && hits(spec, rank, generation))
        .map(|spec| spec.site)
}

/// Whether `spec` hits a call of `rank` (meaningful for per-rank sites) in `generation`.
fn hits(spec: &FaultSpec, rank: Option<usize>, generation: u64) -> bool {
    let rank_matches = !spec.site.is_per_rank() || spec.rank.is_none() || spec.rank == rank;
    rank_matches && spec.generation.is_none_or(|wanted| wanted == generation)
}

/// One fault at every site the injector has, each in `generation`, for a world of `world`: an
/// error and a panic in `prepare` on every rank, in `begin`, at every `exchange` step and in
/// `finish`; too few and too many outputs; a panicking drop of a prepared input (every rank), of
/// the work, and of an output (every rank).
pub fn every_site(world: usize, generation: u64) -> Vec<FaultSpec> {
    let mut specs = Vec::new();
    let at = |site: FaultSite| FaultSpec::new(site).in_generation(generation);
    for action in [FaultAction::Error, FaultAction::Panic] {
        for rank in 0..world {
            specs.push(at(FaultSite::Prepare(action)).on_rank(rank));
        }
        specs.push(at(FaultSite::Begin(action)));
        for step in 0..2 * world.saturating_sub(1) {
            specs.push(at(FaultSite::Exchange {
                step: Some(step),
                action,
            }));
        }
        specs.push(at(FaultSite::Finish(action)));
    }
    for count in [0, world.saturating_sub(1), world + 1] {
        if count != world {
            specs.push(at(FaultSite::Outputs { count }));
        }
    }
    specs.push(at(FaultSite::Drop(DropTarget::Work)));
    for rank in 0..world {
        specs.push(at(FaultSite::Drop(DropTarget::Prepared)).on_rank(rank));
        specs.push(at(FaultSite::Drop(DropTarget::Output)).on_rank(rank));
    }
    specs.dedup();
    specs
}
