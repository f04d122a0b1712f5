//! Generations that all succeed.

use super::{Calls, Group, Shape, check_against_plan, run_ranks};
use crate::device::lean;
use ruccl_sim::FaultPlan;

/// W ranks × G generations, all succeeding, on a lean simulated device: every rank gets the
/// reduction of its own generation.
///
/// Checks **agreement**, **reuse** (each call answered from its own generation), **failure
/// delivery** (a generation without a fault delivers) and **no hang, no poison**.
pub fn all_succeed(shape: Shape) {
    let group = Group::new(lean(), Calls::uniform(shape));
    let observed = run_ranks(&group);
    check_against_plan(&group, &FaultPlan::none(), &observed);
}

/// Fast re-entry: rank 0 calls again the moment it returns, while every other rank yields
/// `pause` times after each return — so rank 0 races into generation g + 1 while the others are
/// still leaving g (under a checker the yields only bias the schedule; loom explores all orders
/// anyway).
///
/// Checks **reuse** — the racing rank never disturbs g and g + 1 starts only after everyone left
/// g — with **agreement** and **no hang, no poison**.
pub fn fast_reentry(shape: Shape, pause: usize) {
    let mut calls = Calls::uniform(shape);
    for (rank, pauses) in calls.pauses.iter_mut().enumerate() {
        *pauses = if rank == 0 { 0 } else { pause };
    }
    let group = Group::new(lean(), calls);
    let observed = run_ranks(&group);
    check_against_plan(&group, &FaultPlan::none(), &observed);
}
