//! The executor on real GPUs: exact results for every type and operation on every map, the
//! ordering of one exchange step, generations chained on the device, validation, setup.
//!
//! Each test prints `SKIP: no CUDA driver ...` and passes where there is no GPU (unless
//! `RUCCL_CUDA_REQUIRE_GPU=1`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

mod common;

use ruccl_core::{DeviceId, NativeCollectiveDevice, NativeCommunicator, ReduceOperation};
use ruccl_cuda::kernels::nvrtc_available;
use ruccl_cuda::{
    ContextKind, ContextPolicy, CudaCollective, CudaConfig, CudaError, DeviceMap, KernelSource,
    PeerStatus,
};
use ruccl_sim::host::{ElementType, HostTensors, HostValues};

fn check_all_reduce(
    device: &CudaCollective,
    devices: &[DeviceId],
    element_type: ElementType,
    operation: ReduceOperation,
    len: usize,
) {
    let communicator = NativeCommunicator::new(devices.to_vec(), device.clone()).unwrap();
    let world = devices.len();
    let inputs: Vec<HostValues> = (0..world)
        .map(|rank| common::input(element_type, operation, rank, len))
        .collect();
    let expected = common::kernel_reference(element_type, operation, world, len);
    for (rank, output) in common::all_reduce(device, &communicator, &inputs, operation)
        .into_iter()
        .enumerate()
    {
        let output = output.unwrap_or_else(|error| {
            panic!("W={world} {element_type} {operation} n={len}: rank {rank} failed: {error}")
        });
        assert!(
            output == expected,
            "W={world} {element_type} {operation} n={len}: rank {rank} differs from the reference"
        );
    }
}

#[test]
fn every_type_and_operation_reduces_exactly_on_every_map() {
    let Some(gpus) = common::gpus("every_type_and_operation") else {
        return;
    };
    for (name, map) in common::maps(gpus) {
        let device = common::executor(map.clone(), CudaConfig::from_env());
        println!("{name}:\n{}", device.topology());
        let mut worlds = vec![1, 2, map.len()];
        worlds.dedup();
        for world in worlds {
            let devices = common::first_devices(&map, world);
            for element_type in ElementType::ALL {
                for operation in ReduceOperation::ALL {
                    for len in [0, 1, world.saturating_sub(1), 1000, 65_537] {
                        check_all_reduce(&device, &devices, element_type, operation, len);
                    }
                }
            }
        }
    }
}

