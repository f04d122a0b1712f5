//! The conformance suite fails deliberately wrong devices, each on the check that names its bug.
//! Every wrong device wraps the simulated device and breaks exactly one rule.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use ruccl_core::{DeviceId, NativeCollectiveDevice, ReduceOperation};
use ruccl_sim::conformance::{self, ConformanceConfig, ConformanceReport};
use ruccl_sim::{
    HostValues, Intercept, Intercepted, SimDevice, SimError, SimPrepared, SimTensor, SimWork,
};
use std::ops::Range;

/// A wrong device: the simulated device with one rule broken by the intercept `B`.
fn wrong<B: Intercept<SimDevice>>(bug: B) -> Intercepted<SimDevice, B> {
    Intercepted::with(SimDevice::builder().balanced_steps(false).build(), bug)
}

fn check<B: Intercept<SimDevice>>(bug: B) -> ConformanceReport {
    conformance::run(
        &wrong(bug),
        conformance::consecutive_devices,
        &ConformanceConfig::quick(),
    )
}

/// Assert the report failed on `check`, and print what it said.
fn assert_fails_on(report: &ConformanceReport, check: &str) {
    let hits: Vec<_> = report.failures_of(check).collect();
    assert!(
        !hits.is_empty(),
        "expected failures of `{check}`, the report says:\n{report}"
    );
    println!("{} failures of {check}, e.g. {}", hits.len(), hits[0]);
}

/// Sends read the post-write state: each rank's send is applied one after another.
#[derive(Clone)]
struct ReadsPostWriteState;

impl Intercept<SimDevice> for ReadsPostWriteState {
    fn exchange(
        &self,
        inner: &SimDevice,
        work: &mut SimWork,
        _step: usize,
        ranges: &[Range<usize>],
        reduce: bool,
    ) -> Result<(), SimError> {
        for rank in 0..ranges.len() {
            let only: Vec<Range<usize>> = (0..ranges.len())
                .map(|other| {
                    if other == rank {
                        ranges[rank].clone()
                    } else {
                        0..0
                    }
                })
                .collect();
            inner.exchange(work, &only, reduce)?;
        }
        Ok(())
    }
}

#[test]
fn a_device_whose_sends_read_post_write_state_fails() {
    let report = check(ReadsPostWriteState);
    assert_fails_on(&report, "exchange/pre_step_reads");
}

/// Forgets the `Mean` scaling: reduces as `Sum`.
#[derive(Clone)]
struct ForgetsMeanScaling;

fn without_mean(operation: ReduceOperation) -> ReduceOperation {
    operation.combining()
}

impl Intercept<SimDevice> for ForgetsMeanScaling {
    fn begin(
        &self,
        inner: &SimDevice,
        devices: &[DeviceId],
        inputs: &[SimPrepared],
        operation: ReduceOperation,
    ) -> Result<SimWork, SimError> {
        inner.begin(devices, inputs, without_mean(operation))
    }

    fn finish(
        &self,
        inner: &SimDevice,
        work: SimWork,
        operation: ReduceOperation,
    ) -> Result<Vec<SimTensor>, SimError> {
        inner.finish(work, without_mean(operation))
    }
}

#[test]
fn a_device_that_forgets_mean_scaling_fails() {
    let report = check(ForgetsMeanScaling);
    assert_fails_on(&report, "all_reduce");
    assert!(
        report
            .failures_of("all_reduce")
            .all(|failure| failure.case.starts_with("W=") && failure.case.contains("avg")),
        "only mean cases may fail:\n{report}"
    );
}

/// Sends to the predecessor instead of the successor: runs the inner device on the reversed
/// ring, where its successor is our predecessor.
#[derive(Clone)]
struct SendsToPredecessor;

impl Intercept<SimDevice> for SendsToPredecessor {
    fn begin(
        &self,
        inner: &SimDevice,
        devices: &[DeviceId],
        inputs: &[SimPrepared],
        operation: ReduceOperation,
    ) -> Result<SimWork, SimError> {
        let devices: Vec<DeviceId> = devices.iter().rev().copied().collect();
        let inputs: Vec<SimPrepared> = inputs.iter().rev().cloned().collect();
        inner.begin(&devices, &inputs, operation)
    }

    fn exchange(
        &self,
        inner: &SimDevice,
        work: &mut SimWork,
        _step: usize,
        ranges: &[Range<usize>],
        reduce: bool,
    ) -> Result<(), SimError> {
        let reversed: Vec<Range<usize>> = ranges.iter().rev().cloned().collect();
        inner.exchange(work, &reversed, reduce)
    }

    fn finish(
        &self,
        inner: &SimDevice,
        work: SimWork,
        operation: ReduceOperation,
    ) -> Result<Vec<SimTensor>, SimError> {
        let mut outputs = inner.finish(work, operation)?;
        outputs.reverse();
        Ok(outputs)
    }
}

