//! shuttle: random and PCT schedules of the scenarios at scale — up to 8 ranks and 8
//! generations, one communicator running a random sequence of collectives and algorithms with
//! mismatches of every kind, invalid collectives, seeded random fault plans, deadlines and
//! aborts. Run with `cargo shuttle` (see models/README.md).
//!
//! Every model draws its script and its fault plan from shuttle's own random source, so the
//! schedule a failure prints (pass it to `shuttle::replay`) reproduces them too. Each test names
//! the properties it checks; every scenario also checks agreement, no hang and resources.
#![cfg(ruccl_shuttle)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ruccl_models::budget::Profile;
use ruccl_models::checkers::shuttle::{pct, random};
use ruccl_models::scenario::{self, TIMEOUT};
use ruccl_models::script::{Script, random_script, random_timeouts};
use ruccl_sim::FaultPlan;
use ruccl_sim::fault::{RandomPlan, every_site};
use shuttle::rand::{Rng, thread_rng};

/// Iterations per model: thousands in the full profile.
fn iterations() -> usize {
    Profile::current().pick(30_000, 30)
}

/// A number in `0..n`, from shuttle's random source.
fn draw(n: usize) -> usize {
    thread_rng().gen_range(0..n)
}

/// A script drawn from shuttle's random source: W in `min_world..=8`, G in 1..=8, every
/// generation a random collective, algorithm and length; with `slips`, one generation in three
/// made to fail by a random slip (mismatch of kind, operation, root, algorithm, length or type;
/// invalid root; indivisible reduce-scatter).
fn drawn(min_world: usize, slips: bool) -> Script {
    let world = thread_rng().gen_range(min_world..=8);
    let generations = thread_rng().gen_range(1..=8);
    random_script(&mut draw, world, generations, if slips { 3 } else { 0 })
}

/// A drawn script (slips included), a random fault plan of up to three faults.
fn random_faults(min_world: usize) {
    let script = drawn(min_world, true);
    let plan = FaultPlan::random(RandomPlan {
        seed: thread_rng().r#gen(),
        world: script.world,
        steps: script.max_steps(),
        generations: script.generations() as u64,
        faults: thread_rng().gen_range(0..=3),
    });
    scenario::faults_from_plan(script, plan);
}

/// A drawn script (slips included) with a deadline on a random rank in about one generation in
/// three.
fn drawn_with_timeouts(min_world: usize) -> Script {
    let script = drawn(min_world, true);
    random_timeouts(&mut draw, script, 3, TIMEOUT)
}

// Agreement, reuse, failure delivery (every mismatch, invalid collectives), no hang, resources.

#[test]
fn mixed_collectives_with_slips_up_to_8x8_random() {
    random("mixed collectives W≤8 G≤8", iterations(), || {
        scenario::run_script(drawn(1, true));
    });
}

#[test]
fn mixed_collectives_with_slips_up_to_8x8_pct() {
    // PCT needs concurrency: at least two ranks.
    pct("mixed collectives W≤8 G≤8", iterations(), 3, || {
        scenario::run_script(drawn(2, true));
    });
}

// Reuse: a rank running ahead into g + 1.

#[test]
fn fast_reentry_up_to_8x8_random() {
    random("fast re-entry W≤8 G≤8", iterations(), || {
        scenario::fast_reentry(drawn(2, false), 2);
    });
}

#[test]
fn fast_reentry_up_to_8x8_pct() {
    pct("fast re-entry W≤8 G≤8", iterations(), 2, || {
        scenario::fast_reentry(drawn(2, false), 2);
    });
}

// Failure delivery on the device: random plans, and every site.

#[test]
fn random_fault_plans_up_to_8x8_random() {
    random("random faults W≤8 G≤8", iterations(), || {
        random_faults(1)
    });
}

#[test]
fn random_fault_plans_up_to_8x8_pct() {
    pct("random faults W≤8 G≤8", iterations(), 3, || {
        random_faults(2)
    });
}

/// The worlds the every-site models run with (three ranks are where `notify_one` bugs start).
fn worlds_for_every_site() -> Vec<usize> {
    Profile::current().pick(vec![2, 3, 4], vec![2, 3])
}

/// Every site, each in its own model: the fault in generation 0 of a ring all-reduce, then two
/// clean generations of other collectives.
fn every_site_then_clean(world: usize, run: impl Fn(&str, Box<dyn Fn() + Send + Sync>)) {
    use ruccl_core::{Algorithm, Collective, ReduceOperation};
    use ruccl_models::script::Call;
    let script = Script::uniform(world, 3, |generation| match generation {
        0 => Call::new(Collective::AllReduce(ReduceOperation::Sum), world + 1).via(Algorithm::Ring),
        1 => Call::new(Collective::AllToAll, 2 * world),
        _ => Call::new(Collective::ReduceScatter(ReduceOperation::Min), 2 * world),
    });
    let steps = 2 * (world - 1);
    for spec in every_site(world, steps, 0) {
        let name = format!("fault at {spec} W={world} G=3");
        let script = script.clone();
        run(
            &name,
            Box::new(move || scenario::fault_then_clean(script.clone(), spec)),
        );
    }
}

#[test]
fn a_fault_at_every_site_then_clean_generations_random() {
    let per_site = Profile::current().pick(1_000, 3);
    for world in worlds_for_every_site() {
        every_site_then_clean(world, |name, model| {
            random(name, per_site, model);
        });
    }
}

#[test]
fn a_fault_at_every_site_then_clean_generations_pct() {
    let per_site = Profile::current().pick(1_000, 3);
    for world in worlds_for_every_site() {
        every_site_then_clean(world, |name, model| {
            pct(name, per_site, 2, model);
        });
    }
}

