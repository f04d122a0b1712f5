//! The sim crate's fault decorator around the CUDA executor, through a real communicator with a
//! thread per rank: a fault at any site fails every rank of that generation with one error, and
//! the CUDA state left behind (queued copies, half-finished work, cached scratch) does not disturb
//! the next generation, which reduces exactly.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

mod common;

use ruccl_core::{DeviceId, NativeCommunicator, ReduceOperation};
use ruccl_cuda::{CudaCollective, CudaConfig, DeviceMap};
use ruccl_sim::fault::{FaultPlan, FaultyDevice};
use ruccl_sim::host::{HostTensors, HostValues};
use std::panic::{AssertUnwindSafe, catch_unwind};

const WORLD: usize = 3;
const LENGTH: usize = 100_003;

type Device = FaultyDevice<CudaCollective>;

fn input(rank: usize, generation: u64) -> HostValues {
    HostValues::I64(
        (0..LENGTH)
            .map(|index| (rank * 100 + index) as i64 + generation as i64 * 1000)
            .collect(),
    )
}

fn sum(generation: u64) -> HostValues {
    HostValues::I64(
        (0..LENGTH)
            .map(|index| {
                (0..WORLD)
                    .map(|rank| (rank * 100 + index) as i64 + generation as i64 * 1000)
                    .sum()
            })
            .collect(),
    )
}

/// Three generations of sums over `plan`; `seen[generation][rank]` is the output or the error.
fn run(cuda: &CudaCollective, plan: FaultPlan) -> Vec<Vec<Result<HostValues, String>>> {
    let devices: Vec<DeviceId> = cuda.devices();
    let device: Device = FaultyDevice::new(cuda.clone(), devices.clone(), plan);
    let communicator = NativeCommunicator::new(devices.clone(), device.clone()).unwrap();
    let per_rank: Vec<Vec<Result<HostValues, String>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(rank, &id)| {
                let (device, communicator) = (&device, &communicator);
                scope.spawn(move || {
                    (0..3)
                        .map(|generation| {
                            let tensor = device.upload(id, &input(rank, generation)).unwrap();
                            let output = communicator
                                .all_reduce_timeout(
                                    rank,
                                    tensor,
                                    ReduceOperation::Sum,
                                    common::COLLECTIVE_TIMEOUT,
                                )
                                .map_err(|error| error.to_string())?;
                            let values = device.download(&output).map_err(|e| e.to_string());
                            // An armed output panics when dropped: contain it here.
                            let _ = catch_unwind(AssertUnwindSafe(move || drop(output)));
                            values
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    (0..3)
        .map(|generation| {
            per_rank
                .iter()
                .map(|seen| seen[generation].clone())
                .collect()
        })
        .collect()
}

#[test]
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
    for (plan, expected) in plans {
        let seen = run(&cuda, plan.parse().unwrap());
        for generation in [0, 2] {
            for (rank, output) in seen[generation].iter().enumerate() {
                assert_eq!(
                    output.as_ref(),
                    Ok(&sum(generation as u64)),
                    "`{plan}`: rank {rank}, generation {generation}"
                );
            }
        }
        let first = seen[1][0].as_ref().expect_err("generation 1 must fail");
        assert!(
            first.contains(expected),
            "`{plan}`: `{first}` lacks `{expected}`"
        );
        for (rank, other) in seen[1].iter().enumerate() {
            assert_eq!(other.as_ref().err(), Some(first), "`{plan}`: rank {rank}");
        }
        println!("`{plan}`: every rank got `{first}`; generations 0 and 2 exact");
    }
}

#[test]
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
