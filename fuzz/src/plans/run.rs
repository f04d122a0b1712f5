//! An accepted plan run on a [`SimDevice`], its outputs checked against the simulator's trees.

use super::brute::{Examination, Tree};
use crate::arith::{Num, nums};
use crate::values::{RawSource, any_values};
use ruccl_core::{Collective, DeviceId, NativeCollectiveDevice, Plan, ReduceOperation};
use ruccl_sim::{ElementType, HostValues, SimDevice, SimTensor, StepTraffic};

/// `tree` evaluated over `inputs` (`inputs[r]`: rank `r`'s elements), folding with `operation`.
fn evaluate(tree: &Tree, inputs: &[Vec<Num>], operation: ReduceOperation) -> Num {
    match tree {
        Tree::Input { rank, index } => inputs[*rank][*index],
        Tree::Fold(left, right) => {
            let left = evaluate(left, inputs, operation);
            let right = evaluate(right, inputs, operation);
            Num::combine(operation, left, right)
                .unwrap_or_else(|| panic!("inputs of two element types: {left:?} ⊕ {right:?}"))
        }
    }
}

/// Run `plan` on a fresh device with values of `element_type` seeded by `seed`: every output
/// element is its tree in `examination` evaluated in the device's documented arithmetic,
/// all-reduce outputs have one bit pattern on every rank (NaNs aside: any NaN matches any NaN),
/// and the ledger records the plan's transfers. Panics otherwise, or if the device refuses the
/// plan.
pub fn run_on_device(plan: &Plan, examination: &Examination, element_type: ElementType, seed: u64) {
    let world = plan.world();
    let context = || format!("{element_type} values seeded {seed} through {plan:?}");
    let device = SimDevice::builder().threads(1).build();
    let devices: Vec<DeviceId> = (0..world as u32)
        .map(|rank| DeviceId::new(rank + 1))
        .collect();
    let mut source = RawSource::new(&[], seed);
    let inputs: Vec<HostValues> = (0..world)
        .map(|_| any_values(&mut source, element_type, plan.input_len()))
        .collect();
    let prepared = inputs
        .iter()
        .zip(&devices)
        .map(|(values, &id)| {
            device
                .prepare(SimTensor::new(id, values.clone()), id)
                .unwrap_or_else(|error| panic!("prepare: {error}\n{}", context()))
        })
        .collect();
    let mut work = device
        .begin(&devices, prepared, plan)
        .unwrap_or_else(|error| panic!("begin refused a verified plan: {error}\n{}", context()));
    for (index, step) in plan.steps().iter().enumerate() {
        if let Err(error) = device.exchange(&mut work, step) {
            panic!(
                "exchange refused step {index} of a verified plan: {error}\n{}",
                context()
            );
        }
    }
    let outputs = device
        .finish(work, plan)
        .unwrap_or_else(|error| panic!("finish refused a verified plan: {error}\n{}", context()));
    assert_eq!(outputs.len(), world, "outputs\n{}", context());

    let operation = plan.collective().operation();
    let folding = operation.map_or(ReduceOperation::Sum, ReduceOperation::combining);
    let inputs: Vec<Vec<Num>> = inputs.iter().map(nums).collect();
    let mut first: Vec<Num> = Vec::new();
    for (rank, (output, trees)) in outputs.iter().zip(&examination.outputs).enumerate() {
        assert_eq!(
            output.device(),
            devices[rank],
            "rank {rank}'s output device"
        );
        let got = nums(output.values());
        assert_eq!(
            got.len(),
            trees.len(),
            "rank {rank}'s output length\n{}",
            context()
        );
        for (element, (&value, tree)) in got.iter().zip(trees).enumerate() {
            let mut expected = evaluate(tree, &inputs, folding);
            if operation == Some(ReduceOperation::Mean) {
                expected = expected.divide(world);
            }
            assert!(
                value.matches(expected, operation),
                "rank {rank} element {element}: the device holds {value:?}, the tree {tree:?} evaluates to {expected:?}\n{}",
                context()
            );
        }
        if let Collective::AllReduce(_) = plan.collective() {
            if rank == 0 {
                first = got;
            } else {
                // Any NaN matches any NaN: Rust leaves the payload of an operation on two NaNs
                // open, and the device's kernels may put the same two operands in either order.
                assert!(
                    got.iter().zip(&first).all(|(a, b)| a.matches(*b, None)),
                    "rank {rank}'s all-reduce output has other bits than rank 0's: {got:?} vs {first:?}\n{}",
                    context()
                );
            }
        }
    }
    let Some(record) = device.ledger().last() else {
        panic!("the ledger recorded nothing\n{}", context());
    };
    let expected: Vec<StepTraffic> = plan.steps().iter().map(StepTraffic::of).collect();
    assert_eq!(record.steps, expected, "the ledger's steps\n{}", context());
    assert_eq!(
        (
            record.devices.as_slice(),
            record.collective,
            record.algorithm,
            record.input_len,
            record.element_type
        ),
        (
            devices.as_slice(),
            plan.collective(),
            plan.algorithm(),
            plan.input_len(),
            element_type
        ),
        "the ledger's record\n{}",
        context()
    );
}