// Abort: racing the ranks, the first wins, during the schedule, between generations in flight,
// deposits released.

#[test]
fn abort_racing_the_ranks_random() {
    random("abort racing W≤8 G≤8", iterations(), || {
        scenario::abort_racing_the_ranks(drawn(1, true), &["racing"]);
    });
}

#[test]
fn abort_racing_the_ranks_pct() {
    pct("abort racing W≤8 G≤8", iterations(), 3, || {
        scenario::abort_racing_the_ranks(drawn(2, true), &["racing"]);
    });
}

#[test]
fn first_abort_wins_random() {
    random("two aborts W≤8 G≤8", iterations(), || {
        scenario::abort_racing_the_ranks(drawn(1, false), &["first", "second"]);
    });
}

#[test]
fn first_abort_wins_pct() {
    pct("two aborts W≤8 G≤8", iterations(), 3, || {
        scenario::abort_racing_the_ranks(drawn(2, false), &["first", "second"]);
    });
}

#[test]
fn abort_while_the_schedule_runs_random() {
    random("abort during the schedule W≤8", iterations(), || {
        scenario::abort_while_the_schedule_runs(thread_rng().gen_range(2..=8));
    });
}

#[test]
fn abort_while_the_schedule_runs_pct() {
    pct("abort during the schedule W≤8", iterations(), 3, || {
        scenario::abort_while_the_schedule_runs(thread_rng().gen_range(2..=8));
    });
}

#[test]
fn abort_between_the_generations_in_flight_random() {
    random("abort with two generations in flight", iterations(), || {
        scenario::abort_between_the_generations_in_flight();
    });
}

#[test]
fn abort_between_the_generations_in_flight_pct() {
    pct(
        "abort with two generations in flight",
        iterations(),
        3,
        || {
            scenario::abort_between_the_generations_in_flight();
        },
    );
}

#[test]
fn an_abort_releases_the_deposits_random() {
    random("abort releases the deposits W≤8", iterations(), || {
        scenario::abort_releases_the_deposits(thread_rng().gen_range(2..=8));
    });
}

#[test]
fn an_abort_releases_the_deposits_pct() {
    pct("abort releases the deposits W≤8", iterations(), 3, || {
        scenario::abort_releases_the_deposits(thread_rng().gen_range(2..=8));
    });
}

// Timeouts: deadlines on random ranks of a mixed script, racing an abort, in g + 1, during the
// schedule.

#[test]
fn timeouts_up_to_8x8_random() {
    random("timeouts W≤8 G≤8", iterations(), || {
        scenario::timeouts(drawn_with_timeouts(1));
    });
}

#[test]
fn timeouts_up_to_8x8_pct() {
    pct("timeouts W≤8 G≤8", iterations(), 3, || {
        scenario::timeouts(drawn_with_timeouts(2));
    });
}

#[test]
fn timeouts_racing_an_abort_random() {
    random("timeouts racing an abort W≤8 G≤8", iterations(), || {
        scenario::abort_racing_the_ranks(drawn_with_timeouts(1), &["racing"]);
    });
}

#[test]
fn timeouts_racing_an_abort_pct() {
    pct(
        "timeouts racing an abort W≤8 G≤8",
        iterations(),
        3,
        || {
            scenario::abort_racing_the_ranks(drawn_with_timeouts(2), &["racing"]);
        },
    );
}

#[test]
fn timeout_in_the_next_generation_random() {
    random("timeout in generation 1", iterations(), || {
        scenario::timeout_in_the_next_generation();
    });
}

#[test]
fn timeout_in_the_next_generation_pct() {
    pct("timeout in generation 1", iterations(), 3, || {
        scenario::timeout_in_the_next_generation();
    });
}

#[test]
fn timeout_while_the_schedule_runs_random() {
    random("timeout during the schedule W≤8", iterations(), || {
        scenario::timeout_while_the_schedule_runs(thread_rng().gen_range(2..=8));
    });
}

#[test]
fn timeout_while_the_schedule_runs_pct() {
    pct("timeout during the schedule W≤8", iterations(), 3, || {
        scenario::timeout_while_the_schedule_runs(thread_rng().gen_range(2..=8));
    });
}

// RankBusy; registry.

#[test]
fn a_rank_called_twice_at_once_random() {
    random("RankBusy W≤8", iterations(), || {
        scenario::a_rank_called_twice_at_once(thread_rng().gen_range(2..=8));
    });
}

#[test]
fn a_rank_called_twice_at_once_pct() {
    pct("RankBusy W≤8", iterations(), 3, || {
        scenario::a_rank_called_twice_at_once(thread_rng().gen_range(2..=8));
    });
}

#[test]
fn concurrent_lookups_share_one_communicator_random() {
    random("registry lookups", iterations(), || {
        scenario::concurrent_lookups(thread_rng().gen_range(2..=6));
    });
}

#[test]
fn concurrent_lookups_share_one_communicator_pct() {
    pct("registry lookups", iterations(), 3, || {
        scenario::concurrent_lookups(thread_rng().gen_range(2..=6));
    });
}

#[test]
fn an_aborted_communicator_is_replaced_random() {
    random("registry replacement", iterations(), || {
        scenario::aborted_communicator_is_replaced(true, 2);
    });
}

#[test]
fn an_aborted_communicator_is_replaced_pct() {
    pct("registry replacement", iterations(), 3, || {
        scenario::aborted_communicator_is_replaced(true, 2);
    });
}
