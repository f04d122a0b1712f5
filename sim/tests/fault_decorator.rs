//! The fault decorator driven directly through the executor trait: it is transparent without
//! faults, keeps the wrapped device's values alive as the wrapped device would, and records what
//! fired.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use ruccl_core::{DeviceId, NativeCollectiveDevice, ReduceOperation, RingSchedule};
use ruccl_sim::fault::{FaultPlan, FaultyDevice, FaultyError, FaultyTensor};
use ruccl_sim::{HostTensors, HostValues, SimDevice, SimError};

fn devices() -> Vec<DeviceId> {
    vec![DeviceId::new(0), DeviceId::new(1)]
}

fn faulty(plan: &str) -> FaultyDevice<SimDevice> {
    FaultyDevice::new(SimDevice::new(), devices(), plan.parse().unwrap())
}

fn prepare_both(
    device: &FaultyDevice<SimDevice>,
    lengths: [usize; 2],
) -> Vec<<FaultyDevice<SimDevice> as NativeCollectiveDevice>::Prepared> {
    devices()
        .into_iter()
        .zip(lengths)
        .map(|(id, length)| {
            let tensor = device
                .upload(id, &HostValues::I32(vec![1; length]))
                .unwrap();
            device.prepare(tensor, id).unwrap()
        })
        .collect()
}

#[test]
fn prepared_inputs_keep_their_device_values_through_begin() {
    let device = faulty("");
    let inputs = prepare_both(&device, [3, 3]);
    let work = device
        .begin(&devices(), &inputs, ReduceOperation::Sum)
        .unwrap();
    assert!(inputs.iter().all(|input| input.holds_inner()));
    drop(work);
    // Also when the wrapped device refuses the inputs.
    let mismatched = prepare_both(&device, [3, 4]);
    let error = device
        .begin(&devices(), &mismatched, ReduceOperation::Sum)
        .unwrap_err();
    assert!(matches!(
        error,
        FaultyError::Device(SimError::LengthMismatch { .. })
    ));
    assert!(mismatched.iter().all(|input| input.holds_inner()));
}

#[test]
fn the_wrapped_devices_errors_keep_their_message() {
    let device = faulty("");
    let tensor = device
        .upload(DeviceId::new(0), &HostValues::F32(vec![1.0]))
        .unwrap();
    let error = device.prepare(tensor, DeviceId::new(1)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "prepare on device 1: the tensor lives on device 0"
    );
}

#[test]
fn without_faults_the_decorator_runs_the_ring_like_the_wrapped_device() {
    let device = faulty("");
    let inputs = prepare_both(&device, [5, 5]);
    let mut work = device
        .begin(&devices(), &inputs, ReduceOperation::Sum)
        .unwrap();
    assert_eq!(device.elements(&work), 5);
    for step in RingSchedule::new(2, 5).steps() {
        device
            .exchange(&mut work, &step.ranges, step.reduce)
            .unwrap();
    }
    assert_eq!(work.steps(), 2);
    let outputs = device.finish(work, ReduceOperation::Sum).unwrap();
    for output in &outputs {
        assert!(!output.is_armed() && !output.is_phantom());
        assert_eq!(
            device.download(output).unwrap(),
            HostValues::I32(vec![2; 5])
        );
    }
    assert!(device.fired().is_empty());
    assert_eq!(device.inner().ledger().recorded(), 1);
}

#[test]
fn an_exchange_fault_without_a_step_strikes_the_first_step() {
    let device = faulty("exchange:error");
    let inputs = prepare_both(&device, [2, 2]);
    let mut work = device
        .begin(&devices(), &inputs, ReduceOperation::Sum)
        .unwrap();
    let error = device.exchange(&mut work, &[0..1, 1..2], true).unwrap_err();
    assert_eq!(
        error.to_string(),
        "injected error in exchange step 0 in generation 0"
    );
}

#[test]
fn phantom_outputs_hold_nothing_and_cannot_be_used() {
    let device = faulty("outputs:count=3");
    let inputs = prepare_both(&device, [1, 1]);
    let work = device
        .begin(&devices(), &inputs, ReduceOperation::Max)
        .unwrap();
    let outputs = device.finish(work, ReduceOperation::Max).unwrap();
    assert_eq!(outputs.len(), 3);
    assert!(outputs[2].is_phantom() && outputs[2].get().is_none());
    assert!(matches!(
        device.download(&outputs[2]),
        Err(FaultyError::PhantomTensor)
    ));
    let mut outputs = outputs;
    let phantom = outputs.pop().unwrap();
    assert!(matches!(
        device.prepare(phantom, DeviceId::new(0)),
        Err(FaultyError::PhantomTensor)
    ));
}

#[test]
fn an_armed_output_can_be_disarmed_by_its_holder() {
    let device = faulty("drop:what=output:rank=1");
    let inputs = prepare_both(&device, [1, 1]);
    let work = device
        .begin(&devices(), &inputs, ReduceOperation::Sum)
        .unwrap();
    let mut outputs = device.finish(work, ReduceOperation::Sum).unwrap();
    assert_eq!(
        outputs
            .iter()
            .map(FaultyTensor::is_armed)
            .collect::<Vec<_>>(),
        [false, true]
    );
    outputs[1].disarm();
    drop(outputs);
}

#[test]
fn a_prepare_on_a_device_outside_the_group_has_no_rank() {
    let device = FaultyDevice::new(
        SimDevice::new(),
        devices(),
        "prepare:rank=0:error".parse::<FaultPlan>().unwrap(),
    );
    let outside = DeviceId::new(9);
    let tensor = device.upload(outside, &HostValues::I64(vec![1])).unwrap();
    let prepared = device.prepare(tensor, outside).unwrap();
    assert_eq!(prepared.rank(), None);
    assert_eq!(prepared.generation(), 0);
    let tensor = device
        .upload(DeviceId::new(0), &HostValues::I64(vec![1]))
        .unwrap();
    assert!(device.prepare(tensor, DeviceId::new(0)).is_err());
    assert_eq!(device.fired().len(), 1);
    assert_eq!(device.fired()[0].rank, Some(0));
}
