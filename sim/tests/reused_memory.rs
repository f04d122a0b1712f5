//! The simulated device reuses large allocations across generations (its pool): results stay
//! exact generation after generation, in place and out of place, for every collective and
//! built-in algorithm, with inputs large enough (192 KiB per rank) that every buffer, copy aside
//! and output comes from or goes back to the pool.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly

use ruccl_core::{Algorithm, Collective, DeviceId, NativeCollectiveDevice, Plan, ReduceOperation};
use ruccl_sim::{HostTensors, HostValues, SimDevice};

const WORLD: usize = 4;
/// Elements of an all-reduce or broadcast input, and of a reduce-scatter input: 192 KiB of i32.
const LENGTH: usize = 3 << 14;

fn input(rank: usize, generation: usize, length: usize) -> Vec<i32> {
    (0..length)
        .map(|index| (rank * 1000 + generation * 7 + index % 13) as i32)
        .collect()
}

/// Rank `rank`'s output of `collective` over `inputs`, by its definition.
fn expected(collective: Collective, inputs: &[Vec<i32>], rank: usize) -> Vec<i32> {
    let sum = |range: std::ops::Range<usize>| -> Vec<i32> {
        range
            .map(|index| {
                inputs
                    .iter()
                    .fold(0i32, |acc, one| acc.wrapping_add(one[index]))
            })
            .collect()
    };
    match collective {
        Collective::AllReduce(_) => sum(0..inputs[0].len()),
        Collective::ReduceScatter(_) => {
            let block = inputs[0].len() / inputs.len();
            sum(rank * block..(rank + 1) * block)
        }
        Collective::AllGather => inputs.concat(),
        Collective::Broadcast { root } => inputs[root].clone(),
        _ => unreachable!("no other collective"),
    }
}

#[test]
fn every_collective_stays_exact_while_the_device_reuses_its_allocations() {
    let sum = ReduceOperation::Sum;
    let devices: Vec<DeviceId> = (0..WORLD as u32).map(DeviceId::new).collect();
    for in_place in [false, true] {
        let device = SimDevice::builder().in_place(in_place).build();
        let mut reused = false;
        for generation in 0..4 {
            for collective in [
                Collective::AllReduce(sum),
                Collective::ReduceScatter(sum),
                Collective::AllGather,
                Collective::Broadcast { root: 2 },
            ] {
                let length = match collective {
                    Collective::AllGather => LENGTH / WORLD,
                    _ => LENGTH,
                };
                for algorithm in Algorithm::BUILT_IN {
                    let plan = Plan::new(collective, algorithm, WORLD, length).unwrap();
                    let inputs: Vec<Vec<i32>> = (0..WORLD)
                        .map(|rank| input(rank, generation, length))
                        .collect();
                    let prepared = inputs
                        .iter()
                        .zip(&devices)
                        .map(|(values, &id)| {
                            let tensor = device.upload(id, &HostValues::I32(values.clone()));
                            device.prepare(tensor.unwrap(), id).unwrap()
                        })
                        .collect();
                    let before = device.pooled_bytes();
                    let mut work = device.begin(&devices, prepared, &plan).unwrap();
                    for step in plan.steps() {
                        device.exchange(&mut work, step).unwrap();
                    }
                    let outputs = device.finish(work, &plan).unwrap();
                    reused |= device.pooled_bytes() < before;
                    for (rank, output) in outputs.iter().enumerate() {
                        assert_eq!(
                            output.values(),
                            &HostValues::I32(expected(collective, &inputs, rank)),
                            "{collective} via {algorithm}, rank {rank}, generation {generation}, in place: {in_place}"
                        );
                    }
                }
            }
        }
        assert!(
            reused,
            "in place: {in_place}: some generation took kept allocations"
        );
        device.check_quiescent().unwrap();
    }
}
