//! The conformance suite passes on the simulated device (and on the fault decorator with an empty
//! plan, which must be transparent), and leaves nothing alive behind.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use ruccl_core::ReduceOperation;
use ruccl_sim::conformance::{self, ConformanceConfig};
use ruccl_sim::fault::{FaultPlan, FaultyDevice};
use ruccl_sim::{ElementType, SimDevice};

#[test]
fn sim_device_passes_the_default_conformance_suite() {
    let device = SimDevice::new();
    let report = conformance::run(
        &device,
        conformance::consecutive_devices,
        &ConformanceConfig::default(),
    );
    println!("{report}");
    report.assert_passed();
    assert!(report.checks > 150_000, "only {} checks ran", report.checks);
    device.check_quiescent().unwrap();
}

#[test]
fn sim_device_on_scattered_device_ids_passes() {
    // Ranks on devices 7, 3, 11, ...: nothing may assume rank r lives on device r.
    let scattered = |world: usize| {
        (0..world as u32)
            .map(|rank| ruccl_core::DeviceId::new((rank * 7 + 3) % 13 + 100))
            .collect()
    };
    let report = conformance::run(&SimDevice::new(), scattered, &ConformanceConfig::quick());
    report.assert_passed();
}

#[test]
fn unsupported_combinations_are_rejected_and_skipped() {
    let device = SimDevice::builder()
        .unsupported(ElementType::BF16, ReduceOperation::Product)
        .unsupported(ElementType::U8, ReduceOperation::Mean)
        .build();
    let report = conformance::run(
        &device,
        conformance::consecutive_devices,
        &ConformanceConfig::quick(),
    );
    report.assert_passed();
    assert_eq!(
        report.unsupported,
        vec!["prod on bfloat16".to_owned(), "avg on uint8".to_owned()]
    );
}

#[test]
fn faulty_device_with_an_empty_plan_passes() {
    let devices = conformance::consecutive_devices(8);
    let device = FaultyDevice::new(SimDevice::new(), devices, FaultPlan::none());
    let report = conformance::run(
        &device,
        conformance::consecutive_devices,
        &ConformanceConfig::quick(),
    );
    report.assert_passed();
    device.inner().check_quiescent().unwrap();
}

#[test]
fn a_single_device_configuration_skips_the_two_rank_checks() {
    let config = ConformanceConfig {
        worlds: vec![1],
        ..ConformanceConfig::quick()
    };
    let report = conformance::run(&SimDevice::new(), conformance::consecutive_devices, &config);
    report.assert_passed();
    assert_eq!(report.skipped.len(), 1, "{:?}", report.skipped);
    assert!(report.failures_of("validation").next().is_none());
}
