//! The simulated device through a real communicator: every collective and every algorithm
//! delivers exactly the sequential reference on every rank, for integer inputs (whose results no
//! fold order can change) and for float sums with a cancelling pattern (whose bits depend on the
//! order: every rank of an all-reduce must agree bit for bit).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use ruccl_core::{
    Algorithm, Collective, CollectiveOptions, DeviceId, NativeCommunicator, Plan, ReduceOperation,
};
use ruccl_sim::{HostValues, SimDevice, SimTensor};

fn devices(world: usize) -> Vec<DeviceId> {
    (0..world as u32).map(DeviceId::new).collect()
}

/// Run one generation of `collective` via `algorithm` over `inputs`, one thread per rank.
fn run(
    communicator: &NativeCommunicator<SimDevice>,
    collective: Collective,
    algorithm: Algorithm,
    inputs: &[HostValues],
) -> Vec<HostValues> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = inputs
            .iter()
            .enumerate()
            .map(|(rank, values)| {
                let tensor = SimTensor::new(DeviceId::new(rank as u32), values.clone());
                scope.spawn(move || {
                    let options = CollectiveOptions::default().with_algorithm(algorithm);
                    communicator
                        .collective(rank, tensor, collective, options)
                        .unwrap_or_else(|error| panic!("{collective} via {algorithm}: {error}"))
                        .into_values()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn reference(collective: Collective, inputs: &[Vec<i64>]) -> Vec<Vec<i64>> {
    let world = inputs.len();
    let reduce = |operation: ReduceOperation| -> Vec<i64> {
        (0..inputs[0].len())
            .map(|index| {
                let mut values = inputs.iter().map(|input| input[index]);
                let first = values.next().unwrap();
                let folded = values.fold(first, |acc, value| match operation {
                    ReduceOperation::Sum | ReduceOperation::Mean => acc.wrapping_add(value),
                    ReduceOperation::Product => acc.wrapping_mul(value),
                    ReduceOperation::Min => acc.min(value),
                    ReduceOperation::Max => acc.max(value),
                });
                if operation == ReduceOperation::Mean {
                    folded / world as i64
                } else {
                    folded
                }
            })
            .collect()
    };
    match collective {
        Collective::AllReduce(operation) => vec![reduce(operation); world],
        Collective::ReduceScatter(operation) => {
            let all = reduce(operation);
            let block = all.len() / world;
            (0..world)
                .map(|rank| all[rank * block..(rank + 1) * block].to_vec())
                .collect()
        }
        Collective::AllGather => vec![inputs.concat(); world],
        Collective::Broadcast { root } => vec![inputs[root].clone(); world],
        _ => unreachable!(),
    }
}

#[test]
fn every_collective_and_algorithm_delivers_the_reference_on_every_rank() {
    for world in 1..=6 {
        let communicator = NativeCommunicator::new(devices(world), SimDevice::new()).unwrap();
        let algorithms: Vec<Algorithm> = [Algorithm::Auto]
            .into_iter()
            .chain(Algorithm::BUILT_IN)
            .filter(|&a| a != Algorithm::HalvingDoubling || world.is_power_of_two())
            .collect();
        let mut collectives: Vec<Collective> = ReduceOperation::ALL
            .iter()
            .flat_map(|&op| [Collective::AllReduce(op), Collective::ReduceScatter(op)])
            .collect();
        collectives.push(Collective::AllGather);
        collectives.extend((0..world).map(|root| Collective::Broadcast { root }));
        for collective in collectives {
            for &algorithm in &algorithms {
                for length in [0, 1, 7, 3 * world + 1] {
                    let length = match collective {
                        Collective::ReduceScatter(_) => length * world,
                        _ => length,
                    };
                    if algorithm != Algorithm::Auto
                        && Plan::new(collective, algorithm, world, length).is_err()
                    {
                        continue; // refused for its traffic (ruccl-core's traffic_bound tests)
                    }
                    let inputs: Vec<Vec<i64>> = (0..world)
                        .map(|rank| {
                            (0..length)
                                .map(|index| (rank * 7 + index * 3) as i64 % 11 - 4)
                                .collect()
                        })
                        .collect();
                    let hosts: Vec<HostValues> =
                        inputs.iter().cloned().map(HostValues::I64).collect();
                    let got = run(&communicator, collective, algorithm, &hosts);
                    let want = reference(collective, &inputs);
                    for rank in 0..world {
                        assert_eq!(
                            got[rank],
                            HostValues::I64(want[rank].clone()),
                            "{collective} via {algorithm}, W={world}, n={length}, rank {rank}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn float_all_reduce_outputs_are_the_same_bits_on_every_rank() {
    for world in [3, 4, 5, 8] {
        let communicator = NativeCommunicator::new(devices(world), SimDevice::new()).unwrap();
        // Large and small values of alternating sign: the fold order changes the rounding.
        let inputs: Vec<HostValues> = (0..world)
            .map(|rank| {
                HostValues::F32(
                    (0..37)
                        .map(|index| {
                            let sign = if (rank + index) % 2 == 0 { 1.0 } else { -1.0 };
                            sign * (1e7 * (rank + 1) as f32 + 0.37 * index as f32)
                        })
                        .collect(),
                )
            })
            .collect();
        for algorithm in Algorithm::BUILT_IN {
            if algorithm == Algorithm::HalvingDoubling && !world.is_power_of_two() {
                continue;
            }
            let got = run(
                &communicator,
                Collective::AllReduce(ReduceOperation::Sum),
                algorithm,
                &inputs,
            );
            for rank in 1..world {
                let (HostValues::F32(first), HostValues::F32(other)) = (&got[0], &got[rank]) else {
                    unreachable!()
                };
                let same = first
                    .iter()
                    .zip(other)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{algorithm}, W={world}: rank {rank} differs from rank 0"
                );
            }
        }
    }
}
