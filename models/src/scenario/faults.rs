//! Generations that fail, then generations that must work again.

use super::{Calls, Group, Shape, check_against_plan, run_ranks};
use crate::device::faulty;
use ruccl_sim::{FaultPlan, FaultSpec};

/// One fault (`spec`, meant for generation 0), then `shape.generations - 1` clean generations:
/// every rank of the faulty generation gets the same error that the sim crate's predictor names, and
/// every later generation delivers its reduction.
///
/// Checks **failure delivery** (with **agreement**), **reuse** and **no hang, no poison** — a
/// panicking `Drop` included.
pub fn fault_then_clean(shape: Shape, spec: FaultSpec) {
    faults_from_plan(shape, FaultPlan::new(vec![spec]), None);
}

/// The ranks run `shape.generations` generations against a faulty device injecting `plan`
/// (hand-written, or [`FaultPlan::random`]); with `mismatch = Some((g, r))` rank `r` also asks for
/// another operation than the others in generation `g`. Every generation returns what the sim crate's
/// predictor says.
///
/// Checks **failure delivery**, **agreement**, **reuse** and **no hang, no poison**.
pub fn faults_from_plan(shape: Shape, plan: FaultPlan, mismatch: Option<(usize, usize)>) {
    let mut calls = Calls::uniform(shape);
    if let Some((generation, rank)) = mismatch {
        calls = calls.mismatched(generation, rank);
    }
    let group = Group::new(faulty(shape.world, plan.clone()), calls);
    let observed = run_ranks(&group);
    check_against_plan(&group, &plan, &observed);
}

/// Mismatched operations: in generation 0 the last rank asks for another reduce operation than
/// the others; every rank must get the same `ReductionMismatch` naming generation 0 and every
/// rank's operation, and the following generations work normally.
///
/// Checks **failure delivery** (mismatch), **agreement**, **reuse** and **no hang, no poison**.
pub fn mismatched_operations(shape: Shape) {
    let last = shape.world.saturating_sub(1);
    let calls = Calls::uniform(shape).mismatched(0, last);
    let group = Group::new(crate::device::lean(), calls);
    let observed = run_ranks(&group);
    check_against_plan(&group, &FaultPlan::none(), &observed);
}
