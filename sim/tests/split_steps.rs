//! A step large enough to be worth several threads is cut into one share per thread as a whole
//! (`sim/src/device/memory.rs`, `apply`): its writes, copies and folds of several senders, cut at
//! any element. Whatever the cut, every rank's output is the bits one thread computes — floats
//! included, where another fold order would change them — for every built-in plan and for
//! crafted steps whose senders overlap and whose sources are copied aside.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly

use ruccl_core::{
    Algorithm, Collective, DeviceId, NativeCollectiveDevice, Plan, ReduceOperation, Step, Transfer,
};
use ruccl_sim::{HostTensors, HostValues, SimDevice, SimWork};

/// Elements per input: 2 MiB of f32 and a few more, so that a ring step's writes alone are worth
/// two threads, and no share ends where a write does.
const LENGTH: usize = (1 << 19) + 37;

/// Rank `rank`'s input: values whose sums round differently in another order.
fn input(rank: usize, length: usize) -> HostValues {
    HostValues::F32(
        (0..length)
            .map(|index| ((index * 7 + rank * 13) % 101) as f32 * 0.1 + (rank as f32) * 1e-3)
            .collect(),
    )
}

/// A generation of `plan` on `device` begun with every rank's [`input`], and `steps` exchanged.
fn exchanged(device: &SimDevice, plan: &Plan, steps: &[Step]) -> SimWork {
    let devices: Vec<DeviceId> = (0..plan.world() as u32).map(DeviceId::new).collect();
    let inputs = devices
        .iter()
        .enumerate()
        .map(|(rank, &id)| {
            let tensor = device.upload(id, &input(rank, plan.input_len())).unwrap();
            device.prepare(tensor, id).unwrap()
        })
        .collect();
    let mut work = device.begin(&devices, inputs, plan).unwrap();
    for step in steps {
        device.exchange(&mut work, step).unwrap();
    }
    work
}

/// Every rank's output of one generation of `plan` on `device`.
fn outputs(device: &SimDevice, plan: &Plan) -> Vec<HostValues> {
    let work = exchanged(device, plan, plan.steps());
    device
        .finish(work, plan)
        .unwrap()
        .iter()
        .map(|output| device.download(output).unwrap())
        .collect()
}

fn bits(values: &HostValues) -> Vec<u32> {
    match values {
        HostValues::F32(values) => values.iter().map(|value| value.to_bits()).collect(),
        other => panic!("f32 expected, got {:?}", other.element_type()),
    }
}

#[test]
fn a_step_cut_across_threads_gives_the_bits_of_one_thread() {
    let one = SimDevice::builder().threads(1).build();
    let several = SimDevice::builder().threads(3).build();
    let mut compared = 0;
    for world in [3, 4] {
        for collective in [
            Collective::AllReduce(ReduceOperation::Sum),
            Collective::AllReduce(ReduceOperation::Mean),
            Collective::ReduceScatter(ReduceOperation::Sum),
            Collective::AllGather,
            Collective::Broadcast { root: 1 },
        ] {
            let length = match collective {
                Collective::ReduceScatter(_) => LENGTH.next_multiple_of(world),
                _ => LENGTH,
            };
            for algorithm in [
                Algorithm::Ring,
                Algorithm::Direct,
                Algorithm::HalvingDoubling,
            ] {
                let Ok(plan) = Plan::new(collective, algorithm, world, length) else {
                    continue;
                };
                let (expected, actual) = (outputs(&one, &plan), outputs(&several, &plan));
                assert_eq!(expected.len(), actual.len());
                for (rank, (expected, actual)) in expected.iter().zip(&actual).enumerate() {
                    let (expected, actual) = (bits(expected), bits(actual));
                    assert_eq!(expected.len(), actual.len());
                    if let Some(element) = (0..expected.len()).find(|&i| expected[i] != actual[i]) {
                        panic!(
                            "{collective} {algorithm:?} W = {world}: rank {rank} element \
                             {element} differs across threads"
                        );
                    }
                }
                compared += 1;
            }
        }
    }
    assert!(compared >= 20, "only {compared} plans compared");
}

/// Every rank's buffer after `steps` on `device`, from the inputs of a ring all-reduce plan of
/// `world` ranks (any plan of that shape would do: `begin` only lays out the buffers).
fn buffers_after(device: &SimDevice, world: usize, steps: &[Step]) -> Vec<Vec<u32>> {
    let plan = Plan::new(
        Collective::AllReduce(ReduceOperation::Sum),
        Algorithm::Ring,
        world,
        LENGTH,
    )
    .unwrap();
    let work = exchanged(device, &plan, steps);
    (0..world)
        .map(|rank| bits(&work.buffer(rank).unwrap()))
        .collect()
}

#[test]
fn a_crafted_step_of_overlapping_senders_and_copies_aside_cuts_the_same() {
    let transfer = |from, to, range| Transfer::new(from, to, range);
    let (quarter, third) = (LENGTH / 4, LENGTH / 3);
    let steps = [
        // Rank 1 folds two overlapping senders; its own range from a third on is sent while
        // part of it is written (copied aside); rank 2 is written where rank 1 reads nothing.
        Step {
            combine: true,
            transfers: vec![
                transfer(0, 1, 0..2 * quarter),
                transfer(2, 1, quarter..3 * quarter),
                transfer(1, 0, third..LENGTH),
                transfer(1, 2, 0..quarter / 2),
                transfer(0, 2, 3 * quarter..LENGTH),
            ],
        },
        // Overwrites: rank 0's start goes to ranks 1 and 2, and rank 2's end to rank 0.
        Step {
            combine: false,
            transfers: vec![
                transfer(0, 1, 5..quarter + 5),
                transfer(0, 2, 5..quarter + 5),
                transfer(2, 0, 2 * quarter..LENGTH),
            ],
        },
    ];
    let one = buffers_after(&SimDevice::builder().threads(1).build(), 3, &steps);
    let several = buffers_after(&SimDevice::builder().threads(3).build(), 3, &steps);
    for (rank, (expected, actual)) in one.iter().zip(&several).enumerate() {
        if let Some(element) = (0..expected.len()).find(|&i| expected[i] != actual[i]) {
            panic!("rank {rank} element {element} differs across threads");
        }
    }
    // And the steps did something: rank 1's second element (rank 0's is 0.7 there) is no
    // longer its input.
    assert_ne!(one[1][1], bits(&input(1, 2))[1]);
}
