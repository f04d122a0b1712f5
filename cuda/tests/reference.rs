//! The kernels' reference results (`common::kernel_reference`, what the hardware tests compare
//! with bit for bit) against the sim crate's perf check (`#wrong`), which `ruccl-perf --backend cuda` uses:
//! a correct GPU must show `#wrong` 0 in every type and operation; and every collective's
//! reference (`common::collective_reference`) against the simulated device. No GPU needed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

mod common;

use ruccl_core::{
    Algorithm, Collective, CollectiveOptions, DeviceId, NativeCollectiveError, NativeCommunicator,
    ReduceOperation,
};
use ruccl_sim::SimDevice;
use ruccl_sim::host::{ElementType, HostTensors, HostValues};
use ruccl_sim::pattern::{Expected, MAX_CHECKED_WORLD};

/// Long enough for two periods of every operation's pattern (the longest is 61 elements).
const LEN: usize = 2 * 61;

#[test]
fn the_perf_check_accepts_what_the_kernels_compute() {
    for element_type in ElementType::ALL {
        for operation in ReduceOperation::ALL {
            for world in 1..=MAX_CHECKED_WORLD {
                let reference = common::kernel_reference(element_type, operation, world, LEN);
                let wrong =
                    Expected::new(element_type, operation, world).count_wrong(&reference, LEN);
                assert_eq!(wrong, 0, "{element_type} {operation} over {world} ranks");
            }
        }
    }
}

#[test]
fn a_world_of_one_returns_its_input_even_for_mean() {
    for element_type in ElementType::ALL {
        for operation in ReduceOperation::ALL {
            assert_eq!(
                common::kernel_reference(element_type, operation, 1, 100),
                common::input(element_type, operation, 0, 100),
                "{element_type} {operation}"
            );
        }
    }
}

#[test]
fn integer_mean_truncates_toward_zero_and_the_check_tells_it_from_flooring() {
    let world = 4;
    let HostValues::I64(sums) =
        common::kernel_reference(ElementType::I64, ReduceOperation::Sum, world, 9)
    else {
        panic!("wrong type");
    };
    assert!(
        sums.iter().any(|&sum| sum < 0 && sum % 4 != 0),
        "the pattern has negative sums with a remainder: {sums:?}"
    );
    let means = common::kernel_reference(ElementType::I64, ReduceOperation::Mean, world, 9);
    let truncated: Vec<i64> = sums.iter().map(|sum| sum / 4).collect();
    assert_eq!(means, HostValues::I64(truncated));
    let floored = HostValues::I64(sums.iter().map(|sum| sum.div_euclid(4)).collect());
    let check = Expected::new(ElementType::I64, ReduceOperation::Mean, world);
    assert!(check.count_wrong(&floored, 9) > 0);
}

#[test]
fn float_mean_divides_once_in_the_compute_type() {
    let world = 3;
    let HostValues::F32(sums) =
        common::kernel_reference(ElementType::F32, ReduceOperation::Sum, world, 9)
    else {
        panic!("wrong type");
    };
    let HostValues::BF16(means) =
        common::kernel_reference(ElementType::BF16, ReduceOperation::Mean, world, 9)
    else {
        panic!("wrong type");
    };
    for (sum, mean) in sums.iter().zip(&means) {
        assert_eq!(*mean, half::bf16::from_f32(sum / 3.0));
    }
}

