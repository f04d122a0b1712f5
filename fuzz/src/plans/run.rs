//! An accepted plan run on a [`SimDevice`], its outputs checked against the sim crate's public
//! references: the plan interpreter ([`interpret`]) bit for bit, and for integers the exact
//! result of the collective ([`expected_outputs`], through [`exact_outputs`]), which no order of
//! folding changes.

use crate::values::{RawSource, any_values, same_bits};
use ruccl_core::{Collective, DeviceId, NativeCollectiveDevice, Plan};
use ruccl_sim::conformance::interpret::{compare_bits, interpret};
use ruccl_sim::conformance::reference::{Expected, compare, expected_outputs};
use ruccl_sim::{ElementType, HostValues, SimDevice, SimTensor, StepTraffic};

/// Run `plan` on a fresh device with values of `element_type` seeded by `seed`: every output is
/// the interpreter's (bit for bit; `Mean` on floats within one rounding), an integer output is
/// the collective's exact result, all-reduce outputs have one bit pattern on every rank (NaNs
/// aside: any NaN matches any NaN), the ledger records the plan's transfers, and once the
/// outputs are dropped the device's census reads zero. Panics otherwise, or if the device refuses
/// the plan.
pub fn run_on_device(plan: &Plan, element_type: ElementType, seed: u64) {
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

    let interpreted = interpret(plan, &inputs)
        .unwrap_or_else(|error| panic!("the interpreter refuses a verified plan: {error}"));
    let exact = (!element_type.is_float()).then(|| exact_outputs(plan.collective(), &inputs));
    for (rank, output) in outputs.iter().enumerate() {
        assert_eq!(
            output.device(),
            devices[rank],
            "rank {rank}'s output device"
        );
        let got = output.values();
        if let Err(mismatch) = compare_bits(plan.collective(), &interpreted[rank], got) {
            panic!(
                "rank {rank}'s output is not the interpreter's: {mismatch}\n{}",
                context()
            );
        }
        if let Some(exact) = &exact {
            if let Err(mismatch) = compare(&exact[rank], element_type, got) {
                panic!(
                    "rank {rank}'s output is not the {}: {mismatch}\n{}",
                    plan.collective(),
                    context()
                );
            }
        }
        if let Collective::AllReduce(_) = plan.collective() {
            // Any NaN matches any NaN: Rust leaves the payload of an operation on two NaNs
            // open, and the device's kernels may put the same two operands in either order.
            assert!(
                same_bits(got, outputs[0].values()),
                "rank {rank}'s all-reduce output has other bits than rank 0's: {got:?} vs {:?}\n{}",
                outputs[0].values(),
                context()
            );
        }
    }
    drop(outputs);
    if let Err(live) = device.check_quiescent() {
        panic!("values outlive the generation: {live}\n{}", context());
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

/// Every rank's exact output of `collective` over integer `inputs`: the sim crate's reference
/// ([`expected_outputs`]), which knows every collective of contract v3.
pub fn exact_outputs(collective: Collective, inputs: &[HostValues]) -> Vec<Expected> {
    let known = expected_outputs(collective, inputs);
    assert_eq!(
        known.len(),
        inputs.len(),
        "the reference has no outputs for {collective}"
    );
    known
}
