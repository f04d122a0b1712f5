//! A script run as written, on a plain simulated device: generations that succeed, generations
//! that fail by a slip of the ranks (every mismatch, an invalid collective), collectives mixed
//! in one communicator.

use super::{Group, Stopping, run_and_check};
use crate::device::lean;
use crate::script::Script;
use ruccl_sim::FaultPlan;

/// Every rank follows `script` on a plain simulated device: each generation delivers every
/// rank's own output of its collective, or — where the script makes the ranks disagree or ask
/// for something impossible — every rank the one error the predictor names, and the next
/// generation works normally.
///
/// Checks **agreement**, **reuse** (each call answered from its own generation, whatever the
/// collectives around it), **failure delivery** (every mismatch and invalid collective),
/// **no hang, no poison** and **resources**.
pub fn run_script(script: Script) {
    let group = Group::new(lean(), script, FaultPlan::none());
    run_and_check(group, Vec::new(), Stopping::default());
}

/// Fast re-entry: rank 0 calls again the moment it returns, while every other rank yields
/// `pause` times after each return — so rank 0 runs ahead into generation g + 1 while the others
/// are still taking their outputs of g (under a checker the yields only bias the schedule; loom
/// explores every order anyway).
///
/// Checks **reuse** — the rank running ahead never disturbs g, and g + 1 runs only after g is
/// published — with **agreement**, **no hang, no poison** and **resources**.
pub fn fast_reentry(mut script: Script, pause: usize) {
    for (rank, pauses) in script.pauses.iter_mut().enumerate() {
        *pauses = if rank == 0 { 0 } else { pause };
    }
    run_script(script);
}
