//! The conformance suite fails deliberately wrong devices, each on the check that names its bug.
//! Every wrong device wraps the simulated device (an [`Intercept`]) and breaks exactly one rule.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use ruccl_core::{
    Algorithm, Collective, DeviceId, NativeCollectiveDevice, Plan, ReduceOperation, Step, Transfer,
};
use ruccl_sim::conformance::{self, ConformanceConfig, ConformanceReport};
use ruccl_sim::{
    ElementType, HostValues, Intercept, Intercepted, SimDevice, SimError, SimPrepared, SimTensor,
    SimWork,
};
use std::time::Duration;

/// A wrong device: the simulated device with one rule broken by the intercept `B`.
fn wrong<B: Intercept<SimDevice>>(bug: B) -> Intercepted<SimDevice, B> {
    Intercepted::with(SimDevice::new(), bug)
}

fn check<B: Intercept<SimDevice>>(bug: B) -> ConformanceReport {
    let report = conformance::run(
        &wrong(bug),
        conformance::consecutive_devices,
        &ConformanceConfig::quick(),
    );
    assert!(!report.passed(), "a wrong device passed:\n{report}");
    report
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

/// Assert no failure of `check`.
fn assert_passes(report: &ConformanceReport, check: &str) {
    let hits: Vec<_> = report.failures_of(check).collect();
    assert!(
        hits.is_empty(),
        "unexpected failures of `{check}`:\n{report}"
    );
}

/// Rank `r` of the world is rank `W-1-r` to the wrapped device (a rank outside the world stays
/// outside it, for the device to refuse).
fn mirrored(rank: usize, world: usize) -> usize {
    if rank < world { world - 1 - rank } else { rank }
}

fn mirror_step(step: &Step, world: usize) -> Step {
    Step {
        combine: step.combine,
        transfers: step
            .transfers
            .iter()
            .map(|transfer| {
                Transfer::new(
                    mirrored(transfer.from, world),
                    mirrored(transfer.to, world),
                    transfer.range.clone(),
                )
            })
            .collect(),
    }
}

/// `plan` with every rank renamed `W-1-r`: a valid all-reduce plan whose folds run in
/// descending rank order (the wrapped device folds ascending in the new names).
fn mirror_plan(plan: &Plan) -> Plan {
    let world = plan.world();
    let mut parts = plan.clone().into_parts();
    parts.placements = (0..world)
        .map(|rank| plan.placement(mirrored(rank, world)))
        .collect();
    parts.outputs = (0..world)
        .map(|rank| plan.output(mirrored(rank, world)))
        .collect();
    parts.steps = plan
        .steps()
        .iter()
        .map(|step| mirror_step(step, world))
        .collect();
    Plan::from_parts(parts).expect("a mirrored all-reduce plan is verified")
}

/// Folds all-reduces in descending rank order instead of ascending: every rank still gets the
/// same bits, close to the right value — only the order differs.
#[derive(Clone)]
struct FoldsInDescendingOrder;

fn is_all_reduce(collective: Collective) -> bool {
    matches!(collective, Collective::AllReduce(_))
}

impl Intercept<SimDevice> for FoldsInDescendingOrder {
    fn begin(
        &self,
        inner: &SimDevice,
        devices: &[DeviceId],
        inputs: Vec<SimPrepared>,
        plan: &Plan,
    ) -> Result<SimWork, SimError> {
        if !is_all_reduce(plan.collective()) || devices.len() != plan.world() {
            return inner.begin(devices, inputs, plan);
        }
        let devices: Vec<DeviceId> = devices.iter().rev().copied().collect();
        let inputs: Vec<SimPrepared> = inputs.into_iter().rev().collect();
        inner.begin(&devices, inputs, &mirror_plan(plan))
    }

    fn exchange(
        &self,
        inner: &SimDevice,
        work: &mut SimWork,
        _index: usize,
        step: &Step,
    ) -> Result<(), SimError> {
        if !is_all_reduce(work.collective()) {
            return inner.exchange(work, step);
        }
        inner.exchange(work, &mirror_step(step, work.world()))
    }

    fn finish(
        &self,
        inner: &SimDevice,
        work: SimWork,
        plan: &Plan,
    ) -> Result<Vec<SimTensor>, SimError> {
        if !is_all_reduce(plan.collective()) {
            return inner.finish(work, plan);
        }
        let mut outputs = inner.finish(work, &mirror_plan(plan))?;
        outputs.reverse();
        Ok(outputs)
    }
}

#[test]
fn a_device_that_folds_in_another_order_fails_on_the_bits() {
    let report = check(FoldsInDescendingOrder);
    assert_fails_on(&report, "collective/bits");
    assert_fails_on(&report, "exchange/fold_order");
    assert!(
        report.failures_of("collective/bits").all(|failure| {
            failure.case.contains("all-reduce") && !failure.case.contains(" int")
        }),
        "only float all-reduces may differ:\n{report}"
    );
    // Every rank folds the same (wrong) way, and the values are as close as the right ones:
    // only the bit-for-bit reference sees it.
    assert_passes(&report, "collective/identical");
    assert_passes(&report, "collective/reference");
}

/// Sends read the state after earlier transfers of the same step wrote: each transfer runs as a
/// step of its own, in the order listed.
#[derive(Clone)]
struct ReadsPostStepState;

impl Intercept<SimDevice> for ReadsPostStepState {
    fn exchange(
        &self,
        inner: &SimDevice,
        work: &mut SimWork,
        _index: usize,
        step: &Step,
    ) -> Result<(), SimError> {
        for transfer in &step.transfers {
            let alone = Step {
                combine: step.combine,
                transfers: vec![transfer.clone()],
            };
            inner.exchange(work, &alone)?;
        }
        Ok(())
    }
}

#[test]
fn a_device_whose_sends_read_post_step_state_fails() {
    let report = check(ReadsPostStepState);
    assert_fails_on(&report, "exchange/pre_step_reads");
    assert_fails_on(&report, "collective/bits");
}

/// Runs a step's transfers between ranks first, then each local copy on its own: a local copy
/// reads its source after the same step has written it (planted slip of issue 30).
#[derive(Clone)]
struct RunsLocalCopiesLast;

impl Intercept<SimDevice> for RunsLocalCopiesLast {
    fn exchange(
        &self,
        inner: &SimDevice,
        work: &mut SimWork,
        _index: usize,
        step: &Step,
    ) -> Result<(), SimError> {
        let (local, between): (Vec<Transfer>, Vec<Transfer>) = step
            .transfers
            .iter()
            .cloned()
            .partition(|transfer| transfer.from == transfer.to);
        inner.exchange(
            work,
            &Step {
                combine: step.combine,
                transfers: between,
            },
        )?;
        for transfer in local {
            let alone = Step {
                combine: step.combine,
                transfers: vec![transfer],
            };
            inner.exchange(work, &alone)?;
        }
        Ok(())
    }
}

#[test]
fn a_device_whose_local_copies_read_post_step_state_fails() {
    let report = check(RunsLocalCopiesLast);
    assert_fails_on(&report, "exchange/local_copies");
    assert!(
        report
            .failures
            .iter()
            .all(|failure| failure.check == "exchange/local_copies"),
        "only steps with local copies may fail:\n{report}"
    );
}

/// Hands every rank the start of its buffer, whatever the plan's output range: a reduce-scatter
/// rank gets block 0 instead of its own.
#[derive(Clone)]
struct IgnoresOutputRanges;

impl Intercept<SimDevice> for IgnoresOutputRanges {
    fn finish(
        &self,
        inner: &SimDevice,
        work: SimWork,
        plan: &Plan,
    ) -> Result<Vec<SimTensor>, SimError> {
        let buffers: Vec<Option<HostValues>> =
            (0..work.world()).map(|rank| work.buffer(rank)).collect();
        let outputs = inner.finish(work, plan)?;
        Ok(outputs
            .into_iter()
            .zip(buffers)
            .enumerate()
            .map(|(rank, (output, buffer))| {
                let range = plan.output(rank);
                match buffer.and_then(|buffer| buffer.slice(0..range.len())) {
                    Some(start) if range.start > 0 => SimTensor::new(output.device(), start),
                    _ => output,
                }
            })
            .collect())
    }
}

#[test]
fn a_device_that_ignores_output_ranges_fails_on_reduce_scatter_and_scatter() {
    let report = check(IgnoresOutputRanges);
    assert_fails_on(&report, "collective/bits");
    assert_fails_on(&report, "collective/reference");
    assert_fails_on(&report, "exchange/plan");
    assert!(
        report
            .failures
            .iter()
            .all(|failure| failure.case.contains("scatter(")),
        "only reduce-scatter and scatter outputs start past 0:\n{report}"
    );
    assert!(
        report
            .failures
            .iter()
            .any(|failure| failure.case.contains(": scatter(")),
        "scatter is checked too:\n{report}"
    );
}

/// Forgets the `Mean` scaling: runs a mean as a sum.
#[derive(Clone)]
struct ForgetsMean;

/// The same plan for the sum, where the plan is for a mean.
fn as_sum(plan: &Plan) -> Option<Plan> {
    let collective = match plan.collective() {
        Collective::AllReduce(ReduceOperation::Mean) => Collective::AllReduce(ReduceOperation::Sum),
        Collective::ReduceScatter(ReduceOperation::Mean) => {
            Collective::ReduceScatter(ReduceOperation::Sum)
        }
        _ => return None,
    };
    Plan::new(collective, plan.algorithm(), plan.world(), plan.input_len()).ok()
}

impl Intercept<SimDevice> for ForgetsMean {
    fn begin(
        &self,
        inner: &SimDevice,
        devices: &[DeviceId],
        inputs: Vec<SimPrepared>,
        plan: &Plan,
    ) -> Result<SimWork, SimError> {
        inner.begin(devices, inputs, as_sum(plan).as_ref().unwrap_or(plan))
    }

    fn finish(
        &self,
        inner: &SimDevice,
        work: SimWork,
        plan: &Plan,
    ) -> Result<Vec<SimTensor>, SimError> {
        inner.finish(work, as_sum(plan).as_ref().unwrap_or(plan))
    }
}

#[test]
fn a_device_that_forgets_mean_fails_on_mean_only() {
    let report = check(ForgetsMean);
    assert_fails_on(&report, "collective/bits");
    assert_fails_on(&report, "collective/reference");
    assert!(
        report
            .failures
            .iter()
            .all(|failure| failure.case.contains("(avg)") && !failure.case.starts_with("W=1 ")),
        "only mean cases of two ranks or more may fail:\n{report}"
    );
}

/// Sends every transfer backwards, from the receiver to the sender (the old "sends to the wrong
/// neighbour").
#[derive(Clone)]
struct SendsBackwards;

impl Intercept<SimDevice> for SendsBackwards {
    fn exchange(
        &self,
        inner: &SimDevice,
        work: &mut SimWork,
        _index: usize,
        step: &Step,
    ) -> Result<(), SimError> {
        let backwards = Step {
            combine: step.combine,
            transfers: step
                .transfers
                .iter()
                .map(|transfer| Transfer::new(transfer.to, transfer.from, transfer.range.clone()))
                .collect(),
        };
        inner.exchange(work, &backwards)
    }
}

#[test]
fn a_device_that_sends_to_the_wrong_rank_fails() {
    let report = check(SendsBackwards);
    assert_fails_on(&report, "exchange/combine");
    assert_fails_on(&report, "exchange/overwrite");
    assert_fails_on(&report, "collective/reference");
}

/// Accepts inputs of different lengths, cutting or zero-padding them to rank 0's.
#[derive(Clone)]
struct AcceptsMismatchedLengths;

fn resized(values: &HostValues, length: usize) -> HostValues {
    let kept = values.slice(0..length.min(values.len())).unwrap();
    if kept.len() == length {
        return kept;
    }
    let padding = HostValues::zeros(values.element_type(), length - kept.len()).unwrap();
    match (kept, padding) {
        (HostValues::F32(mut v), HostValues::F32(p)) => {
            v.extend(p);
            HostValues::F32(v)
        }
        (HostValues::I32(mut v), HostValues::I32(p)) => {
            v.extend(p);
            HostValues::I32(v)
        }
        (kept, _) => kept,
    }
}

impl Intercept<SimDevice> for AcceptsMismatchedLengths {
    fn begin(
        &self,
        inner: &SimDevice,
        devices: &[DeviceId],
        inputs: Vec<SimPrepared>,
        plan: &Plan,
    ) -> Result<SimWork, SimError> {
        let length = inputs.first().map_or(0, |input| input.tensor().len());
        let fitted = inputs
            .into_iter()
            .map(|input| {
                let tensor = input.into_tensor();
                let values = resized(tensor.values(), length);
                inner.prepare(SimTensor::new(tensor.device(), values), tensor.device())
            })
            .collect::<Result<Vec<_>, _>>()?;
        inner.begin(devices, fitted, plan)
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
        _index: usize,
        step: &Step,
    ) -> Result<(), SimError> {
        let length = work.buffer_len();
        if let Some(transfer) = step.transfers.iter().find(|t| t.range.end > length) {
            panic!(
                "range end index {} out of range for slice of length {length}",
                transfer.range.end
            );
        }
        inner.exchange(work, step)
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

/// Ignores the `combine` flag: always combines, never overwrites.
#[derive(Clone)]
struct AlwaysCombines;

impl Intercept<SimDevice> for AlwaysCombines {
    fn exchange(
        &self,
        inner: &SimDevice,
        work: &mut SimWork,
        _index: usize,
        step: &Step,
    ) -> Result<(), SimError> {
        let combining = Step {
            combine: true,
            transfers: step.transfers.clone(),
        };
        inner.exchange(work, &combining)
    }
}

#[test]
fn a_device_that_never_overwrites_fails() {
    let report = check(AlwaysCombines);
    assert_fails_on(&report, "exchange/overwrite");
    assert_fails_on(&report, "exchange/plan");
    assert_fails_on(&report, "collective/bits");
}

/// Never returns from `exchange`.
#[derive(Clone)]
struct HangsInExchange;

impl Intercept<SimDevice> for HangsInExchange {
    fn exchange(
        &self,
        _inner: &SimDevice,
        _work: &mut SimWork,
        _index: usize,
        _step: &Step,
    ) -> Result<(), SimError> {
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

#[test]
fn a_device_that_hangs_is_reported_instead_of_hanging_the_suite() {
    let config = ConformanceConfig {
        worlds: vec![2],
        element_types: vec![ElementType::I32],
        operations: vec![ReduceOperation::Sum],
        kinds: vec![Collective::AllReduce(ReduceOperation::Sum)],
        algorithms: vec![Algorithm::Ring],
        timeout: Duration::from_millis(200),
        stall: Duration::from_millis(400),
        exchange: false,
        validation: false,
        ..ConformanceConfig::quick()
    };
    let report = conformance::run(
        &wrong(HangsInExchange),
        conformance::consecutive_devices,
        &config,
    );
    assert_fails_on(&report, "collective/hang");
    // The report names the rank stuck in the device and the generation it is in: the second
    // case (the first, of length 0, has no step to hang in).
    let hang = report.failures_of("collective/hang").next().unwrap();
    assert!(hang.detail.contains("in generation 1 ("), "{hang:?}");
    assert!(report.elapsed < Duration::from_secs(30), "{report}");
}

#[test]
fn the_simulated_device_itself_passes_the_quick_suite() {
    // The control: the teeth above are the intercepts' bugs, not the suite's.
    let report = conformance::run(
        &wrong(Transparent),
        conformance::consecutive_devices,
        &ConformanceConfig::quick(),
    );
    report.assert_passed();
}

/// Changes nothing.
#[derive(Clone)]
struct Transparent;

impl<D: NativeCollectiveDevice> Intercept<D> for Transparent {}