#[test]
fn unsigned_mean_divides_the_wrapped_sum_as_unsigned() {
    let world = 4;
    let HostValues::U8(sums) =
        common::kernel_reference(ElementType::U8, ReduceOperation::Sum, world, 9)
    else {
        panic!("wrong type");
    };
    assert!(
        sums.iter().any(|&sum| sum >= 128 && sum % 4 != 0),
        "the pattern has wrapped (negative) sums with a remainder: {sums:?}"
    );
    let means = common::kernel_reference(ElementType::U8, ReduceOperation::Mean, world, 9);
    assert_eq!(
        means,
        HostValues::U8(sums.iter().map(|sum| sum / 4).collect())
    );
    // Dividing the signed sum and wrapping afterwards gives other bits, which the check refuses.
    let signed = HostValues::U8(sums.iter().map(|&sum| (sum as i8 / 4) as u8).collect());
    let check = Expected::new(ElementType::U8, ReduceOperation::Mean, world);
    assert_eq!(check.count_wrong(&means, 9), 0);
    assert!(check.count_wrong(&signed, 9) > 0);
}

/// What the hardware tests expect of every collective — all eight kinds, with their roots — is
/// what the simulated device, which enforces the contract, computes from the same inputs.
#[test]
fn every_collectives_reference_is_what_the_simulated_device_computes() {
    let sim = SimDevice::new();
    let mut checked = std::collections::HashSet::new();
    for world in 1..=4 {
        let devices: Vec<DeviceId> = (0..world as u32).map(DeviceId::new).collect();
        let communicator = NativeCommunicator::new(devices, sim.clone()).unwrap();
        for element_type in [ElementType::F32, ElementType::I32] {
            for operation in [ReduceOperation::Sum, ReduceOperation::Mean] {
                for collective in common::collectives(world, operation) {
                    if collective.operation().is_none() && operation != ReduceOperation::Sum {
                        continue;
                    }
                    for algorithm in common::algorithms(world) {
                        for len in [0, 1, 5] {
                            let len = common::input_len(collective, world, len);
                            let case = format!(
                                "W={world} {collective} {algorithm} {element_type} n={len}"
                            );
                            let Some(outputs) = on_sim(
                                &sim,
                                &communicator,
                                collective,
                                algorithm,
                                element_type,
                                len,
                            ) else {
                                continue; // no plan of this algorithm for this collective
                            };
                            for (rank, output) in outputs.iter().enumerate() {
                                let expected = common::collective_reference(
                                    collective,
                                    element_type,
                                    world,
                                    rank,
                                    len,
                                );
                                assert!(
                                    common::bits(output) == common::bits(&expected),
                                    "{case}: rank {rank}: {output:?} is not {expected:?}"
                                );
                            }
                            checked.insert(
                                collective.with_root(0).with_operation(ReduceOperation::Sum),
                            );
                        }
                    }
                }
            }
        }
    }
    assert_eq!(checked.len(), Collective::KINDS.len(), "{checked:?}");
}

/// Every rank's output of `collective` on the simulated device over the pattern inputs, or
/// `None` where the algorithm has no plan for it (every rank gets the same refusal).
fn on_sim(
    sim: &SimDevice,
    communicator: &NativeCommunicator<SimDevice>,
    collective: Collective,
    algorithm: Algorithm,
    element_type: ElementType,
    len: usize,
) -> Option<Vec<HostValues>> {
    let operation = collective.operation().unwrap_or(ReduceOperation::Sum);
    let options = CollectiveOptions::default().with_algorithm(algorithm);
    let outputs: Vec<Result<HostValues, NativeCollectiveError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = communicator
            .devices()
            .iter()
            .enumerate()
            .map(|(rank, &id)| {
                scope.spawn(move || {
                    let input = common::input(element_type, operation, rank, len);
                    let tensor = sim.upload(id, &input).unwrap();
                    communicator
                        .collective(rank, tensor, collective, options)
                        .map(|output| sim.download(&output).unwrap())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    match outputs.into_iter().collect::<Result<Vec<_>, _>>() {
        Ok(outputs) => Some(outputs),
        // `Direct` has a plan for every collective at these sizes; the others may refuse one.
        Err(NativeCollectiveError::InvalidCollective { .. }) if algorithm != Algorithm::Direct => {
            None
        }
        Err(error) => panic!("{collective} {algorithm}: {error}"),
    }
}
