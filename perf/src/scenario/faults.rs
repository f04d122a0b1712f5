//! A fault plan checked against the run it is for, before anything runs: every spec must be
//! able to fire. Refused, each with a message naming the spec:
//!
//! - a `rank=` outside the world, a `gen=` the run never reaches, a `step=` the plan does not
//!   have (an `exchange` fault on a plan with no steps);
//! - `rank=` on `begin`, `exchange` or `finish`, which run once for all ranks (on the last to
//!   arrive) — it would only name who the failure is blamed on, yet read as a filter;
//! - `outputs:count=` equal to the world (it changes nothing) or above twice the world;
//! - a spec that an earlier one always pre-empts: in every generation it applies to, the
//!   generation ends earlier, or an earlier spec takes its site first.
//!
//! The last is decided by following the fault decorator through a generation the way it meets
//! faults — every rank's `prepare` (and the arming of its prepared input), then `begin` (which
//! drops the armed inputs first), the arming of the work, each step, `finish`, the output count,
//! the arming of each output — for each generation a spec names and for one that none names
//! (all others behave like it), so it takes time in the number of specs, never generations.

use ruccl_sim::FaultPlan;
use ruccl_sim::fault::{DropTarget, FaultPoint, FaultSite, FaultSpec};
use std::collections::BTreeSet;

/// The run a plan is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultRun {
    /// The number of ranks.
    pub world: usize,
    /// How many generations run.
    pub generations: u64,
    /// How many steps the plan of every generation has.
    pub steps: usize,
}

/// Why `plan` cannot be run as given against `run`: the first spec that can never fire, or
/// takes a field it cannot use, named with its position and text.
pub fn check_faults(plan: &FaultPlan, run: FaultRun) -> Result<(), String> {
    let specs = plan.specs();
    for (index, spec) in specs.iter().enumerate() {
        check_spec(spec, run).map_err(|reason| format!("fault {index} `{spec}`: {reason}"))?;
    }
    let mut fired = vec![false; specs.len()];
    for generation in representatives(specs, run.generations) {
        for (index, fired) in fired.iter_mut().enumerate() {
            *fired |= fires_first(plan, index, generation, run);
        }
    }
    match fired.iter().position(|fired| !fired) {
        Some(index) => Err(format!(
            "fault {index} `{}` can never fire: in every generation it applies to, an earlier fault ends the generation first or takes its place",
            specs[index]
        )),
        None => Ok(()),
    }
}

/// The checks of one spec on its own.
fn check_spec(spec: &FaultSpec, run: FaultRun) -> Result<(), String> {
    let keyword = spec.site.keyword();
    if let Some(rank) = spec.rank {
        if !spec.site.is_per_rank() {
            return Err(format!(
                "`{keyword}` runs once for all ranks (on the last to arrive), so it takes no rank=; drop rank={rank}"
            ));
        }
        if rank >= run.world {
            return Err(format!(
                "rank {rank} is outside the world of {} ranks (0-{})",
                run.world,
                run.world - 1
            ));
        }
    }
    if let Some(generation) = spec.generation {
        if generation >= run.generations {
            return Err(format!(
                "generation {generation} never runs: -n {} runs generations 0-{}",
                run.generations,
                run.generations.saturating_sub(1)
            ));
        }
    }
    match spec.site {
        FaultSite::Exchange { .. } if run.steps == 0 => {
            Err("the plan has no steps, so no exchange ever runs".to_owned())
        }
        FaultSite::Exchange {
            step: Some(step), ..
        } if step >= run.steps => Err(format!(
            "step {step} does not exist: the plan has {} steps (0-{})",
            run.steps,
            run.steps - 1
        )),
        FaultSite::Outputs { count } if count == run.world => Err(format!(
            "count={count} is the right number of outputs for {} ranks: it changes nothing",
            run.world
        )),
        FaultSite::Outputs { count } if count > 2 * run.world => Err(format!(
            "count={count} is more than twice the world ({} ranks): at most {}",
            run.world,
            2 * run.world
        )),
        _ => Ok(()),
    }
}

/// One generation per class that behaves alike: each generation a spec names, and the first one
/// none names (if the run has any).
fn representatives(specs: &[FaultSpec], generations: u64) -> Vec<u64> {
    let named: BTreeSet<u64> = specs
        .iter()
        .filter_map(|spec| spec.generation)
        .filter(|&generation| generation < generations)
        .collect();
    let mut chosen: Vec<u64> = named.iter().copied().collect();
    let unnamed = (0..generations).find(|generation| !named.contains(generation));
    chosen.extend(unnamed);
    chosen
}

