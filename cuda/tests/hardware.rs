//! The executor on real GPUs: exact results for every collective (all eight kinds), algorithm,
//! type and operation on every map, bitwise agreement across ranks and with the simulated
//! device, the ordering of hand-made steps (staged sources, transfers that land elsewhere, local
//! copies and folds, folds beyond one launch's fan-in), generations chained on
//! the device, the buffer cache, out of place, the copy-bandwidth baseline, validation, setup,
//! the caller's current context, waits that deferred errors cannot skip, and the topology report.
//!
//! Each test prints `SKIP: no CUDA driver ...` and passes where there is no GPU (unless
//! `RUCCL_CUDA_REQUIRE_HARDWARE=1` or `RUCCL_CUDA_REQUIRE_GPU=1`; under the first, any other
//! skip fails too). Each runs under a watchdog, and every collective has a timeout.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

mod common;

use cudarc::driver::sys::CUresult;
use cudarc::driver::{DriverError, result};
use ruccl_core::{
    Algorithm, Collective, DeviceId, NativeCollectiveDevice, NativeCommunicator, Plan,
    ReduceOperation, Step, StepViolation, Transfer,
};
use ruccl_cuda::kernels::{
    EMBEDDED_PTX, FOLD_MAX, nvrtc_available, nvrtc_library, nvrtc_version, ptx_isa_version,
};
use ruccl_cuda::{
    ContextKind, ContextPolicy, CudaCollective, CudaConfig, CudaError, DeviceMap, DriverCode,
    KernelSource, PeerStatus, probe,
};
use ruccl_sim::SimDevice;
use ruccl_sim::host::{ElementType, HostTensors, HostValues};

/// Run `collective` with `algorithm` on `devices` over the exact pattern inputs (`len` elements
/// per rank) and compare every rank's output with the reference, bit for bit.
fn check_collective(
    device: &CudaCollective,
    devices: &[DeviceId],
    (collective, algorithm): (Collective, Algorithm),
    element_type: ElementType,
    len: usize,
) {
    let communicator = NativeCommunicator::new(devices.to_vec(), device.clone()).unwrap();
    let world = devices.len();
    let operation = collective.operation().unwrap_or(ReduceOperation::Sum);
    let inputs: Vec<HostValues> = (0..world)
        .map(|rank| common::input(element_type, operation, rank, len))
        .collect();
    let outputs = common::collective(device, &communicator, &inputs, collective, algorithm);
    for (rank, output) in outputs.into_iter().enumerate() {
        let case =
            format!("W={world} {collective} {algorithm} {element_type} n={len}: rank {rank}");
        let output = output.unwrap_or_else(|error| panic!("{case} failed: {error}"));
        let expected = common::collective_reference(collective, element_type, world, rank, len);
        assert!(
            common::bits(&output) == common::bits(&expected),
            "{case} differs from the reference"
        );
    }
}

fn check_all_reduce(
    device: &CudaCollective,
    devices: &[DeviceId],
    element_type: ElementType,
    operation: ReduceOperation,
    len: usize,
) {
    let all_reduce = (Collective::AllReduce(operation), Algorithm::Auto);
    check_collective(device, devices, all_reduce, element_type, len);
}

/// The report `gpu-check.sh` prints as the run's topology: one `TOPOLOGY:` line per map this
/// machine offers (GPUs, the context each logical rank got, peer access), plus the driver and
/// the kernel sources. Under `RUCCL_CUDA_REQUIRE_HARDWARE=1` the executor is built with
/// separate contexts required, so a refused context fails here first.
#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn the_topology_report_names_gpus_contexts_and_peer_access() {
    let _watchdog = common::watchdog("topology");
    let driver = match probe() {
        Ok(driver) => driver,
        Err(error) => {
            println!("TOPOLOGY: no usable GPU ({error})");
            common::gpus("topology");
            return;
        }
    };
    let nvrtc = match nvrtc_version() {
        Some(version) => format!(
            "NVRTC {version} at {}",
            nvrtc_library().unwrap_or_else(|| "an unknown path".to_owned())
        ),
        None => "no NVRTC".to_owned(),
    };
    let isa = ptx_isa_version(EMBEDDED_PTX)
        .map_or("?".to_owned(), |(major, minor)| format!("{major}.{minor}"));
    println!(
        "TOPOLOGY: driver CUDA {} ({}), {} GPU(s); embedded PTX ISA {isa}; {nvrtc}",
        driver.version_string(),
        driver.library,
        driver.device_count
    );
    let config = CudaConfig::from_env();
    if let Ok(device) =
        CudaCollective::with_config(DeviceMap::logical(0, 1).unwrap(), config.clone())
    {
        println!(
            "KERNELS: {} loaded by the driver (cuModuleLoadData); NVRTC fallback: {}",
            device.kernel_origin(),
            if nvrtc_available() {
                "available"
            } else {
                "unavailable"
            }
        );
    }
    println!(
        "CONTEXTS: policy {:?} ({}); a context per rank is ContextPolicy::Separate (RUCCL_CUDA_CONTEXTS=separate)",
        config.contexts,
        if config.contexts == ContextPolicy::SharedPrimary {
            "ranks on one GPU share its primary context, a stream each"
        } else {
            "a context per rank"
        }
    );
    let mut maps = vec![(
        "logical",
        DeviceMap::logical(0, common::logical_ranks()).unwrap(),
    )];
    if driver.device_count >= 2 {
        maps.push((
            "one per GPU",
            DeviceMap::one_per_gpu(driver.device_count).unwrap(),
        ));
    }
    for (name, map) in maps {
        let device = common::executor(map, CudaConfig::from_env());
        println!("TOPOLOGY: {name}: {}", device.topology().summary());
        if common::hardware_required() {
            for lane in &device.topology().lanes {
                assert!(
                    !matches!(&lane.context, ContextKind::SharedPrimary { reason } if reason.starts_with("cuCtxCreate refused")),
                    "{}: {}",
                    lane.device,
                    lane.context
                );
            }
        }
    }
}

