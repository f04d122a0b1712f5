//! Real threads (std): the scenarios of the model checkers on the OS scheduler, and the stress
//! run — W = 8 ranks, 10 000 generations of mixed collectives with slips and random faults.
//! Part of the ordinary `cargo test`. Nothing here depends on timing to pass: the deadlines given
//! (real ones, here) may pass or not — agreement must hold either way. Each test runs
//! [`watched`]: a hang fails it once no rank entered or left a call for 10 s, naming the ranks
//! still waiting and their generations.
#![cfg(not(any(ruccl_loom, ruccl_shuttle)))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ruccl_core::{Algorithm, Collective, ReduceOperation};
use ruccl_models::budget::Profile;
use ruccl_models::quiet::silence_injected_panics;
use ruccl_models::scenario;
use ruccl_models::script::{Call, Script, Slip, random_script, random_timeouts};
use ruccl_models::watch::watched;
use ruccl_sim::FaultPlan;
use ruccl_sim::fault::{RandomPlan, every_site};
use std::time::Duration;

/// A seeded source of choices for [`random_script`]: `draw(n)` in `0..n`.
fn seeded(seed: u64) -> impl FnMut(usize) -> usize {
    let mut state = seed;
    move |n| {
        // SplitMix64.
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        usize::try_from((z ^ (z >> 31)) % n as u64).unwrap_or(0)
    }
}

/// Agreement, reuse, failure delivery (mismatches of every kind, invalid collectives, device
/// faults at random sites), no hang or poison, resources: W = 8, 10 000 generations of mixed
/// collectives and algorithms, one generation in 25 slipped, about one in 25 with a fault.
#[test]
fn eight_ranks_through_ten_thousand_mixed_generations_with_slips_and_faults_all_agree() {
    let _watched = watched();
    silence_injected_panics();
    let generations = Profile::current().pick(10_000, 1_000);
    let mut draw = seeded(0x5EED_0017);
    let script = random_script(&mut draw, 8, generations, 25);
    let plan = FaultPlan::random(RandomPlan {
        seed: 0x5EED_0004,
        world: 8,
        steps: script.max_steps(),
        generations: generations as u64,
        faults: generations / 25,
    });
    scenario::faults_from_plan(script, plan);
}

/// Agreement, reuse, no hang, resources: every world up to 8, 50 generations of mixed
/// collectives, no slip.
#[test]
fn mixed_collectives_succeed_on_every_rank_for_every_world() {
    let _watched = watched();
    let mut draw = seeded(1);
    for world in 1..=8 {
        scenario::run_script(random_script(&mut draw, world, 50, 0));
    }
}

/// Reuse: a rank running ahead into g + 1 disturbs nothing.
#[test]
fn a_rank_running_ahead_into_the_next_generation_disturbs_nothing() {
    let _watched = watched();
    let mut draw = seeded(2);
    for world in 2..=8 {
        scenario::fast_reentry(random_script(&mut draw, world, 50, 0), 3);
    }
}

/// Failure delivery: every slip (mismatch of kind, operation, root, algorithm, length, element
/// type; invalid root; indivisible reduce-scatter) on every collective gives every rank the same
/// error, and the next generation works.
#[test]
fn every_slip_on_every_collective_fails_every_rank_alike() {
    let _watched = watched();
    for world in 2..=6 {
        let collectives = [
            Collective::AllReduce(ReduceOperation::Product),
            Collective::ReduceScatter(ReduceOperation::Sum),
            Collective::AllGather,
            Collective::Broadcast { root: world - 1 },
        ];
        for collective in collectives {
            for slip in Slip::ALL {
                for rank in [0, world - 1] {
                    let script = Script::uniform(world, 2, |_| Call::new(collective, 2 * world))
                        .slip(0, rank, slip);
                    scenario::run_script(script);
                }
            }
        }
    }
}

/// Failure delivery at every site of the fault decorator, then clean generations of other
/// collectives; no hang or poison (panicking drops included); resources.
#[test]
fn a_fault_at_every_site_is_delivered_to_every_rank_and_the_next_generations_work() {
    let _watched = watched();
    silence_injected_panics();
    for world in 1..=5 {
        let script = Script::uniform(world, 3, |generation| match generation {
            0 => Call::new(Collective::AllReduce(ReduceOperation::Sum), world + 1)
                .via(Algorithm::Ring),
            1 => Call::new(Collective::Broadcast { root: 0 }, 3),
            _ => Call::new(Collective::AllGather, 1),
        });
        for spec in every_site(world, 2 * (world - 1), 0) {
            scenario::fault_then_clean(script.clone(), spec);
        }
    }
}

