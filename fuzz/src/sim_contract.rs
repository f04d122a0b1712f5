//! Target `sim_contract`: the executor contract (v3) on [`SimDevice`], call by call, against a
//! sequential model of the contract.
//!
//! An input decodes to device settings (in place or not, traffic recorded or not, one unsupported
//! operation), a plan (any of the eight collectives with any operation and root, a built-in
//! algorithm or a custom copy of one), devices and inputs that may break `begin`'s rules (too many
//! or too few, on the wrong device, of another type or length), then up to [`MAX_STEPS`]
//! `exchange` calls — the plan's own steps or arbitrary ones: general transfers between any ranks
//! (outside the world included) or local copies, landing where they are read or elsewhere;
//! ranges inverted, out of bounds or huge, targets past the buffers or overflowing; overlapping
//! sources, double writes, duplicate sources; combining or overwriting — and a `finish` with the
//! plan or another one.
//!
//! Every call either returns a [`SimError`] naming a rule the call really broke (and then changes
//! nothing), or does what the contract says. The typed errors are judged here (every rule a call
//! breaks, computed from the call; a step's as `SimError::Step` of the core's [`StepViolation`]
//! vocabulary); the values by the sim crate's public plan interpreter ([`run_steps`]) over the
//! steps the device accepted, bit for bit (a NaN matching any NaN; `Mean` on floats within one
//! rounding): every transfer, a local copy too, reads the state before the step and lands at
//! `at..at + len`; a combining step folds the senders below the receiver in ascending order, its
//! own value, a value it copies to itself, then the senders above (non-reducing collectives fold
//! as `Sum`); elements outside the placements start as zeros. `finish` returns rank `r`'s output
//! range on `devices[r]` (empty for every rank but the root of a reduce or gather) and records
//! the generation's successful steps in the ledger when the device records traffic; given a plan
//! of another collective, world or layout it answers `PlanChanged`.
//!
//! Floats have any bit pattern (NaNs, infinities, signed zeros, subnormals), so a fold in another
//! order shows in the bits. Once the case's values are all dropped, the device's census reads zero
//! live values and no double drop, whichever calls failed.

use crate::bytes::{Reader, Writer};
use crate::values::{RawSource, any_values, same_bits};
use ruccl_core::{
    Algorithm, Collective, DeviceId, NativeCollectiveDevice, Plan, ReduceOperation, Step,
    StepViolation, Transfer,
};
use ruccl_sim::conformance::interpret::{compare_bits, run_steps};
use ruccl_sim::{ElementType, SimDevice, SimError, SimPrepared, SimTensor, StepTraffic};
use std::collections::BTreeMap;
use std::ops::Range;

/// The largest world.
pub const MAX_WORLD: usize = 6;
/// The longest input.
pub const MAX_LEN: usize = 12;
/// The most `exchange` calls.
pub const MAX_STEPS: usize = 10;
/// The most transfers of an explicit step.
pub const MAX_TRANSFERS: usize = 6;
/// The algorithms a plan is built with (`Custom`: a custom copy of the ring plan).
pub const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::Ring,
    Algorithm::Direct,
    Algorithm::HalvingDoubling,
    Algorithm::Custom,
];

/// One sequence of device calls.
#[derive(Clone, Debug, PartialEq)]
pub struct ContractCase {
    /// The device may use an input's allocation as its buffer.
    pub in_place: bool,
    /// The device records traffic.
    pub record_traffic: bool,
    /// One (element type, operation) the device is told not to support.
    pub unsupported: Option<(ElementType, ReduceOperation)>,
    /// The plan `begin` gets.
    pub plan: PlanChoice,
    /// `devices[r]` is rank `r`'s device index (repeats allowed); usually one per rank.
    pub devices: Vec<u8>,
    /// The element type most inputs have.
    pub element_type: ElementType,
    /// The inputs, usually one per rank.
    pub inputs: Vec<InputPlan>,
    /// The `exchange` calls.
    pub steps: Vec<StepPlan>,
    /// The plan `finish` gets, if not `plan`.
    pub finish: Option<PlanChoice>,
    /// Seeds the element values.
    pub seed: u64,
}

/// A plan: built in, or a custom copy of the ring plan; a request the algorithm has no plan for
/// (halving-doubling on a world that is not a power of two, all-to-all but by direct, a size the
/// algorithm refuses for its traffic) falls back to `Auto`'s plan of the same collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanChoice {
    /// The collective.
    pub collective: Collective,
    /// The algorithm.
    pub algorithm: Algorithm,
    /// The world, at least 1.
    pub world: usize,
    /// Elements per input.
    pub input_len: usize,
}

