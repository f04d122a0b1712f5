//! shuttle: random and PCT schedules of the scenarios at scale — up to 8 ranks and 8
//! generations, with seeded random fault plans. Run with `cargo shuttle` (see models/README.md).
//!
//! Every model draws its shape and its fault plan from shuttle's own random source, so the
//! schedule a failure prints (pass it to `shuttle::replay`) reproduces the plan too.
#![cfg(ruccl_shuttle)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ruccl_models::budget::Profile;
use ruccl_models::checkers::shuttle::{pct, random};
use ruccl_models::scenario::{self, Shape};
use ruccl_sim::FaultPlan;
use ruccl_sim::fault::RandomPlan;
use ruccl_sim::fault::every_site;
use shuttle::rand::{Rng, thread_rng};

/// Iterations per model: thousands in the full profile.
fn iterations() -> usize {
    Profile::current().pick(20_000, 30)
}

/// A shape drawn from shuttle's random source: W in 1..=8 (2..=8 with `min_world = 2`), G in
/// 1..=8, and a length from 0 to 2W + 1 (so n < W and n = 0 come up).
fn drawn_shape(min_world: usize) -> Shape {
    let mut rng = thread_rng();
    let world = rng.gen_range(min_world..=8);
    Shape {
        world,
        generations: rng.gen_range(1..=8),
        length: rng.gen_range(0..=2 * world + 1),
    }
}

/// A drawn shape (at least `min_world` ranks), a random fault plan of up to three faults, and in
/// one model in four a mismatched operation somewhere.
fn random_faults(min_world: usize) {
    let shape = drawn_shape(min_world);
    let mut rng = thread_rng();
    let plan = FaultPlan::random(RandomPlan {
        seed: rng.r#gen(),
        world: shape.world,
        generations: shape.generations as u64,
        faults: rng.gen_range(0..=3),
    });
    let mismatch = (shape.world > 1 && rng.gen_bool(0.25)).then(|| {
        (
            rng.gen_range(0..shape.generations),
            rng.gen_range(0..shape.world),
        )
    });
    scenario::faults_from_plan(shape, plan, mismatch);
}

#[test]
fn success_up_to_8x8_random() {
    random("success W≤8 G≤8", iterations(), || {
        scenario::all_succeed(drawn_shape(1));
    });
}

#[test]
fn success_up_to_8x8_pct() {
    // PCT needs concurrency: at least two ranks.
    pct("success W≤8 G≤8", iterations(), 3, || {
        scenario::all_succeed(drawn_shape(2));
    });
}

#[test]
fn fast_reentry_up_to_8x8_random() {
    random("fast re-entry W≤8 G≤8", iterations(), || {
        scenario::fast_reentry(drawn_shape(2), 2);
    });
}

#[test]
fn fast_reentry_up_to_8x8_pct() {
    pct("fast re-entry W≤8 G≤8", iterations(), 2, || {
        scenario::fast_reentry(drawn_shape(2), 2);
    });
}

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

/// Every site, each in its own model: the fault in generation 0, then two clean generations.
fn every_site_then_clean(world: usize, run: impl Fn(&str, Box<dyn Fn() + Send + Sync>)) {
    for spec in every_site(world, 0) {
        let name = format!("fault at {spec} W={world} G=3");
        run(
            &name,
            Box::new(move || scenario::fault_then_clean(Shape::new(world, 3), spec)),
        );
    }
}

#[test]
fn a_fault_at_every_site_then_clean_generations_random() {
    let per_site = Profile::current().pick(500, 3);
    for world in worlds_for_every_site() {
        every_site_then_clean(world, |name, model| {
            random(name, per_site, model);
        });
    }
}

#[test]
fn a_fault_at_every_site_then_clean_generations_pct() {
    let per_site = Profile::current().pick(500, 3);
    for world in worlds_for_every_site() {
        every_site_then_clean(world, |name, model| {
            pct(name, per_site, 2, model);
        });
    }
}

#[test]
fn mismatched_operations_random() {
    random("mismatch W≤8 G≤8", iterations(), || {
        scenario::mismatched_operations(drawn_shape(2));
    });
}

#[test]
fn mismatched_operations_pct() {
    pct("mismatch W≤8 G≤8", iterations(), 3, || {
        scenario::mismatched_operations(drawn_shape(2));
    });
}

#[test]
fn abort_racing_the_ranks_random() {
    random("abort racing W≤8 G≤8", iterations(), || {
        scenario::abort_racing_the_ranks(drawn_shape(1), &["racing"]);
    });
}

#[test]
fn abort_racing_the_ranks_pct() {
    pct("abort racing W≤8 G≤8", iterations(), 3, || {
        scenario::abort_racing_the_ranks(drawn_shape(2), &["racing"]);
    });
}

#[test]
fn first_abort_wins_random() {
    random("two aborts W≤8 G≤8", iterations(), || {
        scenario::abort_racing_the_ranks(drawn_shape(1), &["first", "second"]);
    });
}

#[test]
fn first_abort_wins_pct() {
    pct("two aborts W≤8 G≤8", iterations(), 3, || {
        scenario::abort_racing_the_ranks(drawn_shape(2), &["first", "second"]);
    });
}

#[test]
fn abort_while_the_ring_runs_random() {
    random("abort during the ring W≤8", iterations(), || {
        scenario::abort_while_the_ring_runs(thread_rng().gen_range(2..=8));
    });
}

#[test]
fn abort_while_the_ring_runs_pct() {
    pct("abort during the ring W≤8", iterations(), 3, || {
        scenario::abort_while_the_ring_runs(thread_rng().gen_range(2..=8));
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