/// What the hardware run covers, checked without a GPU: every kind of collective (all eight),
/// each with its root inside the world, for every world the maps seat. Prints the list as a
/// `COLLECTIVES:` line, which the check script's summary shows.
#[test]
fn the_hardware_run_covers_every_kind_of_collective() {
    for world in 1..=16 {
        let covered = common::collectives(world, ReduceOperation::Max);
        for kind in Collective::KINDS {
            assert!(
                covered.iter().any(|collective| collective
                    .with_root(0)
                    .with_operation(ReduceOperation::Sum)
                    == kind),
                "W={world}: {kind} is not run"
            );
        }
        for collective in covered {
            assert!(
                collective.root().is_none_or(|root| root < world),
                "{collective}"
            );
        }
    }
    let names: Vec<String> = common::collectives(8, ReduceOperation::Sum)
        .iter()
        .map(ToString::to_string)
        .collect();
    println!("COLLECTIVES: at W = 8: {}", names.join(", "));
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn every_collective_algorithm_type_and_operation_is_exact_on_every_map() {
    let _watchdog = common::watchdog("every_collective_algorithm_type_and_operation");
    let Some(gpus) = common::gpus("every_collective_algorithm_type_and_operation") else {
        return;
    };
    for (name, map) in common::maps(gpus) {
        let device = common::executor(map.clone(), CudaConfig::from_env());
        println!("{name}:\n{}", device.topology());
        let mut worlds = vec![1, 2, 3, map.len()];
        worlds.retain(|&world| world <= map.len());
        worlds.dedup();
        for world in worlds {
            let devices = common::first_devices(&map, world);
            for algorithm in common::algorithms(world) {
                for element_type in ElementType::ALL {
                    for operation in ReduceOperation::ALL {
                        for collective in common::collectives(world, operation) {
                            if collective.operation().is_none() && operation != ReduceOperation::Sum
                            {
                                continue; // only the reducing collectives take an operation
                            }
                            for len in [0, 1, world + 1, 1000, 65_537] {
                                let len = common::input_len(collective, world, len);
                                let case = (collective, algorithm);
                                check_collective(&device, &devices, case, element_type, len);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Property 8 on hardware: every rank's all-reduce output is the same bits, for float inputs
/// whose sums and products round, with every algorithm — and the same bits as the simulated
/// device's, which folds in the same order and rounds the same way (Mean included: both divide).
#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn all_reduce_outputs_agree_bit_for_bit_across_ranks_and_with_the_simulated_device() {
    let test = "bitwise_agreement";
    let _watchdog = common::watchdog(test);
    let Some(gpus) = common::gpus(test) else {
        return;
    };
    let map = DeviceMap::logical(0, common::logical_ranks()).unwrap();
    let device = common::executor(map.clone(), CudaConfig::from_env());
    let sim = SimDevice::new();
    let len = 4099;
    for world in [2, 3, map.len()] {
        let devices = common::first_devices(&map, world);
        let sim_devices: Vec<DeviceId> = (0..world as u32).map(DeviceId::new).collect();
        let communicator = NativeCommunicator::new(devices.clone(), device.clone()).unwrap();
        let sim_communicator = NativeCommunicator::new(sim_devices.clone(), sim.clone()).unwrap();
        for algorithm in common::algorithms(world) {
            for element_type in [
                ElementType::F32,
                ElementType::F64,
                ElementType::F16,
                ElementType::BF16,
            ] {
                for operation in ReduceOperation::ALL {
                    let inputs: Vec<HostValues> = (0..world)
                        .map(|rank| rounding_input(element_type, operation, rank, len))
                        .collect();
                    let collective = Collective::AllReduce(operation);
                    let case = format!("W={world} {algorithm} {element_type} {operation}");
                    let outputs: Vec<Vec<u8>> =
                        common::collective(&device, &communicator, &inputs, collective, algorithm)
                            .into_iter()
                            .map(|output| {
                                common::bits(&output.unwrap_or_else(|e| panic!("{case}: {e}")))
                            })
                            .collect();
                    for (rank, output) in outputs.iter().enumerate() {
                        assert!(
                            output == &outputs[0],
                            "{case}: rank {rank}'s bits differ from rank 0's"
                        );
                    }
                    let reference =
                        sim_all_reduce(&sim, &sim_communicator, &inputs, collective, algorithm);
                    assert!(
                        outputs[0] == reference,
                        "{case}: the GPU's bits differ from the simulated device's"
                    );
                }
            }
        }
    }
    println!("{gpus} GPU(s): every rank and the simulated device agree bit for bit");
}

/// The integer arithmetic on hardware: sums and products that wrap (inputs across each type's
/// whole range, its extremes included), min and max in the type's own order (an unsigned type's
/// top half is not negative), and `Mean` dividing the wrapped sum toward zero — every rank's
/// output the same bits as the simulated device's, for every integer type, operation and
/// algorithm.
#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn integer_all_reduce_wraps_and_truncates_bit_for_bit_with_the_simulated_device() {
    let test = "integer_wrapping";
    let _watchdog = common::watchdog(test);
    let Some(_) = common::gpus(test) else {
        return;
    };
    let map = DeviceMap::logical(0, common::logical_ranks()).unwrap();
    let device = common::executor(map.clone(), CudaConfig::from_env());
    let sim = SimDevice::new();
    let len = 4099;
    for world in [2, 3, map.len()] {
        let devices = common::first_devices(&map, world);
        let sim_devices: Vec<DeviceId> = (0..world as u32).map(DeviceId::new).collect();
        let communicator = NativeCommunicator::new(devices.clone(), device.clone()).unwrap();
        let sim_communicator = NativeCommunicator::new(sim_devices.clone(), sim.clone()).unwrap();
        for algorithm in common::algorithms(world) {
            for element_type in ElementType::ALL.into_iter().filter(|t| t.is_integer()) {
                for operation in ReduceOperation::ALL {
                    let inputs: Vec<HostValues> = (0..world)
                        .map(|rank| wrapping_input(element_type, rank, len))
                        .collect();
                    let collective = Collective::AllReduce(operation);
                    let case = format!("W={world} {algorithm} {element_type} {operation}");
                    let outputs: Vec<Vec<u8>> =
                        common::collective(&device, &communicator, &inputs, collective, algorithm)
                            .into_iter()
                            .map(|output| {
                                common::bits(&output.unwrap_or_else(|e| panic!("{case}: {e}")))
                            })
                            .collect();
                    for (rank, output) in outputs.iter().enumerate() {
                        assert!(
                            output == &outputs[0],
                            "{case}: rank {rank}'s bits differ from rank 0's"
                        );
                    }
                    let reference =
                        sim_all_reduce(&sim, &sim_communicator, &inputs, collective, algorithm);
                    assert!(
                        outputs[0] == reference,
                        "{case}: the GPU's bits differ from the simulated device's"
                    );
                }
            }
        }
    }
}

/// Integer inputs across the whole range of `element_type`: the low bits of a mixed 64-bit hash
/// of (rank, index), with the type's extremes (all bits set, only the top bit set, 0, 1) at every
/// 16th index, so sums and products wrap and an unsigned top half meets min and max.
fn wrapping_input(element_type: ElementType, rank: usize, len: usize) -> HostValues {
    let value = |index: usize| -> u64 {
        match index % 16 {
            0 => u64::MAX,
            1 => 1 << (element_type.bits() - 1),
            2 => 0,
            3 => 1,
            _ => {
                let mut x = (rank as u64) << 32 ^ index as u64 ^ 0x9e37_79b9_7f4a_7c15;
                x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                x ^ (x >> 31)
            }
        }
    };
    let values = (0..len).map(value);
    // `as` keeps the low bits: the element's two's complement pattern.
    match element_type {
        ElementType::I8 => HostValues::I8(values.map(|v| v as i8).collect()),
        ElementType::U8 => HostValues::U8(values.map(|v| v as u8).collect()),
        ElementType::I32 => HostValues::I32(values.map(|v| v as i32).collect()),
        ElementType::U32 => HostValues::U32(values.map(|v| v as u32).collect()),
        ElementType::I64 => HostValues::I64(values.map(|v| v as i64).collect()),
        ElementType::U64 => HostValues::U64(values.collect()),
        other => panic!("no integer input for {other}"),
    }
}

/// Inputs whose float reductions round: varied magnitudes and signs (products stay finite).
fn rounding_input(
    element_type: ElementType,
    operation: ReduceOperation,
    rank: usize,
    len: usize,
) -> HostValues {
    let value = |index: usize| -> f64 {
        let x = ((index * 7919 + rank * 104_729) % 9973) as f64 / 9973.0;
        match operation {
            ReduceOperation::Product => (0.75 + 0.5 * x) * if index % 3 == 0 { -1.0 } else { 1.0 },
            _ => (x - 0.5) * 3.0f64.powi((index % 7) as i32 - 3),
        }
    };
    let values = (0..len).map(value);
    match element_type {
        ElementType::F32 => HostValues::F32(values.map(|v| v as f32).collect()),
        ElementType::F64 => HostValues::F64(values.collect()),
        ElementType::F16 => HostValues::F16(values.map(half::f16::from_f64).collect()),
        ElementType::BF16 => HostValues::BF16(values.map(half::bf16::from_f64).collect()),
        other => panic!("no float input for {other}"),
    }
}

/// The simulated device's all-reduce of `inputs` (rank 0's output bytes).
fn sim_all_reduce(
    sim: &SimDevice,
    communicator: &NativeCommunicator<SimDevice>,
    inputs: &[HostValues],
    collective: Collective,
    algorithm: Algorithm,
) -> Vec<u8> {
    let options = ruccl_core::CollectiveOptions::default()
        .with_algorithm(algorithm)
        .with_timeout(common::COLLECTIVE_TIMEOUT);
    let outputs: Vec<HostValues> = std::thread::scope(|scope| {
        let handles: Vec<_> = communicator
            .devices()
            .iter()
            .zip(inputs)
            .enumerate()
            .map(|(rank, (&id, values))| {
                scope.spawn(move || {
                    let tensor = sim.upload(id, values).unwrap();
                    let output = communicator
                        .collective(rank, tensor, collective, options)
                        .unwrap();
                    sim.download(&output).unwrap()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().unwrap())
            .collect()
    });
    common::bits(&outputs[0])
}

/// A direct all-reduce and reduce over more ranks than one fold launch takes: the fold is
/// chained through the accumulator and must still be exact (ranks share the primary context here, on purpose:
/// the chaining is what is checked, not the contexts).
#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn a_fold_over_more_ranks_than_one_launch_takes_is_chained_exactly() {
    let test = "chained_fold";
    let _watchdog = common::watchdog(test);
    let Some(_) = common::gpus(test) else {
        return;
    };
    let world = FOLD_MAX + 3;
    let device = common::executor(
        DeviceMap::logical(0, world).unwrap(),
        CudaConfig::from_env().with_contexts(ContextPolicy::SharedPrimary),
    );
    let devices = device.devices();
    for element_type in [
        ElementType::I64,
        ElementType::F32,
        ElementType::BF16,
        ElementType::U8,
    ] {
        for operation in ReduceOperation::ALL {
            for collective in [
                Collective::AllReduce(operation),
                Collective::Reduce {
                    op: operation,
                    root: world / 2,
                },
            ] {
                let case = (collective, Algorithm::Direct);
                check_collective(&device, &devices, case, element_type, 1023);
            }
        }
    }
}

/// Steady state allocates nothing: after the first generation of a shape, further generations of
/// it (in place and out of place; all-reduce, all-gather, reduce-scatter, a reduce whose
/// non-roots receive nothing, an all-to-all that stages every source) are served from each
/// device's cache.
#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn steady_state_generations_allocate_no_device_memory() {
    let test = "steady_state_cache";
    let _watchdog = common::watchdog(test);
    let Some(_) = common::gpus(test) else {
        return;
    };
    for in_place in [true, false] {
        let device = common::executor(
            DeviceMap::logical(0, 4).unwrap(),
            CudaConfig::from_env().with_in_place(in_place),
        );
        let devices = device.devices();
        for (collective, algorithm) in [
            (Collective::AllReduce(ReduceOperation::Sum), Algorithm::Ring),
            (
                Collective::AllReduce(ReduceOperation::Max),
                Algorithm::Direct,
            ),
            (Collective::AllGather, Algorithm::Ring),
            (
                Collective::ReduceScatter(ReduceOperation::Sum),
                Algorithm::HalvingDoubling,
            ),
            (
                Collective::Reduce {
                    op: ReduceOperation::Sum,
                    root: 1,
                },
                Algorithm::Ring,
            ),
            (Collective::AllToAll, Algorithm::Direct),
        ] {
            let misses = || -> Vec<u64> {
                devices
                    .iter()
                    .map(|&id| device.cache_stats(id).unwrap().misses)
                    .collect()
            };
            let case = (collective, algorithm);
            check_collective(&device, &devices, case, ElementType::F32, 4096);
            let after_first = misses();
            for _ in 0..4 {
                check_collective(&device, &devices, case, ElementType::F32, 4096);
            }
            assert_eq!(
                misses(),
                after_first,
                "{collective} {algorithm}, in place {in_place}: later generations allocated"
            );
        }
        let stats = device.cache_stats(devices[0]).unwrap();
        println!("in place {in_place}: rank 0's cache {stats:?}");
        device.trim_caches();
        assert_eq!(device.cache_stats(devices[0]).unwrap().cached_bytes, 0);
    }
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn the_copy_bandwidth_baseline_is_measured_on_each_gpu() {
    let test = "copy_bandwidth";
    let _watchdog = common::watchdog(test);
    let Some(gpus) = common::gpus(test) else {
        return;
    };
    let device = common::executor(
        DeviceMap::one_per_gpu(gpus).unwrap(),
        CudaConfig::from_env(),
    );
    for gpu in 0..gpus {
        let measured = device.copy_bandwidth(gpu, 256 << 20, 20).unwrap();
        println!(
            "BANDWIDTH: GPU {gpu}: device-to-device copy {:.1} GB/s",
            measured.gb_per_second()
        );
        assert!(measured.gb_per_second() > 1.0, "{measured:?}");
    }
    assert!(matches!(
        device.copy_bandwidth(gpus, 1 << 20, 1),
        Err(CudaError::UnknownGpu { .. })
    ));
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn a_large_tensor_reduces_exactly_across_all_ranks() {
    let _watchdog = common::watchdog("a_large_tensor");
    let Some(gpus) = common::gpus("a_large_tensor") else {
        return;
    };
    for (_, map) in common::maps(gpus) {
        let device = common::executor(map.clone(), CudaConfig::from_env());
        let devices = device.devices();
        check_all_reduce(
            &device,
            &devices,
            ElementType::F32,
            ReduceOperation::Sum,
            1 << 24,
        );
        check_all_reduce(
            &device,
            &devices,
            ElementType::BF16,
            ReduceOperation::Mean,
            (1 << 22) + 3,
        );
    }
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn outputs_feed_the_next_generation_on_the_device() {
    let _watchdog = common::watchdog("outputs_feed_the_next_generation");
    let Some(gpus) = common::gpus("outputs_feed_the_next_generation") else {
        return;
    };
    const GENERATIONS: u32 = 6;
    for (name, map) in common::maps(gpus) {
        let device = common::executor(map, CudaConfig::from_env());
        let devices = device.devices();
        let world = devices.len() as i64;
        let communicator = NativeCommunicator::new(devices.clone(), device.clone()).unwrap();
        let len = 4099;
        let results: Vec<HostValues> = std::thread::scope(|scope| {
            let handles: Vec<_> = devices
                .iter()
                .enumerate()
                .map(|(rank, &id)| {
                    let (device, communicator) = (&device, &communicator);
                    scope.spawn(move || {
                        let values =
                            HostValues::I64((0..len).map(|i| (i * 3 + rank) as i64).collect());
                        let mut tensor = device.upload(id, &values).unwrap();
                        for _ in 0..GENERATIONS {
                            tensor = communicator
                                .all_reduce_timeout(
                                    rank,
                                    tensor,
                                    ReduceOperation::Sum,
                                    common::COLLECTIVE_TIMEOUT,
                                )
                                .unwrap();
                        }
                        device.download(&tensor).unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let scale = world.pow(GENERATIONS - 1);
        let expected = HostValues::I64(
            (0..len)
                .map(|i| (0..world).map(|rank| (i * 3) as i64 + rank).sum::<i64>() * scale)
                .collect(),
        );
        for (rank, result) in results.iter().enumerate() {
            assert_eq!(result, &expected, "{name}: rank {rank}");
        }
    }
}

/// Drive `begin`, two hand-made steps and `finish`: every rank sends its *whole* buffer while its
/// predecessor overwrites (then folds into) that same buffer. If a destination were written
/// before its own send had read it (a staged source missed, a fold before the sends), the
/// rotation would come out wrong.
#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn sends_read_the_pre_step_state_even_when_every_range_overlaps() {
    let _watchdog = common::watchdog("sends_read_the_pre_step_state");
    let Some(gpus) = common::gpus("sends_read_the_pre_step_state") else {
        return;
    };
    for (name, map) in common::maps(gpus) {
        let device = common::executor(map, CudaConfig::from_env());
        let devices = device.devices();
        let world = devices.len();
        let len = 1 << 22;
        let value = |rank: usize, i: usize| (rank * 1_000_003 + i % 9_973) as i32;
        let inputs: Vec<HostValues> = (0..world)
            .map(|rank| HostValues::I32((0..len).map(|i| value(rank, i)).collect()))
            .collect();
        // Every rank overwrites its successor's whole buffer (every source is also written:
        // all staged), then folds its predecessor's whole buffer into its own.
        let rotation = |combine| Step {
            combine,
            transfers: (0..world)
                .map(|from| Transfer::new(from, (from + 1) % world, 0..len))
                .collect(),
        };
        let steps = [rotation(false), rotation(true)];
        let outputs = run_steps(&device, &devices, &ring_plan(world, len), &steps, &inputs);
        for (rank, output) in outputs.into_iter().enumerate() {
            let (one, two) = ((rank + world - 1) % world, (rank + world - 2) % world);
            let expected: Vec<i32> = (0..len)
                .map(|i| value(one, i).wrapping_add(value(two, i)))
                .collect();
            assert_eq!(output, HostValues::I32(expected), "{name}: rank {rank}");
        }
    }
}

/// Hand-made steps of contract v3, on every map, against the simulated device bit for bit
/// (float sums, so a fold in another order shows): an overwriting step where every rank's first
/// half lands as its successor's second half while it copies its own second half onto its first
/// (every source is also written: all staged), then a combining step where each rank folds its
/// successor's first half into its own middle third, its own last third (read in place) and its
/// own middle third into its first (a source the step writes: copied to scratch first).
#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn transfers_that_land_elsewhere_and_local_copies_agree_with_the_simulated_device() {
    let test = "transfers_that_land_elsewhere";
    let _watchdog = common::watchdog(test);
    let Some(gpus) = common::gpus(test) else {
        return;
    };
    let third = 3001;
    let len = 3 * third;
    let moved = |from, to, range: std::ops::Range<usize>, at| Transfer {
        from,
        to,
        range,
        at,
    };
    for (name, map) in common::maps(gpus) {
        let device = common::executor(map.clone(), CudaConfig::from_env());
        let devices = device.devices();
        let world = devices.len();
        let next = |rank: usize| (rank + 1) % world;
        let steps = [
            Step {
                combine: false,
                transfers: (0..world)
                    .flat_map(|rank| {
                        [
                            moved(rank, next(rank), 0..len / 2, len - len / 2),
                            moved(rank, rank, len / 2..len, 0),
                        ]
                    })
                    .collect(),
            },
            Step {
                combine: true,
                transfers: (0..world)
                    .flat_map(|rank| {
                        [
                            moved(next(rank), rank, 0..third, third),
                            moved(rank, rank, 2 * third..len, third),
                            moved(rank, rank, third..2 * third, 0),
                        ]
                    })
                    .collect(),
            },
        ];
        let plan = ring_plan(world, len);
        let inputs: Vec<HostValues> = (0..world)
            .map(|rank| rounding_input(ElementType::F32, ReduceOperation::Sum, rank, len))
            .collect();
        let sim = SimDevice::new();
        let sim_devices: Vec<DeviceId> = (0..world as u32).map(DeviceId::new).collect();
        let on_sim = run_steps(&sim, &sim_devices, &plan, &steps, &inputs);
        let on_gpu = run_steps(&device, &devices, &plan, &steps, &inputs);
        for (rank, (gpu, sim)) in on_gpu.iter().zip(&on_sim).enumerate() {
            assert!(
                common::bits(gpu) == common::bits(sim),
                "{name}: rank {rank}'s bits differ from the simulated device's"
            );
        }
    }
}

/// A ring all-reduce (sum) plan: its buffers (the input, in place) carry hand-made steps.
fn ring_plan(world: usize, len: usize) -> Plan {
    Plan::new(
        Collective::AllReduce(ReduceOperation::Sum),
        Algorithm::Ring,
        world,
        len,
    )
    .unwrap()
}

/// Drive `begin`, `steps` and `finish` of `plan` on `device` over `inputs`; every rank's output.
fn run_steps<D>(
    device: &D,
    devices: &[DeviceId],
    plan: &Plan,
    steps: &[Step],
    inputs: &[HostValues],
) -> Vec<HostValues>
where
    D: HostTensors,
    D::Error: std::fmt::Debug,
{
    let prepared = devices
        .iter()
        .zip(inputs)
        .map(|(&id, values)| {
            let tensor = device.upload(id, values).unwrap();
            device.prepare(tensor, id).unwrap()
        })
        .collect();
    let mut work = device.begin(devices, prepared, plan).unwrap();
    for step in steps {
        device.exchange(&mut work, step).unwrap();
    }
    let outputs = device.finish(work, plan).unwrap();
    outputs
        .iter()
        .map(|output| device.download(output).unwrap())
        .collect()
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn contract_violations_are_typed_errors_and_leave_the_device_usable() {
    let _watchdog = common::watchdog("contract_violations");
    let Some(gpus) = common::gpus("contract_violations") else {
        return;
    };
    let map = DeviceMap::logical(0, 3).unwrap();
    let device = common::executor(map, CudaConfig::from_env());
    let devices = device.devices();
    let upload =
        |id: DeviceId, len: usize| device.upload(id, &HostValues::F32(vec![1.0; len])).unwrap();

    let misplaced = upload(devices[0], 4);
    assert!(matches!(
        device.prepare(misplaced, devices[1]),
        Err(CudaError::WrongDevice { .. })
    ));
    let unknown = upload(devices[0], 4);
    assert!(matches!(
        device.prepare(unknown, DeviceId::new(99)),
        Err(CudaError::WrongDevice { .. })
    ));

    let prepare = |lens: &[usize]| -> Vec<_> {
        devices
            .iter()
            .zip(lens)
            .map(|(&id, &len)| device.prepare(upload(id, len), id).unwrap())
            .collect()
    };
    let plan = Plan::new(
        Collective::AllReduce(ReduceOperation::Max),
        Algorithm::Ring,
        3,
        4,
    )
    .unwrap();
    assert!(matches!(
        device.begin(&devices, prepare(&[4, 4, 5]), &plan),
        Err(CudaError::LengthMismatch { rank: 2, .. })
    ));
    let mut swapped = devices.clone();
    swapped.swap(0, 1);
    assert!(matches!(
        device.begin(&swapped, prepare(&[4, 4, 4]), &plan),
        Err(CudaError::WrongDevice { rank: Some(0), .. })
    ));
    let mut work = device.begin(&devices, prepare(&[4, 4, 4]), &plan).unwrap();
    let step = |combine, transfers: Vec<Transfer>| Step { combine, transfers };
    let transfer = |from, to, range| Transfer::new(from, to, range);
    assert!(matches!(
        device.exchange(&mut work, &step(true, vec![transfer(0, 3, 0..1)])),
        Err(CudaError::Step(StepViolation::NoSuchRank { rank: 3, .. }))
    ));
    assert!(matches!(
        device.exchange(&mut work, &step(true, vec![transfer(0, 1, 2..5)])),
        Err(CudaError::Step(StepViolation::OutOfBounds {
            transfer: 0,
            ..
        }))
    ));
    let shifted_past_the_end = Transfer {
        from: 1,
        to: 1,
        range: 0..2,
        at: 3,
    };
    assert!(matches!(
        device.exchange(&mut work, &step(false, vec![shifted_past_the_end])),
        Err(CudaError::Step(StepViolation::OutOfBounds {
            transfer: 0,
            ..
        }))
    ));
    assert!(matches!(
        device.exchange(
            &mut work,
            &step(false, vec![transfer(0, 2, 0..3), transfer(1, 2, 2..4)])
        ),
        Err(CudaError::Step(StepViolation::DoubleWrite {
            rank: 2,
            element: 2,
            ..
        }))
    ));
    let wrong = Plan::new(Collective::AllGather, Algorithm::Ring, 3, 4).unwrap();
    assert!(matches!(
        device.finish(work, &wrong),
        Err(CudaError::PlanMismatch { .. })
    ));

    // The device still works.
    check_all_reduce(
        &device,
        &devices,
        ElementType::I32,
        ReduceOperation::Min,
        77,
    );
    println!("{gpus} GPU(s): violations rejected, device usable afterwards");
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn logical_ranks_share_the_primary_context_by_default_and_get_their_own_on_request() {
    let test = "logical_ranks_contexts";
    let _watchdog = common::watchdog(test);
    let Some(_) = common::gpus(test) else {
        return;
    };
    let device = common::executor(DeviceMap::logical(0, 4).unwrap(), CudaConfig::default());
    let lanes = &device.topology().lanes;
    assert_eq!(lanes.len(), 4);
    assert_eq!(lanes[0].context, ContextKind::Primary);
    for lane in &lanes[1..] {
        assert_eq!(lane.ordinal, 0);
        assert!(
            matches!(lane.context, ContextKind::SharedPrimary { .. }),
            "{}: by default ranks on one GPU share its primary context, got {:?}",
            lane.device,
            lane.context
        );
    }
    let devices = device.devices();
    check_all_reduce(
        &device,
        &devices,
        ElementType::F16,
        ReduceOperation::Product,
        1021,
    );
    // The option: a context per rank, where a refusal is an error, never a fallback.
    match CudaCollective::with_config(
        DeviceMap::logical(0, 3).unwrap(),
        CudaConfig::default().with_contexts(ContextPolicy::Separate),
    ) {
        Ok(separate) => {
            assert!(
                separate.topology().lanes[1..]
                    .iter()
                    .all(|lane| lane.context == ContextKind::Separate),
                "{}",
                separate.topology()
            );
            let devices = separate.devices();
            check_all_reduce(
                &separate,
                &devices,
                ElementType::F16,
                ReduceOperation::Product,
                1021,
            );
            println!("2 of 2 further logical ranks on GPU 0 got their own context on request");
        }
        Err(error @ CudaError::ContextRefused { .. }) => common::skip(test, error),
        Err(error) => panic!("{error}"),
    }
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn peer_access_is_enabled_between_gpus_that_support_it() {
    let _watchdog = common::watchdog("peer_access");
    let Some(gpus) = common::gpus("peer_access") else {
        return;
    };
    if gpus < 2 {
        common::allowed_skip(
            "peer_access",
            format!("peer access needs two GPUs, this machine has {gpus}"),
        );
        return;
    }
    let device = common::executor(DeviceMap::one_per_gpu(gpus).unwrap(), CudaConfig::default());
    let peers = &device.topology().peers;
    assert_eq!(peers.len(), gpus * (gpus - 1));
    for link in peers {
        println!("peer {} -> {}: {:?}", link.from, link.to, link.status);
        assert!(
            matches!(link.status, PeerStatus::Enabled | PeerStatus::Unsupported),
            "{link:?}"
        );
    }
}

/// The kernel source compiled at run time, the fallback to the shipped PTX. An NVRTC newer than
/// the driver produces PTX the driver cannot load: that is a typed error naming both versions
/// ([`CudaError::PtxTooNew`]), reported as an allowed skip; so is a missing NVRTC (the shipped
/// PTX, loaded by the driver, is what runs; the summary reports the fallback as unavailable).
#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn nvrtc_compiled_kernels_reduce_like_the_embedded_ptx() {
    let test = "nvrtc_compiled_kernels";
    let _watchdog = common::watchdog(test);
    let Some(_) = common::gpus(test) else {
        return;
    };
    if !nvrtc_available() {
        common::allowed_skip(
            test,
            "no NVRTC library on the loader path: the NVRTC fallback is unavailable (the embedded PTX is what runs)",
        );
        return;
    }
    let built = CudaCollective::with_config(
        DeviceMap::logical(0, 3).unwrap(),
        CudaConfig::from_env().with_kernels(KernelSource::Nvrtc),
    );
    println!(
        "NVRTC {} from {}",
        nvrtc_version().unwrap_or_default(),
        nvrtc_library().unwrap_or_else(|| "an unknown path".to_owned())
    );
    let device = match built {
        Ok(device) => device,
        Err(error @ CudaError::PtxTooNew { .. }) => {
            common::allowed_skip(test, error);
            return;
        }
        Err(error) => panic!("{test}: {error}"),
    };
    let devices = device.devices();
    for element_type in [ElementType::BF16, ElementType::F16, ElementType::I64] {
        for operation in ReduceOperation::ALL {
            check_all_reduce(&device, &devices, element_type, operation, 3001);
        }
    }
}

/// Every entry point restores the calling thread's current context, whatever it was: none, or
/// a context the executor also uses (the primary one). Checked on each rank's thread after
/// upload, the collective (whose last arriver binds every rank's context), download and drop,
/// and after the executor itself is dropped.
#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn the_callers_current_context_is_restored_after_every_call() {
    let _watchdog = common::watchdog("callers_current_context");
    let Some(_) = common::gpus("callers_current_context") else {
        return;
    };
    let current = || {
        result::ctx::get_current()
            .unwrap()
            .map(|context| context as usize)
    };
    let device = common::executor(DeviceMap::logical(0, 4).unwrap(), CudaConfig::from_env());
    let communicator = NativeCommunicator::new(device.devices(), device.clone()).unwrap();
    let primary = device.stream(DeviceId::new(0)).unwrap().context().cu_ctx() as usize;
    std::thread::scope(|scope| {
        for (rank, id) in device.devices().into_iter().enumerate() {
            let (device, communicator) = (&device, &communicator);
            scope.spawn(move || {
                // Even ranks have no current context; odd ones have the primary one current.
                let before = if rank % 2 == 0 {
                    // SAFETY: null unbinds this (test) thread's context; nothing else uses it.
                    unsafe { result::ctx::set_current(std::ptr::null_mut()) }.unwrap();
                    None
                } else {
                    let context = device.stream(DeviceId::new(0)).unwrap().context().clone();
                    context.bind_to_thread().unwrap();
                    Some(primary)
                };
                assert_eq!(current(), before, "rank {rank}: setting up");
                let tensor = device
                    .upload(id, &HostValues::F32(vec![1.0; 4096]))
                    .unwrap();
                assert_eq!(current(), before, "rank {rank}: after upload");
                let prepared = communicator
                    .all_reduce_timeout(
                        rank,
                        tensor,
                        ReduceOperation::Sum,
                        common::COLLECTIVE_TIMEOUT,
                    )
                    .unwrap();
                assert_eq!(current(), before, "rank {rank}: after the all-reduce");
                let values = device.download(&prepared).unwrap();
                assert_eq!(values, HostValues::F32(vec![4.0; 4096]));
                assert_eq!(current(), before, "rank {rank}: after download");
                drop(prepared);
                assert_eq!(current(), before, "rank {rank}: after dropping the output");
            });
        }
    });
    // SAFETY: as above, this test thread's own binding.
    unsafe { result::ctx::set_current(std::ptr::null_mut()) }.unwrap();
    drop(communicator);
    drop(device);
    assert_eq!(current(), None, "after dropping the executor");
}

/// cudarc's `CudaStream::synchronize` returns an error deferred into the context *instead of*
/// waiting. The executor's waits drain that error first and always wait: with a deferred error
/// planted after a long queue of copies, `synchronize` reports the planted error, and the
/// queue is complete when it returns. A drop puts the error back for the next call.
#[test]
#[ignore = "needs a GPU: run with --include-ignored (gpu-check.sh run does)"]
fn a_deferred_error_is_reported_without_skipping_the_wait() {
    let _watchdog = common::watchdog("deferred_error_wait");
    let Some(_) = common::gpus("deferred_error_wait") else {
        return;
    };
    let device = common::executor(DeviceMap::logical(0, 1).unwrap(), CudaConfig::from_env());
    let id = DeviceId::new(0);
    let len = 64 << 20; // 256 MiB of f32 per tensor
    let from = device.upload(id, &HostValues::F32(vec![1.0; len])).unwrap();
    let into = device.upload(id, &HostValues::F32(vec![0.0; len])).unwrap();
    let stream = device.stream(id).unwrap();
    stream.context().bind_to_thread().unwrap();
    for _ in 0..400 {
        // SAFETY: both tensors hold `len` f32 elements on this stream's context and live until
        // after the waits below; the copies are ordered on this one stream.
        unsafe {
            result::memcpy_dtod_async(
                into.device_address(),
                from.device_address(),
                len * 4,
                stream.cu_stream(),
            )
        }
        .unwrap();
    }
    let queued = stream.record_event(None).unwrap();
    let planted = DriverError(CUresult::CUDA_ERROR_UNKNOWN);
    stream.context().record_err::<()>(Err(planted));
    match device.synchronize(id) {
        Err(CudaError::Driver { source, .. }) => {
            assert_eq!(source, DriverCode(CUresult::CUDA_ERROR_UNKNOWN));
        }
        other => panic!("expected the planted deferred error, got {other:?}"),
    }
    assert!(
        queued.try_is_complete().unwrap(),
        "synchronize returned before the queued copies completed"
    );
    // A drop cannot return the error: it waits, frees, and defers it again.
    stream.context().record_err::<()>(Err(planted));
    drop(into);
    assert!(matches!(
        device.synchronize(id),
        Err(CudaError::Driver { .. })
    ));
    assert!(device.synchronize(id).is_ok(), "the error is reported once");
    assert_eq!(
        device.download(&from).unwrap(),
        HostValues::F32(vec![1.0; len])
    );
}
