//! The sequential model of one generation: what every rank must receive, given the fault plan,
//! when no abort interferes.
//!
//! It follows the order in which the communicator and the fault decorator meet faults (the
//! decorator's documented semantics: the first spec of the plan that matches a call wins):
//!
//! 1. ranks asked for different operations → `ReductionMismatch` (prepare failures lose to it);
//! 2. the lowest rank whose `prepare` is hit → that rank's `Device`/`Panicked` error;
//! 3. `begin`, then each `exchange` step in order, then `finish` → the first hit — except that
//!    an injected `finish` *error* with the work armed to panic becomes that panic (the work is
//!    dropped inside `finish` as it returns);
//! 4. a `drop:what=work` fault → a panic inside `finish` (the decorator drops its work there);
//! 5. an `outputs` fault with a count other than the world → `OutputCount`;
//! 6. the lowest rank whose prepared input is armed to panic → `Panicked` in that drop;
//! 7. otherwise every rank gets the reduction, its output armed if a `drop:what=output` fault
//!    names it.

use crate::reference::{integer_values, reduce_integers};
use ruccl_core::{NativeCollectiveError, Phase, ReduceOperation, RingSchedule};
use ruccl_sim::fault::{DropTarget, FaultAction, FaultPoint, FaultSite, FaultSpec, FaultyError};
use ruccl_sim::{ElementType, HostValues, SimError};

/// What every rank of one generation must receive.
#[derive(Clone, Debug, PartialEq)]
pub enum Expect {
    /// Every rank gets `values`; rank `r`'s output is armed to panic on drop iff `armed[r]`.
    Ok {
        /// The reduction.
        values: HostValues,
        /// Which outputs a `drop:what=output` fault armed.
        armed: Vec<bool>,
    },
    /// Every rank gets this error.
    Err(NativeCollectiveError),
}

/// One generation as the model sees it.
#[derive(Clone, Debug)]
pub struct GenerationInputs<'a> {
    /// The fault decorator's generation: how many times each rank has called before.
    pub device_generation: u64,
    /// The communicator's generation: how many generations it has closed before.
    pub communicator_generation: u64,
    /// The operation each rank asks for.
    pub operations: Vec<ReduceOperation>,
    /// Each rank's elements (i32 cases hold values that fit).
    pub inputs: &'a [Vec<i64>],
    /// i32 or i64.
    pub element_type: ElementType,
}

/// Whether `spec` hits a call of `rank` (for per-rank sites) in device generation `generation`;
/// mirrors the decorator's rule.
fn applies(spec: &FaultSpec, rank: Option<usize>, generation: u64) -> bool {
    let rank_matches = !spec.site.is_per_rank() || spec.rank.is_none() || spec.rank == rank;
    rank_matches && spec.generation.is_none_or(|wanted| wanted == generation)
}

/// The first spec of `plan` at a site accepted by `select` that hits `rank` in `generation`.
fn first(
    plan: &[FaultSpec],
    rank: Option<usize>,
    generation: u64,
    select: impl Fn(&FaultSite) -> bool,
) -> Option<FaultSpec> {
    plan.iter()
        .find(|spec| select(&spec.site) && applies(spec, rank, generation))
        .copied()
}

fn on_rank(rank: Option<usize>) -> String {
    rank.map(|rank| format!(" on rank {rank}"))
        .unwrap_or_default()
}

/// The error every rank gets when `action` strikes `point`, attributed to `rank`, contained by
/// the communicator as `phase` with `phase_rank`.
fn struck(
    action: FaultAction,
    point: FaultPoint,
    rank: Option<usize>,
    generation: u64,
    phase: Phase,
    phase_rank: Option<usize>,
) -> NativeCollectiveError {
    match action {
        FaultAction::Error => NativeCollectiveError::Device {
            phase,
            rank: phase_rank,
            message: FaultyError::<SimError>::Injected {
                point,
                rank,
                generation,
            }
            .to_string(),
        },
        FaultAction::Panic => NativeCollectiveError::Panicked {
            phase,
            rank: phase_rank,
            message: format!(
                "injected panic in {point}{} in generation {generation}",
                on_rank(rank)
            ),
        },
    }
}

fn action_of(site: FaultSite) -> Option<FaultAction> {
    match site {
        FaultSite::Prepare(action)
        | FaultSite::Begin(action)
        | FaultSite::Finish(action)
        | FaultSite::Exchange { action, .. } => Some(action),
        _ => None,
    }
}

