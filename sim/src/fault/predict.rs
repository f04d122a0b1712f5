//! The one outcome predictor: what every rank of a generation receives from a communicator over
//! a [`FaultyDevice`](super::FaultyDevice), given the plan and the operations the ranks asked
//! for, when nothing aborts the communicator. The model checkers, the fuzz targets and the tests
//! all check against it.
//!
//! The order of precedence is on [`FaultPlan::predict`].

use super::error::{drop_panic, injected_panic};
use super::{DropTarget, FaultAction, FaultPlan, FaultPoint, FaultSite, FaultSpec, FaultyError};
use ruccl_core::{
    Algorithm, Collective, ElementType, LinkModel, NativeCollectiveError, Phase, Plan,
    ReduceOperation, TensorInfo,
};
use std::convert::Infallible;

/// One generation of calls, as the predictor sees it.
#[derive(Clone, Copy, Debug)]
pub struct GenerationCalls<'a> {
    /// The decorator's generation: how many times each rank prepared before (see
    /// [Generations](super#generations)).
    pub device_generation: u64,
    /// The communicator's generation, which mismatch errors name. The same as
    /// `device_generation` for a decorator and a communicator that start together.
    pub communicator_generation: u64,
    /// What each rank asks for, in rank order; the world is its length.
    pub requests: &'a [(Collective, Algorithm)],
    /// Each rank's input, in rank order.
    pub inputs: &'a [TensorInfo],
    /// The wrapped device's α–β model, which resolves `Auto`.
    pub model: LinkModel,
}

impl<'a> GenerationCalls<'a> {
    /// Generation `generation` of a decorator and a communicator that started together, rank `r`
    /// asking for `requests[r]` with an input of `inputs[r]`, on a device with `model`.
    pub fn new(
        generation: u64,
        requests: &'a [(Collective, Algorithm)],
        inputs: &'a [TensorInfo],
        model: LinkModel,
    ) -> Self {
        Self {
            device_generation: generation,
            communicator_generation: generation,
            requests,
            inputs,
            model,
        }
    }

    /// The plan the generation runs once the ranks agree: the core's own resolution of the
    /// first rank's request for the first rank's input.
    pub fn plan(&self) -> Result<Plan, NativeCollectiveError> {
        let world = self.requests.len();
        let (collective, algorithm) = self
            .requests
            .first()
            .copied()
            .unwrap_or((Collective::AllReduce(ReduceOperation::Sum), Algorithm::Auto));
        let input = self.inputs.first().copied().unwrap_or(TensorInfo {
            len: 0,
            element: ElementType::F32,
        });
        Plan::with_model(collective, algorithm, world, input, &self.model)
    }
}

/// What every rank of one generation receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every rank gets the collective's result.
    Delivered {
        /// `armed[r]`: rank `r`'s output panics when dropped (a `drop:what=output` fault).
        armed: Vec<bool>,
    },
    /// Every rank gets this error, to the letter.
    Failed(NativeCollectiveError),
}

impl Outcome {
    /// The error, for a failing generation.
    pub fn error(&self) -> Option<&NativeCollectiveError> {
        match self {
            Outcome::Failed(error) => Some(error),
            Outcome::Delivered { .. } => None,
        }
    }
}

