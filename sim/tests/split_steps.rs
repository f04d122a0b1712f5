//! A step large enough to be worth several threads is cut into one share per thread as a whole
//! (`sim/src/device/memory.rs`, `apply`): its writes, copies and folds of several senders, cut at
//! any element. Whatever the cut, every rank's output is the bits one thread computes — floats
//! included, where another fold order would change them.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly

use ruccl_core::{Algorithm, Collective, DeviceId, NativeCollectiveDevice, Plan, ReduceOperation};
use ruccl_sim::{HostTensors, HostValues, SimDevice};

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

/// Every rank's output of one generation of `plan` on `device`.
fn outputs(device: &SimDevice, plan: &Plan) -> Vec<HostValues> {
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
    for step in plan.steps() {
        device.exchange(&mut work, step).unwrap();
    }
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
