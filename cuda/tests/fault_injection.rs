//! The sim crate's fault decorator around the CUDA executor, through a real communicator with a
//! thread per rank: a fault at any site fails every rank of that generation with one error, and
//! the CUDA state left behind (queued copies, half-finished work, cached scratch) does not disturb
//! the next generation, which reduces exactly.
//!
//! Each test runs under the shared [`common::watchdog`] (a hang ends the binary with a `TIMEOUT:`
//! line naming the test), and every collective of the fault trial has a timeout.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

mod common;

use ruccl_core::Algorithm;
use ruccl_cuda::{CudaCollective, CudaConfig, DeviceMap};
use ruccl_sim::fault::{FaultPlan, FaultyDevice, Received, Trial, trial_sum};
use std::time::Duration;

const WORLD: usize = 3;
const LENGTH: usize = 100_003;

/// Three generations of sums with `algorithm` over `plan` (the sim crate's fault trial, checked
/// against its predictor); `seen[generation][rank]`.
fn run(cuda: &CudaCollective, plan: FaultPlan, algorithm: Algorithm) -> Vec<Vec<Received>> {
    let devices = cuda.devices();
    let device = FaultyDevice::new(cuda.clone(), devices.clone(), plan.clone());
    let trial = Trial {
        generations: 3,
        length: LENGTH,
        algorithm,
        timeout: Duration::from_secs(60),
    };
    let seen = trial.run(&device, &devices).unwrap();
    trial.check(&plan, &device, &seen).unwrap();
    seen
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn a_fault_at_any_site_fails_one_generation_on_every_rank_and_the_next_one_is_exact() {
    let _watchdog = common::watchdog("fault_injection");
    let Some(_) = common::gpus("fault_injection") else {
        return;
    };
    let cuda = common::executor(
        DeviceMap::logical(0, WORLD).unwrap(),
        CudaConfig::from_env(),
    );
    let plans = [
        ("prepare:rank=1:gen=1:error", "injected error in prepare"),
        ("prepare:rank=2:gen=1:panic", "injected panic in prepare"),
        ("begin:gen=1:error", "injected error in begin"),
        ("begin:gen=1:panic", "injected panic in begin"),
        (
            "exchange:step=1:gen=1:error",
            "injected error in exchange step 1",
        ),
        (
            "exchange:step=3:gen=1:panic",
            "injected panic in exchange step 3",
        ),
        ("finish:gen=1:error", "injected error in finish"),
        ("finish:gen=1:panic", "injected panic in finish"),
        (
            "outputs:count=2:gen=1",
            "the device returned 2 outputs for 3 ranks",
        ),
        (
            "drop:what=prepared:rank=0:gen=1",
            "injected panic in drop of a prepared input",
        ),
        ("drop:what=work:gen=1", "injected panic in drop of the work"),
        (
            "exchange:step=0:gen=1:error,drop:what=work:gen=1",
            "injected error in exchange step 0",
        ),
    ];
    // Ring has the most steps to fault; the plans that name a step only fault where it exists.
    for (plan, expected) in plans {
        let seen = run(&cuda, plan.parse().unwrap(), Algorithm::Ring);
        for generation in [0, 2] {
            for (rank, output) in seen[generation].iter().enumerate() {
                let sum = trial_sum(WORLD, generation as u64, LENGTH);
                assert!(
                    matches!(output, Received::Output { values, .. } if *values == sum),
                    "`{plan}`: rank {rank}, generation {generation}: {output:?}"
                );
            }
        }
        let Received::Error(first) = &seen[1][0] else {
            panic!(
                "`{plan}`: generation 1 must fail, rank 0 got {:?}",
                seen[1][0]
            );
        };
        assert!(
            first.contains(expected),
            "`{plan}`: `{first}` lacks `{expected}`"
        );
        for (rank, other) in seen[1].iter().enumerate() {
            assert_eq!(other, &seen[1][0], "`{plan}`: rank {rank}");
        }
        println!("`{plan}`: every rank got `{first}`; generations 0 and 2 exact");
    }
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn the_decorator_with_an_empty_plan_is_transparent_to_the_conformance_suite() {
    let _watchdog = common::watchdog("fault_transparent");
    let Some(_) = common::gpus("fault_transparent") else {
        return;
    };
    let map = DeviceMap::logical(0, 4).unwrap();
    let cuda = common::executor(map.clone(), CudaConfig::from_env());
    let device = FaultyDevice::new(cuda, map.devices().collect(), FaultPlan::none());
    let mut config = ruccl_sim::conformance::ConformanceConfig::quick();
    config.worlds.retain(|&world| world <= map.len());
    let report =
        ruccl_sim::conformance::run(&device, |world| common::first_devices(&map, world), &config);
    println!("{report}");
    report.assert_passed();
}

/// A fault in the one step of a direct all-reduce (every rank folds every other's values) fails
/// that generation everywhere, and the next one is exact.
#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn a_fault_in_a_direct_step_fails_one_generation_and_the_next_one_is_exact() {
    let _watchdog = common::watchdog("fault_direct");
    let Some(_) = common::gpus("fault_direct") else {
        return;
    };
    let cuda = common::executor(
        DeviceMap::logical(0, WORLD).unwrap(),
        CudaConfig::from_env(),
    );
    for plan in ["exchange:step=0:gen=1:error", "exchange:step=0:gen=1:panic"] {
        let seen = run(&cuda, plan.parse().unwrap(), Algorithm::Direct);
        let sum = trial_sum(WORLD, 2, LENGTH);
        for output in &seen[2] {
            assert!(
                matches!(output, Received::Output { values, .. } if *values == sum),
                "`{plan}`: {output:?}"
            );
        }
        assert!(matches!(&seen[1][0], Received::Error(_)), "`{plan}`");
    }
}