/// Abort: racing the ranks (one aborter, then two), sticky, never splitting a generation;
/// resources.
#[test]
fn abort_racing_the_ranks_is_sticky_and_never_splits_a_generation() {
    let _watched = watched();
    let mut draw = seeded(3);
    for round in 0..Profile::current().pick(300, 50) {
        let world = 1 + round % 8;
        let script = random_script(&mut draw, world, 3, 3);
        scenario::abort_racing_the_ranks(script, &["racing"]);
        let script = random_script(&mut draw, world, 2, 0);
        scenario::abort_racing_the_ranks(script, &["first", "second"]);
    }
}

/// Abort wins over a running schedule; its outputs are released.
#[test]
fn abort_while_the_schedule_runs_discards_the_outputs() {
    let _watched = watched();
    for world in 2..=8 {
        scenario::abort_while_the_schedule_runs(world);
    }
}

/// Abort between the two generations in flight: the published one whole, the next aborted.
#[test]
fn abort_between_the_generations_in_flight_delivers_the_published_one_whole() {
    let _watched = watched();
    for _ in 0..Profile::current().pick(300, 50) {
        scenario::abort_between_the_generations_in_flight();
    }
}

/// Abort releases the deposits of the generation being collected.
#[test]
fn an_abort_releases_the_deposits_of_the_generation_being_collected() {
    let _watched = watched();
    silence_injected_panics();
    for round in 0..Profile::current().pick(300, 50) {
        scenario::abort_releases_the_deposits(2 + round % 7);
    }
}

/// Timeouts (real deadlines of 1 ms and less, which pass or not): agreement on every
/// generation, sticky `TimedOut`, resources — alone and racing an abort.
#[test]
fn real_deadlines_never_split_a_generation() {
    let _watched = watched();
    let mut draw = seeded(4);
    for round in 0..Profile::current().pick(300, 50) {
        let world = 1 + round % 8;
        let timeout = Duration::from_micros(1 + (round as u64 % 4) * 300);
        let script = random_script(&mut draw, world, 4, 4);
        let script = random_timeouts(&mut draw, script, 2, timeout);
        scenario::timeouts(script.clone());
        scenario::abort_racing_the_ranks(script, &["racing"]);
    }
}

/// A timeout of a rank waiting in g + 1; a deadline passing while the schedule runs.
#[test]
fn deadlines_in_the_next_generation_and_during_the_schedule_stop_every_rank_alike() {
    let _watched = watched();
    for world in 2..=8 {
        scenario::timeout_in_the_next_generation();
        scenario::timeout_while_the_schedule_runs(world);
    }
}

/// A second concurrent call of a rank is refused with `RankBusy` and disturbs nothing.
#[test]
fn a_rank_called_twice_at_once_is_refused_once_and_disturbs_nothing() {
    let _watched = watched();
    for round in 0..Profile::current().pick(300, 50) {
        scenario::a_rank_called_twice_at_once(2 + round % 7);
    }
}

/// Registry: one communicator per list, aborted ones replaced.
#[test]
fn the_registry_shares_one_communicator_per_list_and_replaces_aborted_ones() {
    let _watched = watched();
    for round in 0..Profile::current().pick(300, 50) {
        scenario::concurrent_lookups(2 + round % 5);
        scenario::aborted_communicator_is_replaced(round % 4 == 0, 2);
    }
}

/// Resources: the census the scenarios end with has teeth — an output leaked (never dropped) is
/// reported as still alive.
#[test]
#[should_panic(expected = "property resources violated")]
fn a_leaked_output_is_caught_by_the_census() {
    let _watched = watched();
    use ruccl_core::{DeviceId, NativeCommunicator};
    use ruccl_models::device::{ModelDevice, census_check, lean};
    let device = lean();
    let communicator = NativeCommunicator::new(vec![DeviceId::new(0)], device.clone()).unwrap();
    let tensor = device.tensor(DeviceId::new(0), ruccl_core::ElementType::I64, vec![1, 2]);
    let output = communicator
        .all_reduce(0, tensor, ReduceOperation::Sum)
        .unwrap();
    std::mem::forget(output);
    census_check(&device, "after a leak");
}