impl PlanChoice {
    /// The plan.
    pub fn build(&self) -> Plan {
        let (world, input_len) = (self.world.max(1), self.input_len);
        let fixed = match self.algorithm {
            Algorithm::Custom => Algorithm::Ring,
            other => other,
        };
        let plan = Plan::new(self.collective, fixed, world, input_len)
            .or_else(|_| Plan::new(self.collective, Algorithm::Auto, world, input_len));
        let plan = match plan {
            Ok(plan) => plan,
            Err(error) => panic!("no plan for {self:?}: {error}"),
        };
        if self.algorithm == Algorithm::Custom {
            Plan::from_parts(plan.clone().into_parts())
                .unwrap_or_else(|violation| panic!("a built-in plan's parts: {violation}"))
        } else {
            plan
        }
    }

    fn decode(reader: &mut Reader<'_>) -> Self {
        let world = reader.between(1, MAX_WORLD);
        let mut collective = reader.pick(&Collective::KINDS);
        if collective.operation().is_some() {
            collective = collective.with_operation(reader.pick(&ReduceOperation::ALL));
        }
        if collective.root().is_some() {
            collective = collective.with_root(reader.below(world));
        }
        let mut input_len = reader.below(MAX_LEN + 1);
        if in_blocks(collective) {
            input_len = input_len.next_multiple_of(world);
        }
        Self {
            collective,
            algorithm: reader.pick(&ALGORITHMS),
            world,
            input_len,
        }
    }

    fn encode(&self, writer: &mut Writer) {
        writer.between(self.world, 1, MAX_WORLD);
        let kind = Collective::KINDS
            .iter()
            .position(|kind| {
                kind.with_operation(ReduceOperation::Sum).with_root(0)
                    == self
                        .collective
                        .with_operation(ReduceOperation::Sum)
                        .with_root(0)
            })
            .unwrap_or_else(|| panic!("no encoding for {}", self.collective));
        writer.below(kind, Collective::KINDS.len());
        if let Some(operation) = self.collective.operation() {
            writer.pick(&operation, &ReduceOperation::ALL);
        }
        if let Some(root) = self.collective.root() {
            writer.below(root, self.world);
        }
        writer.below(self.input_len, MAX_LEN + 1);
        writer.pick(&self.algorithm, &ALGORITHMS);
    }
}

/// Whether the collective takes `W` equal blocks per rank (reduce-scatter, scatter, all-to-all).
fn in_blocks(collective: Collective) -> bool {
    matches!(
        collective,
        Collective::ReduceScatter(_) | Collective::Scatter { .. } | Collective::AllToAll
    )
}

/// How one input deviates from the plan's shape.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct InputPlan {
    /// The device whose memory holds it (`None`: its rank's device, or device 99 past the
    /// devices).
    pub lives_on: Option<u8>,
    /// The device named to `prepare` (`None`: where it lives).
    pub prepare_on: Option<u8>,
    /// Its element type (`None`: the case's).
    pub element_type: Option<ElementType>,
    /// Its length (`None`: the plan's input length).
    pub length: Option<usize>,
}

/// One `exchange` call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepPlan {
    /// The plan's step `index` modulo one more than it has (the last: a step of no transfers).
    Planned {
        /// The step.
        index: u8,
    },
    /// This step.
    Explicit(Step),
}

/// How many of something per rank: usually one per rank, sometimes one too many or too few.
fn decode_count(reader: &mut Reader<'_>, world: usize) -> usize {
    match reader.below(8) {
        0 => world + 1,
        1 => world.saturating_sub(1),
        _ => world,
    }
}

fn encode_count(writer: &mut Writer, count: usize, world: usize) {
    if count == world {
        writer.below(2, 8);
    } else if count == world + 1 {
        writer.below(0, 8);
    } else {
        assert_eq!(count + 1, world, "a count the decoder cannot produce");
        writer.below(1, 8);
    }
}

/// How far an explicit range reaches: a little past the buffer.
fn reach(buffer_len: usize) -> usize {
    buffer_len + 3
}

impl ContractCase {
    /// Decode a case; every input decodes to one.
    pub fn decode(reader: &mut Reader<'_>) -> Self {
        let in_place = !reader.flag();
        let record_traffic = !reader.flag();
        let unsupported = reader.flag().then(|| {
            (
                reader.pick(&ElementType::ALL),
                reader.pick(&ReduceOperation::ALL),
            )
        });
        let plan = PlanChoice::decode(reader);
        let world = plan.world;
        let devices = (0..decode_count(reader, world))
            .map(|_| reader.below(8) as u8)
            .collect();
        let element_type = reader.pick(&ElementType::ALL);
        let inputs = (0..decode_count(reader, world))
            .map(|_| {
                if reader.below(4) != 0 {
                    return InputPlan::default();
                }
                InputPlan {
                    lives_on: reader.flag().then(|| reader.below(8) as u8),
                    prepare_on: reader.flag().then(|| reader.below(8) as u8),
                    element_type: reader.flag().then(|| reader.pick(&ElementType::ALL)),
                    length: reader.flag().then(|| reader.below(MAX_LEN + 1)),
                }
            })
            .collect();
        let buffer_len = plan.build().buffer_len();
        let steps = (0..reader.below(MAX_STEPS + 1))
            .map(|_| decode_step(reader, world, buffer_len))
            .collect();
        let finish = (reader.below(4) == 0).then(|| PlanChoice::decode(reader));
        let seed = reader.u64();
        Self {
            in_place,
            record_traffic,
            unsupported,
            plan,
            devices,
            element_type,
            inputs,
            steps,
            finish,
            seed,
        }
    }

