//! The fault decorator driven directly through the executor trait: it is transparent without
//! faults, meets its faults in the documented order, hands the wrapped device's values on as the
//! wrapped device would, and records what fired.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use ruccl_core::{Algorithm, Collective, DeviceId, NativeCollectiveDevice, Plan, ReduceOperation};
use ruccl_sim::fault::{DropTarget, FaultPlan, FaultSite, FaultyDevice, FaultyError, FaultyTensor};
use ruccl_sim::{HostTensors, HostValues, SimDevice, SimError};
use std::panic::{AssertUnwindSafe, catch_unwind};

type Device = FaultyDevice<SimDevice>;
type Prepared = <Device as NativeCollectiveDevice>::Prepared;

fn devices() -> Vec<DeviceId> {
    vec![DeviceId::new(0), DeviceId::new(1)]
}

fn faulty(plan: &str) -> Device {
    FaultyDevice::new(SimDevice::new(), devices(), plan.parse().unwrap())
}

fn plan(operation: ReduceOperation, length: usize) -> Plan {
    Plan::new(Collective::AllReduce(operation), Algorithm::Ring, 2, length).unwrap()
}

fn prepare_both(device: &Device, lengths: [usize; 2]) -> Vec<Prepared> {
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

fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| {
            payload
                .downcast_ref::<&str>()
                .map(|text| (*text).to_owned())
        })
        .unwrap_or_default()
}

#[test]
fn begin_takes_the_inputs_and_the_wrapped_devices_refusal_comes_through() {
    let device = faulty("");
    let inputs = prepare_both(&device, [3, 3]);
    assert!(inputs.iter().all(|input| input.holds_inner()));
    let work = device.begin(&devices(), inputs, &plan(ReduceOperation::Sum, 3));
    drop(work.unwrap());
    let mismatched = prepare_both(&device, [3, 4]);
    let error = device
        .begin(&devices(), mismatched, &plan(ReduceOperation::Sum, 3))
        .unwrap_err();
    assert!(matches!(
        error,
        FaultyError::Device(SimError::LengthMismatch { rank: 1, .. })
    ));
    device.inner().check_quiescent().unwrap();
}

#[test]
fn an_armed_prepared_input_panics_inside_begin_before_the_begin_fault() {
    let device = faulty("drop:what=prepared:rank=1,begin:error");
    let inputs = prepare_both(&device, [2, 2]);
    assert_eq!(
        inputs
            .iter()
            .map(|input| input.is_armed())
            .collect::<Vec<_>>(),
        [false, true]
    );
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        device.begin(&devices(), inputs, &plan(ReduceOperation::Sum, 2))
    }));
    let message = panic_text(outcome.expect_err("begin panics"));
    assert_eq!(
        message,
        "injected panic in drop of a prepared input on rank 1 in generation 0"
    );
    // The begin fault never fired: the drop came first. Only the arming is recorded.
    let fired: Vec<FaultSite> = device.fired().iter().map(|fired| fired.spec.site).collect();
    assert_eq!(fired, [FaultSite::Drop(DropTarget::Prepared)]);
    // The wrapped device's values were dropped on the way out.
    device.inner().check_quiescent().unwrap();
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
fn without_faults_the_decorator_runs_a_plan_like_the_wrapped_device() {
    let device = faulty("");
    let ring = plan(ReduceOperation::Sum, 5);
    let inputs = prepare_both(&device, [5, 5]);
    let mut work = device.begin(&devices(), inputs, &ring).unwrap();
    for step in ring.steps() {
        device.exchange(&mut work, step).unwrap();
    }
    assert_eq!(work.steps(), ring.steps().len());
    let outputs = device.finish(work, &ring).unwrap();
    for output in &outputs {
        assert!(!output.is_armed() && !output.is_phantom());
        assert_eq!(
            device.download(output).unwrap(),
            HostValues::I32(vec![2; 5])
        );
    }
    assert!(device.fired().is_empty());
    assert_eq!(device.inner().ledger().recorded(), 1);
    drop(outputs);
    device.inner().check_quiescent().unwrap();
}

#[test]
fn an_exchange_fault_without_a_step_strikes_the_first_step() {
    let device = faulty("exchange:error");
    let ring = plan(ReduceOperation::Sum, 2);
    let inputs = prepare_both(&device, [2, 2]);
    let mut work = device.begin(&devices(), inputs, &ring).unwrap();
    let error = device.exchange(&mut work, &ring.steps()[0]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "injected error in exchange step 0 in generation 0"
    );
}

#[test]
fn phantom_outputs_hold_nothing_and_cannot_be_used() {
    let device = faulty("outputs:count=3");
    let max = plan(ReduceOperation::Max, 1);
    let inputs = prepare_both(&device, [1, 1]);
    let work = device.begin(&devices(), inputs, &max).unwrap();
    let outputs = device.finish(work, &max).unwrap();
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
    let sum = plan(ReduceOperation::Sum, 1);
    let inputs = prepare_both(&device, [1, 1]);
    let work = device.begin(&devices(), inputs, &sum).unwrap();
    let mut outputs = device.finish(work, &sum).unwrap();
    assert_eq!(
        outputs
            .iter()
            .map(FaultyTensor::is_armed)
            .collect::<Vec<_>>(),
        [false, true]
    );
    outputs[1].disarm();
    drop(outputs);
    device.inner().check_quiescent().unwrap();
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
