//! Generations that fail on the device, then generations that must work again.

use super::{Group, Stopping, run_and_check};
use crate::device::faulty;
use crate::script::Script;
use ruccl_sim::{FaultPlan, FaultSpec};

/// One fault (`spec`) in a run of `script`, then the rest of the generations clean: every rank
/// of the faulty generation gets the same error that the sim crate's predictor names, and every
/// later generation delivers.
///
/// Checks **failure delivery** (with **agreement**), **reuse**, **no hang, no poison** — a
/// panicking `Drop` included — and **resources** (every value of the failed generation released,
/// whichever site failed).
pub fn fault_then_clean(script: Script, spec: FaultSpec) {
    faults_from_plan(script, FaultPlan::new(vec![spec]));
}

/// The ranks follow `script` on a device injecting `plan` (hand-written, or
/// [`FaultPlan::random`]); the script may make ranks disagree too. Every generation returns what
/// the sim crate's predictor says.
///
/// Checks **failure delivery**, **agreement**, **reuse**, **no hang, no poison** and
/// **resources**.
pub fn faults_from_plan(script: Script, plan: FaultPlan) {
    let group = Group::new(faulty(script.world, plan.clone()), script, plan);
    run_and_check(group, Vec::new(), Stopping::default());
}