    /// The bytes that decode to this case (within the decoder's bounds).
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::new();
        writer.flag(!self.in_place);
        writer.flag(!self.record_traffic);
        writer.flag(self.unsupported.is_some());
        if let Some((element_type, operation)) = self.unsupported {
            writer.pick(&element_type, &ElementType::ALL);
            writer.pick(&operation, &ReduceOperation::ALL);
        }
        self.plan.encode(&mut writer);
        let world = self.plan.world;
        encode_count(&mut writer, self.devices.len(), world);
        for &device in &self.devices {
            writer.below(usize::from(device), 8);
        }
        writer.pick(&self.element_type, &ElementType::ALL);
        encode_count(&mut writer, self.inputs.len(), world);
        for input in &self.inputs {
            if *input == InputPlan::default() {
                writer.below(1, 4);
                continue;
            }
            writer.below(0, 4);
            let mut optional = |value: Option<usize>, bound: usize| {
                writer.flag(value.is_some());
                if let Some(value) = value {
                    writer.below(value, bound);
                }
            };
            optional(input.lives_on.map(usize::from), 8);
            optional(input.prepare_on.map(usize::from), 8);
            optional(
                input.element_type.map(|element_type| {
                    ElementType::ALL
                        .iter()
                        .position(|&candidate| candidate == element_type)
                        .unwrap_or(0)
                }),
                ElementType::ALL.len(),
            );
            optional(input.length, MAX_LEN + 1);
        }
        let buffer_len = self.plan.build().buffer_len();
        writer.below(self.steps.len(), MAX_STEPS + 1);
        for step in &self.steps {
            encode_step(&mut writer, step, world, buffer_len);
        }
        match &self.finish {
            Some(plan) => {
                writer.below(0, 4);
                plan.encode(&mut writer);
            }
            None => writer.below(1, 4),
        }
        writer.u64(self.seed);
        writer.finish()
    }
}

fn decode_step(reader: &mut Reader<'_>, world: usize, buffer_len: usize) -> StepPlan {
    if reader.flag() {
        return StepPlan::Planned {
            index: reader.byte(),
        };
    }
    let combine = reader.flag();
    let reach = reach(buffer_len);
    let transfers = (0..reader.below(MAX_TRANSFERS + 1))
        .map(|_| {
            let from = reader.below(world + 2);
            let to = reader.below(world + 2);
            let start = reader.below(reach);
            let end = match reader.below(8) {
                0 => reader.below(reach),
                1 => usize::MAX - reader.below(reach),
                _ => start + reader.below(4),
            };
            // Usually the v2 meaning (the same indices on both ranks); else anywhere a little
            // past the buffer, or so far that the target's end overflows.
            let at = match reader.below(8) {
                0 => reader.below(reach),
                1 => usize::MAX - reader.below(reach),
                _ => start,
            };
            Transfer {
                from,
                to,
                range: start..end,
                at,
            }
        })
        .collect();
    StepPlan::Explicit(Step { combine, transfers })
}

fn encode_step(writer: &mut Writer, step: &StepPlan, world: usize, buffer_len: usize) {
    let step = match step {
        StepPlan::Planned { index } => {
            writer.flag(true);
            writer.byte(*index);
            return;
        }
        StepPlan::Explicit(step) => step,
    };
    writer.flag(false);
    writer.flag(step.combine);
    let reach = reach(buffer_len);
    writer.below(step.transfers.len(), MAX_TRANSFERS + 1);
    // A position a little past the buffer, or one near `usize::MAX`.
    let far = |writer: &mut Writer, value: usize| {
        if value < reach {
            writer.below(0, 8);
            writer.below(value, reach);
        } else {
            writer.below(1, 8);
            writer.below(usize::MAX - value, reach);
        }
    };
    for transfer in &step.transfers {
        writer.below(transfer.from, world + 2);
        writer.below(transfer.to, world + 2);
        let range = &transfer.range;
        writer.below(range.start, reach);
        if range.end >= range.start && range.end - range.start < 4 {
            writer.below(2, 8);
            writer.below(range.end - range.start, 4);
        } else {
            far(writer, range.end);
        }
        if transfer.at == range.start {
            writer.below(2, 8);
        } else {
            far(writer, transfer.at);
        }
    }
}

/// Decode `data` and check it; panics on any violation.
pub fn check(data: &[u8]) {
    check_case(&ContractCase::decode(&mut Reader::new(data)));
}

/// Check one case; panics on any violation. Once every value is dropped — on every path, the
/// refused calls' included — the device's census must read zero (DESIGN.md property 9).
pub fn check_case(case: &ContractCase) {
    let device = run_calls(case);
    if let Err(live) = device.check_quiescent() {
        panic!("values outlive the calls: {live}\n{case:?}");
    }
}