impl FaultPlan {
    /// What every rank of the generation `calls` describes receives, when nothing aborts the
    /// communicator.
    ///
    /// The core and the decorator meet faults in this order, and the first one met is the
    /// generation's error (within one site, the first spec of the plan that applies wins, as in the
    /// decorator — [`FaultPlan::first`]):
    ///
    /// 1. the ranks asked for different collectives → `ReductionMismatch` when only the reduce
    ///    operation differs, `CollectiveMismatch` otherwise (the last arriver checks agreement
    ///    before it runs anything);
    /// 2. the lowest rank whose `prepare` or `describe` is hit → that rank's `Device` or `Panicked`
    ///    error;
    /// 3. the inputs differ in length or element type → `ShapeMismatch`;
    /// 4. the agreed collective cannot run → the core's `InvalidCollective`;
    /// 5. the lowest rank whose prepared input is armed → `Panicked` in `begin` (which takes the
    ///    inputs and drops the decorator's wrappers first);
    /// 6. `begin`, then each `exchange` step of the plan in order → the first hit;
    /// 7. `finish`: an injected panic; otherwise, if a `drop:what=work` fault armed the work, its
    ///    panic — `finish` consumes the work and drops it, also on the way out of an injected
    ///    `finish` *error*, whose return the panic replaces (during an injected panic the armed
    ///    work stays quiet); otherwise an injected error;
    /// 8. an `outputs` fault with a count other than the world → `OutputCount`;
    /// 9. otherwise every rank gets the result, its output armed where a `drop:what=output` fault
    ///    names its rank (a panicking output drop fails nothing: whoever drops it pays).
    pub fn predict(&self, calls: &GenerationCalls<'_>) -> Outcome {
        let world = calls.requests.len();
        let generation = calls.device_generation;
        if let Some(mismatch) = mismatch(calls) {
            return Outcome::Failed(mismatch);
        }
        // An error-or-panic fault that strikes `point`: the call of `rank` (`None`: of every rank).
        let struck = |point: FaultPoint, rank: Option<usize>| {
            let spec = self.first(rank, generation, |site| site.strikes(point))?;
            spec.site
                .action()
                .map(|action| failure(&spec, action, point, rank, generation))
        };
        for rank in 0..world {
            // A rank's `describe` runs only after its `prepare` succeeded.
            let hit = struck(FaultPoint::Prepare, Some(rank))
                .or_else(|| struck(FaultPoint::Describe, Some(rank)));
            if let Some(error) = hit {
                return Outcome::Failed(error);
            }
        }
        if calls
            .inputs
            .iter()
            .any(|input| Some(input) != calls.inputs.first())
        {
            return Outcome::Failed(NativeCollectiveError::ShapeMismatch {
                generation: calls.communicator_generation,
                shapes: calls.inputs.to_vec(),
            });
        }
        let plan = match calls.plan() {
            Ok(plan) => plan,
            Err(error) => return Outcome::Failed(error),
        };
        let armed = |target: DropTarget, rank: usize| {
            self.first(Some(rank), generation, |site| {
                *site == FaultSite::Drop(target)
            })
            .is_some()
        };
        if let Some(rank) = (0..world).find(|&rank| armed(DropTarget::Prepared, rank)) {
            return Outcome::Failed(NativeCollectiveError::Panicked {
                phase: Phase::Begin,
                rank: None,
                message: drop_panic(DropTarget::Prepared.victim(), Some(rank), generation),
            });
        }
        if let Some(error) = struck(FaultPoint::Begin, None) {
            return Outcome::Failed(error);
        }
        for step in 0..plan.steps().len() {
            if let Some(error) = struck(FaultPoint::Exchange { step }, None) {
                return Outcome::Failed(error);
            }
        }
        let finish = self.first(None, generation, |site| site.strikes(FaultPoint::Finish));
        let work_armed = self
            .first(None, generation, |site| {
                *site == FaultSite::Drop(DropTarget::Work)
            })
            .is_some();
        match finish.and_then(|spec| spec.site.action().map(|action| (spec, action))) {
            Some((spec, FaultAction::Panic)) => {
                return Outcome::Failed(failure(
                    &spec,
                    FaultAction::Panic,
                    FaultPoint::Finish,
                    None,
                    generation,
                ));
            }
            _ if work_armed => {
                return Outcome::Failed(NativeCollectiveError::Panicked {
                    phase: Phase::Finish,
                    rank: None,
                    message: drop_panic(DropTarget::Work.victim(), None, generation),
                });
            }
            Some((spec, action)) => {
                return Outcome::Failed(failure(
                    &spec,
                    action,
                    FaultPoint::Finish,
                    None,
                    generation,
                ));
            }
            None => {}
        }
        let outputs = self.first(None, generation, |site| {
            matches!(site, FaultSite::Outputs { .. })
        });
        if let Some(FaultSite::Outputs { count }) = outputs.map(|spec| spec.site) {
            if count != world {
                return Outcome::Failed(NativeCollectiveError::OutputCount {
                    expected: world,
                    actual: count,
                });
            }
        }
        Outcome::Delivered {
            armed: (0..world)
                .map(|rank| armed(DropTarget::Output, rank))
                .collect(),
        }
    }
}