/// Whether spec `index` fires in `generation`, following the decorator through it.
fn fires_first(plan: &FaultPlan, index: usize, generation: u64, run: FaultRun) -> bool {
    let target = plan.specs()[index];
    let is = |found: Option<FaultSpec>| {
        found.is_some_and(|found| found == target)
            && plan.specs().iter().position(|spec| *spec == target) == Some(index)
    };
    let mut fired = false;
    // Every rank prepares; a prepared input may be armed to panic when dropped.
    let mut prepare_failed = false;
    let mut armed_input = false;
    for rank in 0..run.world {
        let hit = plan.first(Some(rank), generation, |site| {
            site.strikes(FaultPoint::Prepare)
        });
        fired |= is(hit);
        if hit.is_some() {
            prepare_failed = true;
            continue;
        }
        // Then `describe`; a panic there fails the generation, and the communicator drops the
        // prepared input (an armed one panics there too).
        let described = plan.first(Some(rank), generation, |site| {
            site.strikes(FaultPoint::Describe)
        });
        fired |= is(described);
        prepare_failed |= described.is_some();
        let armed = plan.first(Some(rank), generation, |site| {
            *site == FaultSite::Drop(DropTarget::Prepared)
        });
        fired |= is(armed);
        armed_input |= armed.is_some();
    }
    if prepare_failed || armed_input {
        return fired;
    }
    let begin = plan.first(None, generation, |site| site.strikes(FaultPoint::Begin));
    fired |= is(begin);
    if begin.is_some() {
        return fired;
    }
    let work = plan.first(None, generation, |site| {
        *site == FaultSite::Drop(DropTarget::Work)
    });
    fired |= is(work);
    for step in 0..run.steps {
        let hit = plan.first(None, generation, |site| {
            site.strikes(FaultPoint::Exchange { step })
        });
        fired |= is(hit);
        if hit.is_some() {
            return fired;
        }
    }
    let finish = plan.first(None, generation, |site| site.strikes(FaultPoint::Finish));
    fired |= is(finish);
    if finish.is_some() || work.is_some() {
        return fired;
    }
    let outputs = plan.first(None, generation, |site| {
        matches!(site, FaultSite::Outputs { .. })
    });
    fired |= is(outputs);
    let count = match outputs.map(|spec| spec.site) {
        Some(FaultSite::Outputs { count }) => count,
        _ => run.world,
    };
    for rank in 0..count {
        let armed = plan.first(Some(rank), generation, |site| {
            *site == FaultSite::Drop(DropTarget::Output)
        });
        fired |= is(armed);
    }
    fired
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(text: &str) -> FaultPlan {
        text.parse()
            .unwrap_or_else(|error| panic!("{text}: {error}"))
    }

    const RUN: FaultRun = FaultRun {
        world: 4,
        generations: 6,
        steps: 6,
    };

    fn refused(text: &str) -> String {
        check_faults(&plan(text), RUN).expect_err(text)
    }

    #[test]
    fn specs_inside_the_run_are_accepted() {
        for text in [
            "exchange:step=5:gen=5:panic",
            "prepare:rank=3:gen=0:error",
            "exchange:panic",
            "outputs:count=8",
            "outputs:count=1:gen=1,drop:what=output:gen=1",
            "drop:what=prepared:rank=1:gen=0,finish:gen=2:error",
            "prepare:rank=0:gen=1:error,prepare:rank=1:gen=1:panic",
        ] {
            assert_eq!(check_faults(&plan(text), RUN), Ok(()), "{text}");
        }
    }

    #[test]
    fn what_lies_outside_the_run_is_named() {
        assert!(refused("prepare:rank=4:error").contains("rank 4 is outside the world of 4"));
        assert!(refused("finish:gen=6:error").contains("generation 6 never runs"));
        assert!(refused("exchange:step=6:panic").contains("step 6 does not exist"));
        let no_steps = FaultRun { steps: 0, ..RUN };
        assert!(
            check_faults(&plan("exchange:error"), no_steps)
                .unwrap_err()
                .contains("no steps")
        );
    }

    #[test]
    fn a_rank_on_a_phase_of_all_ranks_is_refused() {
        for site in ["begin", "exchange:step=1", "finish"] {
            let message = refused(&format!("{site}:rank=1:error"));
            assert!(message.contains("takes no rank="), "{message}");
        }
    }

    #[test]
    fn output_counts_are_bounded() {
        assert!(refused("outputs:count=4").contains("changes nothing"));
        assert!(refused("outputs:count=9").contains("more than twice"));
        assert!(refused("outputs:count=18446744073709551615").contains("more than twice"));
    }

    #[test]
    fn a_spec_an_earlier_one_always_preempts_is_refused() {
        // The first exchange fault ends every generation at step 0.
        let message = refused("exchange:error,exchange:step=2:panic");
        assert!(message.starts_with("fault 1 "), "{message}");
        assert!(message.contains("can never fire"), "{message}");
        // Every generation fails in prepare: nothing later fires.
        assert!(refused("prepare:error,finish:gen=1:error").starts_with("fault 1 "));
        // Same site, same generation: the first wins.
        assert!(refused("begin:gen=2:error,begin:gen=2:panic").starts_with("fault 1 "));
        // Only in generation 3 does the broad one lose to nothing earlier: both fire.
        assert_eq!(
            check_faults(&plan("finish:gen=3:error,finish:panic"), RUN),
            Ok(())
        );
    }
}