/// Make the device and run the case's calls on it, checking each; returns the device once every
/// value the calls made is dropped.
fn run_calls(case: &ContractCase) -> SimDevice {
    let mut builder = SimDevice::builder()
        .in_place(case.in_place)
        .record_traffic(case.record_traffic)
        .threads(1);
    if let Some((element_type, operation)) = case.unsupported {
        builder = builder.unsupported(element_type, operation);
    }
    let device = builder.build();
    let plan = case.plan.build();
    let devices: Vec<DeviceId> = case
        .devices
        .iter()
        .map(|&index| DeviceId::new(u32::from(index)))
        .collect();
    let mut source = RawSource::new(&[], case.seed);

    // prepare: an error exactly when the tensor lives elsewhere; then prepare where it lives.
    let mut prepared = Vec::new();
    let mut host = Vec::new();
    for (rank, input) in case.inputs.iter().enumerate() {
        let lives_on = input
            .lives_on
            .map(|index| DeviceId::new(u32::from(index)))
            .unwrap_or_else(|| devices.get(rank).copied().unwrap_or(DeviceId::new(99)));
        let element_type = input.element_type.unwrap_or(case.element_type);
        let length = input.length.unwrap_or(plan.input_len());
        let values = any_values(&mut source, element_type, length);
        let named = input
            .prepare_on
            .map_or(lives_on, |index| DeviceId::new(u32::from(index)));
        let tensor = SimTensor::new(lives_on, values.clone());
        match device.prepare(tensor.clone(), named) {
            Ok(ready) => {
                assert_eq!(
                    named, lives_on,
                    "prepare on {named} accepted a tensor on {lives_on}"
                );
                let kept = ready.tensor();
                assert!(
                    kept.device() == lives_on && same_bits(kept.values(), &values),
                    "prepare changed the tensor {tensor:?} into {kept:?}"
                );
                prepared.push(ready);
            }
            Err(error) => {
                assert_eq!(
                    error,
                    SimError::TensorOnWrongDevice {
                        expected: named,
                        actual: lives_on
                    },
                    "prepare on {named} of a tensor on {lives_on}"
                );
                match device.prepare(tensor, lives_on) {
                    Ok(ready) => prepared.push(ready),
                    Err(error) => panic!("prepare where the tensor lives: {error}"),
                }
            }
        }
        host.push(values);
    }

    let broken = begin_violations(&device, &devices, &prepared, &plan);
    let mut work = match device.begin(&devices, prepared, &plan) {
        Ok(work) => {
            assert!(
                broken.is_empty(),
                "begin accepted inputs that break {broken:?}"
            );
            work
        }
        Err(error) => {
            assert!(
                broken.contains(&error),
                "begin refused with {error:?}; the inputs break only {broken:?}"
            );
            assert_eq!(device.ledger().recorded(), 0, "a failed begin recorded");
            return device;
        }
    };
    let world = plan.world();
    assert_eq!(work.world(), world, "work.world()");
    assert_eq!(work.buffer_len(), plan.buffer_len(), "work.buffer_len()");
    assert_eq!(work.element_type(), host[0].element_type());
    assert_eq!(work.collective(), plan.collective());

    let mut accepted: Vec<Step> = Vec::new();
    let mut traffic: Vec<StepTraffic> = Vec::new();
    for (index, step) in case.steps.iter().enumerate() {
        let step = match step {
            StepPlan::Planned { index } => plan
                .steps()
                .get(usize::from(*index) % (plan.steps().len() + 1))
                .cloned()
                .unwrap_or(Step {
                    combine: false,
                    transfers: Vec::new(),
                }),
            StepPlan::Explicit(step) => step.clone(),
        };
        let broken = step_violations(&step, world, plan.buffer_len());
        match device.exchange(&mut work, &step) {
            Ok(()) => {
                assert!(
                    broken.is_empty(),
                    "exchange {index} {step:?} accepted, but it breaks {broken:?}"
                );
                if case.record_traffic {
                    traffic.push(StepTraffic::of(&step));
                }
                accepted.push(step);
            }
            Err(error) => assert!(
                broken.names(&error),
                "exchange {index} {step:?} refused with {error:?}; it breaks only {broken:?}"
            ),
        }
        assert_eq!(
            work.steps(),
            traffic.as_slice(),
            "the steps recorded after exchange {index}"
        );
    }

    let finish_plan = case
        .finish
        .map_or_else(|| plan.clone(), |choice| choice.build());
    let changed = SimError::PlanChanged {
        begun: plan.collective(),
        begun_world: world,
        finished: finish_plan.collective(),
        finished_world: finish_plan.world(),
    };
    // Another algorithm's plan for the same request has the same layout; anything else is
    // another plan.
    let same_layout = finish_plan.collective() == plan.collective()
        && finish_plan.world() == world
        && finish_plan.input_len() == plan.input_len()
        && finish_plan.buffer_len() == plan.buffer_len()
        && finish_plan.placements() == plan.placements()
        && finish_plan.outputs() == plan.outputs();
    match device.finish(work, &finish_plan) {
        Ok(outputs) => {
            assert!(
                same_layout,
                "finish accepted {finish_plan:?} for a generation begun with {plan:?}"
            );
            assert_eq!(outputs.len(), world, "finish: one output per rank");
            // The same layout (checked above): the begun plan's outputs are the finishing one's.
            let interpreted = run_steps(&plan, &accepted, &host).unwrap_or_else(|error| {
                panic!("the device accepted steps the interpreter refuses: {error}\n{case:?}")
            });
            for (rank, output) in outputs.iter().enumerate() {
                assert_eq!(
                    output.device(),
                    devices[rank],
                    "rank {rank}'s output device"
                );
                if let Err(mismatch) =
                    compare_bits(plan.collective(), &interpreted[rank], output.values())
                {
                    panic!("rank {rank}'s output is not the interpreter's: {mismatch}\n{case:?}");
                }
            }
            if case.record_traffic {
                let Some(record) = device.ledger().last() else {
                    panic!("a successful finish recorded nothing");
                };
                assert_eq!(record.steps, traffic, "the ledger's steps");
                assert_eq!(record.devices, devices, "the ledger's devices");
                assert_eq!(
                    (record.collective, record.algorithm, record.input_len),
                    (plan.collective(), finish_plan.algorithm(), plan.input_len()),
                    "the ledger's record"
                );
                assert_eq!(record.element_type, host[0].element_type());
            } else {
                assert_eq!(device.ledger().recorded(), 0, "recorded with recording off");
            }
        }
        Err(error) => {
            assert!(
                error == changed && !same_layout,
                "finish with {finish_plan:?} after {plan:?} refused with {error:?}"
            );
            assert_eq!(device.ledger().recorded(), 0, "a failed finish recorded");
        }
    }
    device
}