/// Rule 1: the mismatch error, if the ranks asked for different things (the core's rule: a
/// reduction mismatch when only the operation of one reducing kind differs).
fn mismatch(calls: &GenerationCalls<'_>) -> Option<NativeCollectiveError> {
    let first = *calls.requests.first()?;
    if calls.requests.iter().all(|request| *request == first) {
        return None;
    }
    // The same request in all but the operation (a different root is a collective mismatch).
    let erased = |collective: &Collective| collective.with_operation(ReduceOperation::Sum);
    let same_kind = calls.requests.iter().all(|(collective, algorithm)| {
        erased(collective) == erased(&first.0) && *algorithm == first.1
    });
    if same_kind && first.0.operation().is_some() {
        return Some(NativeCollectiveError::ReductionMismatch {
            generation: calls.communicator_generation,
            operations: calls
                .requests
                .iter()
                .filter_map(|(collective, _)| collective.operation())
                .collect(),
        });
    }
    Some(NativeCollectiveError::CollectiveMismatch {
        generation: calls.communicator_generation,
        requests: calls.requests.to_vec(),
        plans_differ: false,
    })
}

/// The error every rank receives when `action` strikes `point` for `spec`; `rank` is the
/// rank of the call (per-rank sites), which the core names too.
fn failure(
    spec: &FaultSpec,
    action: FaultAction,
    point: FaultPoint,
    rank: Option<usize>,
    generation: u64,
) -> NativeCollectiveError {
    // The decorator attributes a shared call's fault to the spec's rank, in its message only.
    let attributed = if spec.site.is_per_rank() {
        rank
    } else {
        spec.rank
    };
    let phase = match point {
        FaultPoint::Prepare => Phase::Prepare,
        FaultPoint::Describe => Phase::Describe,
        FaultPoint::Begin => Phase::Begin,
        FaultPoint::Exchange { step } => Phase::Exchange { step },
        FaultPoint::Finish => Phase::Finish,
    };
    match action {
        FaultAction::Error => NativeCollectiveError::Device {
            phase,
            rank,
            message: FaultyError::<Infallible>::Injected {
                point,
                rank: attributed,
                generation,
            }
            .to_string(),
        },
        FaultAction::Panic => NativeCollectiveError::Panicked {
            phase,
            rank,
            message: injected_panic(point, attributed, generation),
        },
    }
}

/// One fault at every site the decorator has, each in `generation`, for a world of `world` and a
/// plan of `steps` steps: an error and a panic in `prepare` on every rank, in `begin`, at every
/// `exchange` step and in `finish`; too few and too many outputs; a panicking drop of the work;
/// a panicking `describe`, and a panicking drop of a prepared input and of an output, on every
/// rank. Used one at a time, they cover every
/// path a fault can take.
pub fn every_site(world: usize, steps: usize, generation: u64) -> Vec<FaultSpec> {
    let mut specs = Vec::new();
    let at = |site: FaultSite| FaultSpec::new(site).in_generation(generation);
    for action in [FaultAction::Error, FaultAction::Panic] {
        for rank in 0..world {
            specs.push(at(FaultSite::Prepare(action)).on_rank(rank));
        }
        specs.push(at(FaultSite::Begin(action)));
        for step in 0..steps {
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
        specs.push(at(FaultSite::Describe).on_rank(rank));
        specs.push(at(FaultSite::Drop(DropTarget::Prepared)).on_rank(rank));
        specs.push(at(FaultSite::Drop(DropTarget::Output)).on_rank(rank));
    }
    specs.dedup();
    specs
}