#[test]
fn a_device_that_sends_to_the_wrong_neighbour_fails() {
    let report = check(SendsToPredecessor);
    assert_fails_on(&report, "exchange/combine");
    assert_fails_on(&report, "exchange/overwrite");
}

/// Accepts inputs of different lengths, cutting or zero-padding them to rank 0's.
#[derive(Clone)]
struct AcceptsMismatchedLengths;

fn resized(values: &HostValues, length: usize) -> HostValues {
    fn fit<T: Clone + Default>(values: &[T], length: usize) -> Vec<T> {
        let mut values = values.to_vec();
        values.resize(length, T::default());
        values
    }
    match values {
        HostValues::F32(v) => HostValues::F32(fit(v, length)),
        HostValues::F64(v) => HostValues::F64(fit(v, length)),
        HostValues::F16(v) => HostValues::F16(fit(v, length)),
        HostValues::BF16(v) => HostValues::BF16(fit(v, length)),
        HostValues::I32(v) => HostValues::I32(fit(v, length)),
        HostValues::I64(v) => HostValues::I64(fit(v, length)),
    }
}

impl Intercept<SimDevice> for AcceptsMismatchedLengths {
    fn begin(
        &self,
        inner: &SimDevice,
        devices: &[DeviceId],
        inputs: &[SimPrepared],
        operation: ReduceOperation,
    ) -> Result<SimWork, SimError> {
        let length = inputs.first().map_or(0, |input| input.tensor().len());
        let fitted = inputs
            .iter()
            .map(|input| {
                let tensor = input.tensor();
                let values = resized(tensor.values(), length);
                inner.prepare(SimTensor::new(tensor.device(), values), tensor.device())
            })
            .collect::<Result<Vec<_>, _>>()?;
        inner.begin(devices, &fitted, operation)
    }
}

#[test]
fn a_device_that_accepts_mismatched_lengths_fails() {
    let report = check(AcceptsMismatchedLengths);
    assert_fails_on(&report, "validation/begin/length_mismatch");
    assert_eq!(
        report.failures.len(),
        report
            .failures_of("validation/begin/length_mismatch")
            .count(),
        "nothing else is wrong with it:\n{report}"
    );
}

/// Slices without checking bounds: an out-of-bounds range panics instead of returning an error.
#[derive(Clone)]
struct PanicsOnBadRanges;

impl Intercept<SimDevice> for PanicsOnBadRanges {
    fn exchange(
        &self,
        inner: &SimDevice,
        work: &mut SimWork,
        _step: usize,
        ranges: &[Range<usize>],
        reduce: bool,
    ) -> Result<(), SimError> {
        let length = inner.elements(work);
        if let Some(range) = ranges.iter().find(|range| range.end > length) {
            panic!(
                "range end index {} out of range for slice of length {length}",
                range.end
            );
        }
        inner.exchange(work, ranges, reduce)
    }
}

#[test]
fn a_device_that_panics_on_a_bad_range_fails() {
    let report = check(PanicsOnBadRanges);
    assert_fails_on(&report, "validation/exchange/out_of_bounds");
    assert!(
        report
            .failures_of("validation/exchange/out_of_bounds")
            .all(|failure| failure.detail.contains("panicked")),
        "{report}"
    );
}

/// Ignores the `reduce` flag: always combines, never overwrites.
#[derive(Clone)]
struct AlwaysCombines;

impl Intercept<SimDevice> for AlwaysCombines {
    fn exchange(
        &self,
        inner: &SimDevice,
        work: &mut SimWork,
        _step: usize,
        ranges: &[Range<usize>],
        _reduce: bool,
    ) -> Result<(), SimError> {
        inner.exchange(work, ranges, true)
    }
}

#[test]
fn a_device_that_never_overwrites_fails() {
    let report = check(AlwaysCombines);
    assert_fails_on(&report, "exchange/overwrite");
    assert_fails_on(&report, "exchange/schedule");
    assert_fails_on(&report, "all_reduce");
}

/// Never returns from `exchange`.
#[derive(Clone)]
struct HangsInExchange;

impl Intercept<SimDevice> for HangsInExchange {
    fn exchange(
        &self,
        _inner: &SimDevice,
        _work: &mut SimWork,
        _step: usize,
        _ranges: &[Range<usize>],
        _reduce: bool,
    ) -> Result<(), SimError> {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}

#[test]
fn a_device_that_hangs_is_reported_instead_of_hanging_the_suite() {
    let config = ConformanceConfig {
        worlds: vec![2],
        element_types: vec![ruccl_sim::ElementType::I32],
        operations: vec![ReduceOperation::Sum],
        timeout: std::time::Duration::from_millis(200),
        exchange: false,
        validation: false,
        ..ConformanceConfig::quick()
    };
    let report = conformance::run(
        &wrong(HangsInExchange),
        conformance::consecutive_devices,
        &config,
    );
    assert_fails_on(&report, "all_reduce/hang");
    assert!(
        report.elapsed < std::time::Duration::from_secs(30),
        "{report}"
    );
}