/// Every error `begin` may rightly return; empty when the call is valid.
fn begin_violations(
    device: &SimDevice,
    devices: &[DeviceId],
    inputs: &[SimPrepared],
    plan: &Plan,
) -> Vec<SimError> {
    let mut broken = Vec::new();
    if devices.len() != inputs.len() || devices.len() != plan.world() {
        broken.push(SimError::InputCount {
            devices: devices.len(),
            inputs: inputs.len(),
            planned: plan.world(),
        });
    }
    let Some(first) = inputs.first() else {
        return broken;
    };
    let element_type = first.tensor().element_type();
    for (rank, (input, &expected)) in inputs.iter().zip(devices).enumerate() {
        let tensor = input.tensor();
        if tensor.device() != expected {
            broken.push(SimError::RankOnWrongDevice {
                rank,
                expected,
                actual: tensor.device(),
            });
        }
        if tensor.element_type() != element_type {
            broken.push(SimError::ElementTypeMismatch {
                rank,
                expected: element_type,
                actual: tensor.element_type(),
            });
        }
        if tensor.len() != plan.input_len() {
            broken.push(SimError::LengthMismatch {
                rank,
                expected: plan.input_len(),
                actual: tensor.len(),
            });
        }
    }
    if let Some(operation) = plan.collective().operation() {
        if !device.supports(element_type, operation) {
            broken.push(SimError::UnsupportedOperation {
                operation,
                element_type,
            });
        }
    }
    broken
}

/// What is wrong with a step, by the contract's rules for a step (DESIGN.md, contract v3),
/// computed here from the transfers themselves: every `exchange` refusal must name one of these.
#[derive(Clone, Debug, Default)]
struct StepBreaks {
    /// Malformed transfers: a rank outside the world (`NoSuchRank`), a range inverted or a source
    /// or target leaving the buffers (`OutOfBounds`, empty ranges included).
    malformed: Vec<StepViolation>,
    /// `(receiver, element, senders)` for every element an overwriting step writes more than
    /// once (one entry per writing transfer, so a sender may repeat).
    double_writes: Vec<(usize, usize, Vec<usize>)>,
    /// `(receiver, element, sender)` for every element a combining step folds one sender into
    /// more than once (a local copy's sender is the receiver).
    duplicate_sources: Vec<(usize, usize, usize)>,
}

impl StepBreaks {
    /// Whether the step breaks no rule.
    fn is_empty(&self) -> bool {
        self.malformed.is_empty()
            && self.double_writes.is_empty()
            && self.duplicate_sources.is_empty()
    }

    /// Whether `error` names one of the breaks. A malformed transfer is reported before a second
    /// writer of an element (which needs well-formed transfers to be defined at all).
    fn names(&self, error: &SimError) -> bool {
        let SimError::Step(violation) = error else {
            return false;
        };
        if !self.malformed.is_empty() {
            return self.malformed.contains(violation);
        }
        match violation {
            StepViolation::DoubleWrite {
                rank,
                element,
                first,
                second,
            } => self.double_writes.iter().any(|(to, at, senders)| {
                let count = |sender: &usize| senders.iter().filter(|&s| s == sender).count();
                (to, at) == (rank, element)
                    && count(first) >= 1
                    && count(second) >= 1
                    && (first != second || count(first) >= 2)
            }),
            StepViolation::DuplicateSource {
                rank,
                element,
                from,
            } => self.duplicate_sources.contains(&(*rank, *element, *from)),
            _ => false,
        }
    }
}