#[test]
fn a_large_tensor_reduces_exactly_across_all_ranks() {
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
fn outputs_feed_the_next_generation_on_the_device() {
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
                                .all_reduce(rank, tensor, ReduceOperation::Sum)
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

/// Drive `begin`, two overlapping exchanges and `finish` by hand: every rank sends its *whole*
/// tensor while its predecessor overwrites (then combines into) that same tensor. If a
/// destination were written before its own send had read it, the rotation would come out wrong.
#[test]
fn sends_read_the_pre_step_state_even_when_every_range_overlaps() {
    let Some(gpus) = common::gpus("sends_read_the_pre_step_state") else {
        return;
    };
    for (name, map) in common::maps(gpus) {
        let device = common::executor(map, CudaConfig::from_env());
        let devices = device.devices();
        let world = devices.len();
        let len = 1 << 22;
        let value = |rank: usize, i: usize| (rank * 1_000_003 + i % 9_973) as i32;
        let inputs: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(rank, &id)| {
                let values = HostValues::I32((0..len).map(|i| value(rank, i)).collect());
                device
                    .prepare(device.upload(id, &values).unwrap(), id)
                    .unwrap()
            })
            .collect();
        let mut work = device
            .begin(&devices, &inputs, ReduceOperation::Sum)
            .unwrap();
        let everything = vec![0..len; world];
        device.exchange(&mut work, &everything, false).unwrap();
        device.exchange(&mut work, &everything, true).unwrap();
        let outputs = device.finish(work, ReduceOperation::Sum).unwrap();
        for (rank, output) in outputs.iter().enumerate() {
            let (one, two) = ((rank + world - 1) % world, (rank + world - 2) % world);
            let expected: Vec<i32> = (0..len)
                .map(|i| value(one, i).wrapping_add(value(two, i)))
                .collect();
            assert_eq!(
                device.download(output).unwrap(),
                HostValues::I32(expected),
                "{name}: rank {rank}"
            );
        }
    }
}

#[test]
fn contract_violations_are_typed_errors_and_leave_the_device_usable() {
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
    let uneven = prepare(&[4, 4, 5]);
    assert!(matches!(
        device.begin(&devices, &uneven, ReduceOperation::Sum),
        Err(CudaError::LengthMismatch { rank: 2, .. })
    ));
    let even = prepare(&[4, 4, 4]);
    let mut swapped = devices.clone();
    swapped.swap(0, 1);
    assert!(matches!(
        device.begin(&swapped, &even, ReduceOperation::Sum),
        Err(CudaError::WrongDevice { rank: Some(0), .. })
    ));
    let mut work = device.begin(&devices, &even, ReduceOperation::Max).unwrap();
    assert!(matches!(
        device.exchange(&mut work, &[0..1, 0..1], true),
        Err(CudaError::RangeCount { .. })
    ));
    assert!(matches!(
        device.exchange(&mut work, &[0..1, 2..5, 0..0], true),
        Err(CudaError::RangeOutOfBounds { rank: 1, .. })
    ));
    drop(work);
    drop(even);

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
fn logical_ranks_get_their_own_contexts_or_say_why_not() {
    let Some(_) = common::gpus("logical_ranks_get_their_own_contexts") else {
        return;
    };
    let device = common::executor(DeviceMap::logical(0, 4).unwrap(), CudaConfig::default());
    let lanes = &device.topology().lanes;
    assert_eq!(lanes.len(), 4);
    assert_eq!(lanes[0].context, ContextKind::Primary);
    for lane in &lanes[1..] {
        assert_eq!(lane.ordinal, 0);
        match &lane.context {
            ContextKind::Separate => {}
            ContextKind::SharedPrimary { reason } => {
                println!("{}: driver refused a context: {reason}", lane.device);
            }
            other => panic!("{}: unexpected {other:?}", lane.device),
        }
    }
    let separate = lanes
        .iter()
        .filter(|lane| lane.context == ContextKind::Separate)
        .count();
    println!("{separate} of 3 further logical ranks on GPU 0 have their own context");

    let shared = common::executor(
        DeviceMap::logical(0, 3).unwrap(),
        CudaConfig::default().with_contexts(ContextPolicy::SharedPrimary),
    );
    assert!(
        shared.topology().lanes[1..]
            .iter()
            .all(|lane| matches!(lane.context, ContextKind::SharedPrimary { .. }))
    );
    let devices = shared.devices();
    check_all_reduce(
        &shared,
        &devices,
        ElementType::F16,
        ReduceOperation::Product,
        1021,
    );
}

#[test]
fn peer_access_is_enabled_between_gpus_that_support_it() {
    let Some(gpus) = common::gpus("peer_access") else {
        return;
    };
    if gpus < 2 {
        println!("SKIP: peer access needs two GPUs, this machine has {gpus}");
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

#[test]
fn nvrtc_compiled_kernels_reduce_like_the_embedded_ptx() {
    let Some(_) = common::gpus("nvrtc_compiled_kernels") else {
        return;
    };
    if !nvrtc_available() {
        println!("SKIP: no NVRTC library on the loader path (the embedded PTX is what runs)");
        return;
    }
    let device = common::executor(
        DeviceMap::logical(0, 3).unwrap(),
        CudaConfig::default().with_kernels(KernelSource::Nvrtc),
    );
    let devices = device.devices();
    for element_type in [ElementType::BF16, ElementType::F16, ElementType::I64] {
        for operation in ReduceOperation::ALL {
            check_all_reduce(&device, &devices, element_type, operation, 3001);
        }
    }
}
