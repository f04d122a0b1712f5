//! Real threads (std): the scenarios of the model checkers on the OS scheduler, and the stress
//! run — W = 8 ranks, 10 000 generations, random faults. Part of the ordinary `cargo test`;
//! nothing here depends on timing (a hang would hang the test, never fail it by the clock).
#![cfg(not(any(ruccl_loom, ruccl_shuttle)))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ruccl_models::budget::Profile;
use ruccl_models::quiet::silence_injected_panics;
use ruccl_models::scenario::{self, Shape};
use ruccl_sim::FaultPlan;
use ruccl_sim::fault::RandomPlan;
use ruccl_sim::fault::every_site;

#[test]
fn eight_ranks_through_ten_thousand_generations_with_random_faults_all_agree() {
    silence_injected_panics();
    let generations = Profile::current().pick(10_000, 1_000);
    let shape = Shape {
        world: 8,
        generations,
        length: 11,
    };
    // About one generation in twenty-five has a fault; one has mismatched operations.
    let plan = FaultPlan::random(RandomPlan {
        seed: 0x5EED_0004,
        world: shape.world,
        generations: generations as u64,
        faults: generations / 25,
    });
    scenario::faults_from_plan(shape, plan, Some((generations / 2, 3)));
}

#[test]
fn many_ranks_and_generations_succeed_on_real_threads() {
    for world in 1..=8 {
        scenario::all_succeed(Shape::new(world, 50));
    }
}

#[test]
fn a_rank_racing_into_the_next_generation_disturbs_nothing() {
    for world in 2..=8 {
        scenario::fast_reentry(Shape::new(world, 50), 3);
    }
}

#[test]
fn a_fault_at_every_site_is_delivered_to_every_rank_and_the_next_generations_work() {
    silence_injected_panics();
    for world in 1..=5 {
        for spec in every_site(world, 0) {
            scenario::fault_then_clean(Shape::new(world, 3), spec);
        }
    }
}

#[test]
fn mismatched_operations_fail_every_rank_alike() {
    for world in 2..=8 {
        scenario::mismatched_operations(Shape::new(world, 3));
    }
}

#[test]
fn abort_racing_the_ranks_is_sticky_and_never_splits_a_generation() {
    for round in 0..Profile::current().pick(300, 50) {
        let world = 1 + round % 8;
        scenario::abort_racing_the_ranks(Shape::new(world, 3), &["racing"]);
        scenario::abort_racing_the_ranks(Shape::new(world, 2), &["first", "second"]);
    }
}

#[test]
fn abort_while_the_ring_runs_discards_the_ring() {
    for world in 2..=8 {
        scenario::abort_while_the_ring_runs(world);
    }
}

#[test]
fn the_registry_shares_one_communicator_per_list_and_replaces_aborted_ones() {
    for round in 0..Profile::current().pick(300, 50) {
        scenario::concurrent_lookups(2 + round % 5);
        scenario::aborted_communicator_is_replaced(round % 4 == 0, 2);
    }
}

#[test]
fn an_abort_releases_the_deposits_of_the_generation_being_collected() {
    silence_injected_panics();
    for round in 0..Profile::current().pick(300, 50) {
        scenario::abort_releases_the_deposits(2 + round % 7);
    }
}