/// Every rule `step` breaks on `world` ranks with buffers of `buffer_len` elements: a transfer
/// reads `range` of `from`'s buffer and lands at `at..at + len` of `to`'s (`from == to`: a local
/// copy, allowed); both ranks in the world; the range not inverted; source and target inside the
/// buffers; an overwriting step writes each element at most once, a combining step folds each
/// sender into an element at most once.
fn step_violations(step: &Step, world: usize, buffer_len: usize) -> StepBreaks {
    let mut broken = StepBreaks::default();
    for (number, transfer) in step.transfers.iter().enumerate() {
        for rank in [transfer.from, transfer.to] {
            if rank >= world {
                broken.malformed.push(StepViolation::NoSuchRank {
                    transfer: number,
                    rank,
                    world,
                });
            }
        }
        let (start, end, at) = (transfer.range.start, transfer.range.end, transfer.at);
        let length = end.saturating_sub(start);
        let target_inside = at
            .checked_add(length)
            .is_some_and(|target_end| target_end <= buffer_len);
        if start > end || end > buffer_len || !target_inside {
            broken.malformed.push(StepViolation::OutOfBounds {
                transfer: number,
                from: transfer.from,
                to: transfer.to,
                start,
                end,
                at,
                buffer_len,
            });
        }
    }
    if !broken.malformed.is_empty() {
        return broken;
    }
    // Who writes each (receiver, element), in transfer order.
    let mut writers: BTreeMap<(usize, usize), Vec<usize>> = BTreeMap::new();
    for transfer in &step.transfers {
        for target in transfer.target() {
            writers
                .entry((transfer.to, target))
                .or_default()
                .push(transfer.from);
        }
    }
    for ((rank, element), mut senders) in writers {
        if !step.combine {
            if senders.len() > 1 {
                broken.double_writes.push((rank, element, senders));
            }
            continue;
        }
        senders.sort_unstable();
        for pair in senders.windows(2) {
            if pair[0] == pair[1] {
                broken.duplicate_sources.push((rank, element, pair[0]));
            }
        }
    }
    broken
}

