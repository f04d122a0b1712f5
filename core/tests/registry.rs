//! DESIGN property 6 (registry): one communicator per exact ordered device list, shared by
//! concurrent callers; aborted communicators are replaced, never handed out again.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

mod common;

use common::{Tensor, TestDevice, devices};
use ruccl_core::{DeviceId, NativeCommunicators, ReduceOperation};
use std::sync::{Arc, Barrier};
use std::thread;

#[test]
fn concurrent_requests_for_one_list_share_one_communicator() {
    let registry = Arc::new(NativeCommunicators::new(TestDevice::default()));
    let start = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let registry = Arc::clone(&registry);
            let start = Arc::clone(&start);
            thread::spawn(move || {
                start.wait();
                registry.communicator(devices(4)).unwrap()
            })
        })
        .collect();
    let communicators: Vec<_> = handles
        .into_iter()
        .map(|handle| handle.join().unwrap())
        .collect();
    for communicator in &communicators[1..] {
        assert!(Arc::ptr_eq(communicator, &communicators[0]));
    }
}

#[test]
fn the_same_devices_in_another_order_get_another_communicator() {
    let registry = NativeCommunicators::new(TestDevice::default());
    let forward = registry
        .communicator(vec![DeviceId::new(0), DeviceId::new(1)])
        .unwrap();
    let backward = registry
        .communicator(vec![DeviceId::new(1), DeviceId::new(0)])
        .unwrap();
    let subset = registry.communicator(vec![DeviceId::new(0)]).unwrap();
    assert!(!Arc::ptr_eq(&forward, &backward));
    assert!(!Arc::ptr_eq(&forward, &subset));
    assert_eq!(backward.devices(), &[DeviceId::new(1), DeviceId::new(0)]);
    let again = registry
        .communicator(vec![DeviceId::new(0), DeviceId::new(1)])
        .unwrap();
    assert!(Arc::ptr_eq(&forward, &again));
}

#[test]
fn an_aborted_communicator_is_replaced_by_a_working_one() {
    let registry = NativeCommunicators::new(TestDevice::default());
    let first = registry.communicator(devices(1)).unwrap();
    first.abort("broken");
    let second = registry.communicator(devices(1)).unwrap();
    assert!(!Arc::ptr_eq(&first, &second));
    assert!(first.is_aborted() && !second.is_aborted());
    let output = second
        .all_reduce(0, Tensor::new(0, vec![3, 4]), ReduceOperation::Sum)
        .unwrap();
    assert_eq!(output.into_values(), vec![3, 4]);
    // The replacement is what later callers share.
    assert!(Arc::ptr_eq(
        &second,
        &registry.communicator(devices(1)).unwrap()
    ));
}

#[test]
fn the_registry_and_a_communicator_debug_print_what_identifies_them() {
    let registry = NativeCommunicators::new(TestDevice::default());
    assert_eq!(format!("{registry:?}"), "NativeCommunicators { .. }");
    let communicator = registry
        .communicator(vec![DeviceId::new(3), DeviceId::new(1)])
        .unwrap();
    let shown = format!("{communicator:?}");
    assert!(shown.starts_with("NativeCommunicator"), "{shown}");
    let (three, one) = (
        format!("{:?}", DeviceId::new(3)),
        format!("{:?}", DeviceId::new(1)),
    );
    let at = |device: &str| shown.find(device).unwrap_or_else(|| panic!("{shown}"));
    assert!(at(&three) < at(&one), "{shown}");
}