/// What every rank of the generation must receive when nothing aborts the communicator.
pub fn predict(plan: &[FaultSpec], generation: &GenerationInputs<'_>) -> Expect {
    let world = generation.operations.len();
    let t = generation.device_generation;
    let operation = generation.operations[0];
    if generation
        .operations
        .iter()
        .any(|&other| other != operation)
    {
        return Expect::Err(NativeCollectiveError::ReductionMismatch {
            generation: generation.communicator_generation,
            operations: generation.operations.clone(),
        });
    }
    for rank in 0..world {
        let hit = first(plan, Some(rank), t, |site| {
            matches!(site, FaultSite::Prepare(_))
        });
        if let Some(action) = hit.and_then(|spec| action_of(spec.site)) {
            let (point, phase) = (FaultPoint::Prepare, Phase::Prepare);
            return Expect::Err(struck(action, point, Some(rank), t, phase, Some(rank)));
        }
    }
    // Sites that serve every rank at once: the spec's rank only names who it is attributed to.
    let shared = |select: &dyn Fn(&FaultSite) -> bool| first(plan, None, t, select);
    if let Some(spec) = shared(&|site| matches!(site, FaultSite::Begin(_))) {
        if let Some(action) = action_of(spec.site) {
            return Expect::Err(struck(
                action,
                FaultPoint::Begin,
                spec.rank,
                t,
                Phase::Begin,
                None,
            ));
        }
    }
    for step in 0..RingSchedule::new(world, 0).step_count() {
        let hit = shared(
            &|site| matches!(site, FaultSite::Exchange { step: wanted, .. } if wanted.is_none_or(|wanted| wanted == step)),
        );
        if let Some(spec) = hit {
            if let Some(action) = action_of(spec.site) {
                let point = FaultPoint::Exchange { step };
                let phase = Phase::Exchange { step };
                return Expect::Err(struck(action, point, spec.rank, t, phase, None));
            }
        }
    }
    // `finish` consumes the work, so an armed work panics inside `finish` — also when `finish`
    // returns an injected error (the work is dropped on the way out, and its panic replaces the
    // error); an injected panic unwinds first, and the work's drop stays quiet during it.
    let work_armed = shared(&|site| *site == FaultSite::Drop(DropTarget::Work)).is_some();
    let work_panic = || {
        Expect::Err(NativeCollectiveError::Panicked {
            phase: Phase::Finish,
            rank: None,
            message: format!("injected panic in drop of the work in generation {t}"),
        })
    };
    if let Some(spec) = shared(&|site| matches!(site, FaultSite::Finish(_))) {
        match action_of(spec.site) {
            Some(FaultAction::Error) if work_armed => return work_panic(),
            Some(action) => {
                let (point, phase) = (FaultPoint::Finish, Phase::Finish);
                return Expect::Err(struck(action, point, spec.rank, t, phase, None));
            }
            None => {}
        }
    }
    if work_armed {
        return work_panic();
    }
    if let Some(FaultSite::Outputs { count }) =
        shared(&|site| matches!(site, FaultSite::Outputs { .. })).map(|spec| spec.site)
    {
        if count != world {
            return Expect::Err(NativeCollectiveError::OutputCount {
                expected: world,
                actual: count,
            });
        }
    }
    for rank in 0..world {
        if first(plan, Some(rank), t, |site| {
            *site == FaultSite::Drop(DropTarget::Prepared)
        })
        .is_some()
        {
            return Expect::Err(NativeCollectiveError::Panicked {
                phase: Phase::DropPrepared,
                rank: None,
                message: format!(
                    "injected panic in drop of a prepared input on rank {rank} in generation {t}"
                ),
            });
        }
    }
    let armed = (0..world)
        .map(|rank| {
            first(plan, Some(rank), t, |site| {
                *site == FaultSite::Drop(DropTarget::Output)
            })
            .is_some()
        })
        .collect();
    Expect::Ok {
        values: reduction(generation.inputs, operation, generation.element_type),
        armed,
    }
}

/// The element-wise reduction of every rank's values in the element type's arithmetic.
pub fn reduction(
    inputs: &[Vec<i64>],
    operation: ReduceOperation,
    element_type: ElementType,
) -> HostValues {
    let bits = if element_type == ElementType::I32 {
        32
    } else {
        64
    };
    let length = inputs.first().map_or(0, Vec::len);
    let values: Vec<i64> = (0..length)
        .map(|index| {
            let column: Vec<i64> = inputs.iter().map(|values| values[index]).collect();
            reduce_integers(&column, operation, bits)
        })
        .collect();
    integer_values(element_type, &values)
}