/// Readable seed cases: each collective's plan run whole, overlapping and multi-source steps,
/// every validation error, a finish with another plan.
pub fn seeds() -> Vec<(&'static str, ContractCase)> {
    use Collective::*;
    use ElementType::*;
    use ReduceOperation::*;
    let choice = |collective, algorithm, world, input_len| PlanChoice {
        collective,
        algorithm,
        world,
        input_len,
    };
    let case = |plan: PlanChoice, element_type, steps| ContractCase {
        in_place: true,
        record_traffic: true,
        unsupported: None,
        plan,
        devices: (0..plan.world as u8).collect(),
        element_type,
        inputs: vec![InputPlan::default(); plan.world],
        steps,
        finish: None,
        seed: 7,
    };
    let whole = |count: u8| {
        (0..count)
            .map(|index| StepPlan::Planned { index })
            .collect::<Vec<_>>()
    };
    let t = |from, to, range| Transfer::new(from, to, range);
    let at = |from, to, range, at| Transfer {
        from,
        to,
        range,
        at,
    };
    let explicit = |combine, transfers| StepPlan::Explicit(Step { combine, transfers });
    vec![
        (
            "ring_all_reduce_whole",
            case(choice(AllReduce(Sum), Algorithm::Ring, 3, 7), F32, whole(4)),
        ),
        (
            "direct_reduce_scatter_mean_f16",
            case(
                choice(ReduceScatter(Mean), Algorithm::Direct, 4, 8),
                F16,
                whole(1),
            ),
        ),
        (
            "halving_doubling_all_gather_out_of_place",
            ContractCase {
                in_place: false,
                ..case(
                    choice(AllGather, Algorithm::HalvingDoubling, 4, 3),
                    I64,
                    whole(2),
                )
            },
        ),
        (
            "custom_broadcast",
            case(
                choice(Broadcast { root: 1 }, Algorithm::Custom, 3, 5),
                BF16,
                whole(3),
            ),
        ),
        (
            "overlapping_sources_read_pre_step_state",
            case(
                choice(AllReduce(Product), Algorithm::Ring, 3, 4),
                F64,
                vec![
                    explicit(true, vec![t(0, 1, 0..2), t(1, 2, 0..2), t(2, 0, 0..2)]),
                    explicit(false, vec![t(1, 0, 1..3), t(0, 2, 0..4)]),
                ],
            ),
        ),
        (
            "three_senders_fold_in_rank_order",
            case(
                choice(AllReduce(Sum), Algorithm::Direct, 4, 3),
                F32,
                vec![explicit(
                    true,
                    vec![t(3, 1, 0..3), t(0, 1, 1..3), t(2, 1, 0..2)],
                )],
            ),
        ),
        (
            "min_max_of_signed_zeros_and_nans",
            case(
                choice(AllReduce(Min), Algorithm::Direct, 5, 6),
                F64,
                whole(1),
            ),
        ),
        (
            "bad_ranks_and_ranges",
            case(
                choice(AllReduce(Min), Algorithm::Ring, 2, 3),
                F64,
                vec![
                    explicit(true, vec![t(0, 2, 0..1)]),
                    explicit(true, vec![t(1, 1, 0..1)]),
                    explicit(false, vec![t(0, 1, Range { start: 2, end: 1 })]),
                    explicit(false, vec![t(0, 1, 0..usize::MAX)]),
                    explicit(false, vec![t(1, 0, 4..4)]),
                ],
            ),
        ),
        (
            "double_write_and_duplicate_source",
            case(
                choice(AllGather, Algorithm::Ring, 3, 2),
                I8,
                vec![
                    explicit(false, vec![t(0, 2, 0..2), t(1, 2, 1..2)]),
                    explicit(true, vec![t(0, 1, 0..2), t(0, 1, 1..3)]),
                    StepPlan::Planned { index: 0 },
                ],
            ),
        ),
        (
            "finish_with_another_collective",
            ContractCase {
                finish: Some(choice(AllReduce(Max), Algorithm::Ring, 2, 2)),
                ..case(choice(AllReduce(Sum), Algorithm::Ring, 2, 2), I32, whole(2))
            },
        ),
        (
            "finish_with_another_algorithm",
            ContractCase {
                finish: Some(choice(AllGather, Algorithm::Direct, 2, 2)),
                ..case(choice(AllGather, Algorithm::Ring, 2, 2), U64, whole(1))
            },
        ),
        (
            "unsupported_operation",
            ContractCase {
                unsupported: Some((F32, Product)),
                ..case(
                    choice(ReduceScatter(Product), Algorithm::Ring, 2, 2),
                    F32,
                    whole(1),
                )
            },
        ),
        (
            "no_traffic_record",
            ContractCase {
                record_traffic: false,
                ..case(
                    choice(AllReduce(Mean), Algorithm::Ring, 2, 5),
                    I64,
                    whole(2),
                )
            },
        ),
        (
            "mismatched_inputs",
            ContractCase {
                inputs: vec![
                    InputPlan::default(),
                    InputPlan {
                        element_type: Some(F64),
                        ..InputPlan::default()
                    },
                    InputPlan {
                        length: Some(3),
                        ..InputPlan::default()
                    },
                    InputPlan {
                        lives_on: Some(7),
                        ..InputPlan::default()
                    },
                ],
                ..case(choice(AllReduce(Sum), Algorithm::Ring, 4, 5), F32, whole(6))
            },
        ),
        (
            "prepare_on_the_wrong_device",
            ContractCase {
                inputs: vec![
                    InputPlan {
                        prepare_on: Some(5),
                        ..InputPlan::default()
                    },
                    InputPlan::default(),
                ],
                ..case(
                    choice(Broadcast { root: 0 }, Algorithm::Direct, 2, 2),
                    I32,
                    whole(1),
                )
            },
        ),
        (
            "too_many_inputs_and_too_few_devices",
            ContractCase {
                devices: vec![0],
                inputs: vec![InputPlan::default(); 3],
                ..case(choice(AllReduce(Sum), Algorithm::Ring, 2, 2), I32, whole(2))
            },
        ),
        // Contract v3: the four new collectives run whole, transfers that land elsewhere, local
        // copies and folds, and the step rules they can break.
        (
            "direct_all_to_all_in_place",
            case(choice(AllToAll, Algorithm::Direct, 3, 6), I32, whole(1)),
        ),
        (
            "all_to_all_by_ring_falls_back_to_direct",
            case(choice(AllToAll, Algorithm::Ring, 2, 4), U64, whole(1)),
        ),
        (
            "ring_reduce_max_to_root_two",
            case(
                choice(Reduce { op: Max, root: 2 }, Algorithm::Ring, 4, 7),
                F32,
                whole(4),
            ),
        ),
        (
            "custom_reduce_mean",
            case(
                choice(Reduce { op: Mean, root: 1 }, Algorithm::Custom, 3, 4),
                I64,
                whole(3),
            ),
        ),
        (
            "halving_doubling_gather_out_of_place",
            ContractCase {
                in_place: false,
                ..case(
                    choice(Gather { root: 1 }, Algorithm::HalvingDoubling, 4, 2),
                    U8,
                    whole(2),
                )
            },
        ),
        (
            "ring_scatter_f16",
            case(
                choice(Scatter { root: 0 }, Algorithm::Ring, 3, 6),
                F16,
                whole(2),
            ),
        ),
        (
            "local_copies_and_blocks_landing_elsewhere",
            case(
                choice(AllGather, Algorithm::Direct, 3, 2),
                F64,
                vec![
                    // Rank 0 moves three elements one place up (onto its own source) while rank
                    // 1's elements 2..4 land at rank 0's 4..6.
                    explicit(false, vec![at(0, 0, 0..3, 1), at(1, 0, 2..4, 4)]),
                    // Rank 1 folds rank 0's, its own, its own elements 0..2 and rank 2's.
                    explicit(
                        true,
                        vec![at(2, 1, 0..2, 4), at(1, 1, 0..2, 4), at(0, 1, 4..6, 4)],
                    ),
                ],
            ),
        ),
        (
            "targets_out_of_bounds_double_writes_and_duplicate_local_sources",
            case(
                choice(AllReduce(Sum), Algorithm::Ring, 2, 3),
                F32,
                vec![
                    explicit(false, vec![at(0, 1, 0..2, 2)]),
                    explicit(false, vec![at(0, 1, 0..1, usize::MAX)]),
                    explicit(false, vec![at(0, 1, 0..2, 0), at(1, 1, 1..3, 1)]),
                    explicit(true, vec![at(1, 1, 0..1, 2), at(1, 1, 2..3, 2)]),
                    explicit(true, vec![at(0, 1, 0..2, 1)]),
                    explicit(false, vec![at(1, 0, Range { start: 2, end: 1 }, 0)]),
                ],
            ),
        ),
    ]
}

/// The old format's regressions, in this one: `(name, case)`, written as
/// `corpus/sim_contract/regression-<name>`.
pub fn regressions() -> Vec<(&'static str, ContractCase)> {
    let two_ranks = |element_type, steps| ContractCase {
        in_place: true,
        record_traffic: true,
        unsupported: None,
        plan: PlanChoice {
            collective: Collective::AllReduce(ReduceOperation::Sum),
            algorithm: Algorithm::Ring,
            world: 2,
            input_len: 8,
        },
        devices: vec![0, 1],
        element_type,
        inputs: vec![InputPlan::default(); 2],
        steps,
        finish: None,
        seed: NAN_SEED,
    };
    vec![
        (
            "nan_inputs_through_prepare",
            two_ranks(
                ElementType::F32,
                (0..2).map(|index| StepPlan::Planned { index }).collect(),
            ),
        ),
        (
            "ranges_of_maximal_length",
            two_ranks(
                ElementType::I64,
                vec![StepPlan::Explicit(Step {
                    combine: true,
                    transfers: vec![
                        Transfer::new(0, 1, 0..usize::MAX),
                        Transfer::new(1, 0, 0..usize::MAX),
                    ],
                })],
            ),
        ),
    ]
}

/// A seed whose first f32 values (two ranks of eight) hold a NaN (checked by a test).
const NAN_SEED: u64 = 9;

#[cfg(test)]
mod tests {
    use super::{
        ContractCase, NAN_SEED, StepBreaks, StepPlan, regressions, seeds, step_violations,
    };
    use crate::bytes::Reader;
    use crate::values::{RawSource, any_values};
    use ruccl_core::{Step, StepViolation};
    use ruccl_sim::{ElementType, HostValues};

    #[test]
    fn seeds_decode_to_themselves() {
        for (name, case) in seeds().into_iter().chain(regressions()) {
            assert_eq!(
                ContractCase::decode(&mut Reader::new(&case.encode())),
                case,
                "{name}"
            );
        }
    }

    /// The v3 seeds' explicit steps are valid or break the rules their names say.
    #[test]
    fn the_v3_step_seeds_break_what_they_say() {
        let steps_of = |name: &str| -> Vec<Step> {
            let Some((_, case)) = seeds().into_iter().find(|(seed, _)| *seed == name) else {
                panic!("no seed {name}");
            };
            case.steps
                .into_iter()
                .filter_map(|step| match step {
                    StepPlan::Explicit(step) => Some(step),
                    StepPlan::Planned { .. } => None,
                })
                .collect()
        };
        for step in steps_of("local_copies_and_blocks_landing_elsewhere") {
            assert!(step_violations(&step, 3, 6).is_empty(), "{step:?}");
        }
        let breaks: Vec<StepBreaks> =
            steps_of("targets_out_of_bounds_double_writes_and_duplicate_local_sources")
                .iter()
                .map(|step| step_violations(step, 2, 3))
                .collect();
        let out_of_bounds = |index: usize| {
            matches!(
                breaks[index].malformed.as_slice(),
                [StepViolation::OutOfBounds { .. }]
            )
        };
        assert!(out_of_bounds(0) && out_of_bounds(1) && out_of_bounds(5));
        assert_eq!(breaks[2].double_writes, vec![(1, 1, vec![0, 1])]);
        assert_eq!(breaks[3].duplicate_sources, vec![(1, 2, 1)]);
        assert!(breaks[4].is_empty());
    }

    #[test]
    fn the_nan_seed_draws_a_nan() {
        let mut source = RawSource::new(&[], NAN_SEED);
        let values = any_values(&mut source, ElementType::F32, 16);
        let HostValues::F32(values) = values else {
            panic!("f32 values");
        };
        assert!(values.iter().any(|value| value.is_nan()), "{values:?}");
    }
}
