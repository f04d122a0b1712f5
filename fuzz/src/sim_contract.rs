//! Target `sim_contract`: arbitrary calls straight into a [`SimDevice`] — tensors on the right
//! or wrong device, of mixed types and lengths, any number of inputs, then any sequence of
//! exchange steps (ranges in or out of bounds, inverted, unbalanced, too few or too many,
//! combining or overwriting) and a `finish` with the same or another operation.
//!
//! Every call either does exactly what a simple model of the contract does, or returns a
//! [`SimError`] naming a rule the call really broke; nothing panics. The model of one step:
//! every rank `r` sends `ranges[r]` of its *pre-step* buffer to `(r + 1) % W` only, which
//! combines it with its own pre-step elements (reduce) or overwrites them with it. A failed call
//! changes nothing. `finish` applies the `Mean` scaling and records the successful steps in the
//! ledger (when the device records traffic).
//!
//! Floats are compared bit for bit (any NaN matching any NaN): the model computes each element with
//! the same IEEE operation the device documents (half types through f32, rounded once).

use crate::bytes::{Reader, Writer};
use crate::values::{RawSource, any_values};
use half::{bf16, f16};
use ruccl_core::{DeviceId, NativeCollectiveDevice, ReduceOperation, RingSchedule};
use ruccl_sim::{
    ElementType, GenerationTraffic, HostValues, SimDevice, SimError, SimPrepared, SimTensor,
    StepTraffic,
};
use std::ops::Range;

/// The largest world.
pub const MAX_WORLD: usize = 6;
/// The largest tensor length.
pub const MAX_LENGTH: usize = 16;
/// The most exchange calls.
pub const MAX_STEPS: usize = 10;

/// One sequence of device calls.
#[derive(Clone, Debug, PartialEq)]
pub struct ContractCase {
    /// The device rejects unbalanced steps.
    pub balanced_steps: bool,
    /// The device records traffic.
    pub record_traffic: bool,
    /// One (element type, operation) combination the device is told not to support.
    pub unsupported: Option<(ElementType, ReduceOperation)>,
    /// `devices[r]` is rank `r`'s device index (repeats allowed: the device does not care).
    pub devices: Vec<u8>,
    /// The element type most inputs have.
    pub element_type: ElementType,
    /// The length most inputs have.
    pub length: usize,
    /// The inputs given to `begin`, usually one per device.
    pub inputs: Vec<InputPlan>,
    /// The operation given to `begin`.
    pub operation: ReduceOperation,
    /// The exchange calls.
    pub steps: Vec<StepPlan>,
    /// The operation given to `finish`.
    pub finish_operation: ReduceOperation,
    /// Seeds the element values.
    pub seed: u64,
}

/// How one input deviates from the case's shape.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct InputPlan {
    /// The device whose memory holds it (`None`: its rank's device, or device 99 past the world).
    pub lives_on: Option<u8>,
    /// The device named to `prepare` (`None`: where it lives).
    pub prepare_on: Option<u8>,
    /// Its element type (`None`: the case's).
    pub element_type: Option<ElementType>,
    /// Its length (`None`: the case's).
    pub length: Option<usize>,
}

/// One `exchange` call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepPlan {
    /// Step `index` of the ring schedule for the world and length (if it has one; otherwise no
    /// ranges at all).
    Schedule {
        /// The step.
        index: usize,
    },
    /// These ranges and this flag.
    Explicit {
        /// `(start, end)` per sending rank; `usize::MAX` stands in for huge values.
        ranges: Vec<(usize, usize)>,
        /// Combine (`true`) or overwrite.
        reduce: bool,
    },
}

impl ContractCase {
    /// Decode a case; every input decodes to one.
    pub fn decode(reader: &mut Reader<'_>) -> Self {
        let balanced_steps = !reader.flag();
        let record_traffic = !reader.flag();
        let unsupported = reader.flag().then(|| {
            (
                reader.pick(&ElementType::ALL),
                reader.pick(&ReduceOperation::ALL),
            )
        });
        let world = reader.below(MAX_WORLD + 1);
        let devices = (0..world).map(|_| reader.byte() % 8).collect();
        let element_type = reader.pick(&ElementType::ALL);
        let length = reader.below(MAX_LENGTH + 1);
        let count = match reader.below(8) {
            0 => world.saturating_sub(1),
            1 => world + 1,
            _ => world,
        };
        let inputs = (0..count)
            .map(|_| {
                if reader.below(4) != 0 {
                    return InputPlan::default();
                }
                InputPlan {
                    lives_on: reader.flag().then(|| reader.byte() % 8),
                    prepare_on: reader.flag().then(|| reader.byte() % 8),
                    element_type: reader.flag().then(|| reader.pick(&ElementType::ALL)),
                    length: reader.flag().then(|| reader.below(MAX_LENGTH + 1)),
                }
            })
            .collect();
        let operation = reader.pick(&ReduceOperation::ALL);
        let steps = (0..reader.below(MAX_STEPS + 1))
            .map(|_| decode_step(reader, world, length))
            .collect();
        let finish_operation = if reader.below(4) == 0 {
            reader.pick(&ReduceOperation::ALL)
        } else {
            operation
        };
        let seed = reader.u64();
        Self {
            balanced_steps,
            record_traffic,
            unsupported,
            devices,
            element_type,
            length,
            inputs,
            operation,
            steps,
            finish_operation,
            seed,
        }
    }

    /// The bytes that decode to this case.
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::new();
        writer.flag(!self.balanced_steps);
        writer.flag(!self.record_traffic);
        writer.flag(self.unsupported.is_some());
        if let Some((element_type, operation)) = self.unsupported {
            writer.pick(&element_type, &ElementType::ALL);
            writer.pick(&operation, &ReduceOperation::ALL);
        }
        let world = self.devices.len();
        writer.below(world, MAX_WORLD + 1);
        for &device in &self.devices {
            writer.below(usize::from(device), 8);
        }
        writer.pick(&self.element_type, &ElementType::ALL);
        writer.below(self.length, MAX_LENGTH + 1);
        let count = self.inputs.len();
        if count + 1 == world {
            writer.below(0, 8);
        } else if count == world + 1 {
            writer.below(1, 8);
        } else {
            assert_eq!(count, world, "an input count the decoder cannot produce");
            writer.below(2, 8);
        }
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
            optional(input.element_type.map(type_index), ElementType::ALL.len());
            optional(input.length, MAX_LENGTH + 1);
        }
        writer.pick(&self.operation, &ReduceOperation::ALL);
        writer.below(self.steps.len(), MAX_STEPS + 1);
        for step in &self.steps {
            encode_step(&mut writer, step, world, self.length);
        }
        if self.finish_operation == self.operation {
            writer.below(1, 4);
        } else {
            writer.below(0, 4);
            writer.pick(&self.finish_operation, &ReduceOperation::ALL);
        }
        writer.u64(self.seed);
        writer.finish()
    }
}

fn type_index(element_type: ElementType) -> usize {
    ElementType::ALL
        .iter()
        .position(|&candidate| candidate == element_type)
        .unwrap_or(0)
}

fn decode_step(reader: &mut Reader<'_>, world: usize, length: usize) -> StepPlan {
    if reader.flag() {
        return StepPlan::Schedule {
            index: reader.below(2 * world.max(1)),
        };
    }
    let reduce = reader.flag();
    let count = match reader.below(8) {
        0 => world.saturating_sub(1),
        1 => world + 1,
        _ => world,
    };
    let ranges = (0..count)
        .map(|_| {
            let mode = reader.below(8);
            let a = reader.below(length + 3);
            let b = reader.below(length + 3);
            match mode {
                6 => (a, b),
                7 => (a, usize::MAX - b),
                _ => (a.min(b), a.max(b)),
            }
        })
        .collect();
    StepPlan::Explicit { ranges, reduce }
}

fn encode_step(writer: &mut Writer, step: &StepPlan, world: usize, length: usize) {
    match step {
        StepPlan::Schedule { index } => {
            writer.flag(true);
            writer.below(*index, 2 * world.max(1));
        }
        StepPlan::Explicit { ranges, reduce } => {
            writer.flag(false);
            writer.flag(*reduce);
            // The decoder derives the count from the world; seeds keep one range per rank.
            writer.below(2, 8);
            for &(start, end) in ranges {
                if end >= usize::MAX - (length + 2) {
                    writer.below(7, 8);
                    writer.below(start, length + 3);
                    writer.below(usize::MAX - end, length + 3);
                } else {
                    writer.below(6, 8);
                    writer.below(start, length + 3);
                    writer.below(end, length + 3);
                }
            }
        }
    }
}

/// Decode `data` and check it; panics on any violation.
pub fn check(data: &[u8]) {
    check_case(&ContractCase::decode(&mut Reader::new(data)));
}

/// Check one case; panics on any violation.
pub fn check_case(case: &ContractCase) {
    let mut builder = SimDevice::builder()
        .balanced_steps(case.balanced_steps)
        .record_traffic(case.record_traffic);
    if let Some((element_type, operation)) = case.unsupported {
        builder = builder.unsupported(element_type, operation);
    }
    let device = builder.build();
    let devices: Vec<DeviceId> = case
        .devices
        .iter()
        .map(|&index| DeviceId::new(u32::from(index)))
        .collect();
    let world = devices.len();
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
        let values = any_values(
            &mut source,
            element_type,
            input.length.unwrap_or(case.length),
        );
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
                    kept.device() == tensor.device() && same_bits(kept.values(), tensor.values()),
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

    let broken = begin_violations(&device, &devices, &prepared, case.operation);
    let mut work = match device.begin(&devices, &prepared, case.operation) {
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
            assert!(device.ledger().records().is_empty());
            return;
        }
    };
    let length = host.first().map_or(0, HostValues::len);
    assert_eq!(device.elements(&work), length, "elements()");
    assert_eq!(work.world(), world);
    assert_eq!(work.length(), length);
    assert_eq!(work.element_type(), host[0].element_type());
    assert_eq!(work.operation(), case.operation);

    let mut model = Model::new(&host);
    let mut traffic: Vec<StepTraffic> = Vec::new();
    for (index, step) in case.steps.iter().enumerate() {
        let (ranges, reduce) = match step {
            StepPlan::Schedule { index } => match RingSchedule::new(world, length).step(*index) {
                Some(step) => (step.ranges, step.reduce),
                None => (Vec::new(), false),
            },
            StepPlan::Explicit { ranges, reduce } => (
                ranges.iter().map(|&(start, end)| start..end).collect(),
                *reduce,
            ),
        };
        let broken = exchange_violations(&ranges, world, length, case.balanced_steps);
        match device.exchange(&mut work, &ranges, reduce) {
            Ok(()) => {
                assert!(
                    broken.is_empty(),
                    "exchange {index} {ranges:?} accepted, but it breaks {broken:?}"
                );
                model.step(&ranges, reduce.then(|| case.operation.combining()));
                traffic.push(StepTraffic {
                    reduce,
                    sent: ranges.iter().map(Range::len).collect(),
                });
            }
            Err(error) => assert!(
                broken.contains(&error),
                "exchange {index} {ranges:?} refused with {error:?}; it breaks only {broken:?}"
            ),
        }
        assert_eq!(
            work.steps(),
            traffic.as_slice(),
            "the steps recorded after exchange {index}"
        );
    }

    match device.finish(work, case.finish_operation) {
        Ok(outputs) => {
            assert_eq!(
                case.finish_operation, case.operation,
                "finish with another operation succeeded"
            );
            if case.operation == ReduceOperation::Mean {
                model.divide(world);
            }
            assert_eq!(outputs.len(), world, "one output per rank");
            for (rank, output) in outputs.iter().enumerate() {
                assert_eq!(
                    output.device(),
                    devices[rank],
                    "rank {rank}'s output device"
                );
                let expected = model.values(rank);
                assert!(
                    same_bits(output.values(), &expected),
                    "rank {rank}: got {:?}, the model says {expected:?}",
                    output.values()
                );
            }
            let records = device.ledger().records();
            if case.record_traffic {
                let expected = GenerationTraffic {
                    sequence: 0,
                    devices: devices.clone(),
                    length,
                    element_type: host[0].element_type(),
                    operation: case.operation,
                    steps: traffic,
                };
                assert_eq!(records, vec![expected], "the ledger");
            } else {
                assert!(
                    records.is_empty(),
                    "a device that does not record traffic recorded {records:?}"
                );
                assert_eq!(device.ledger().recorded(), 0);
            }
        }
        Err(error) => {
            assert_eq!(
                error,
                SimError::OperationChanged {
                    begun: case.operation,
                    finished: case.finish_operation
                },
                "finish"
            );
            assert!(
                device.ledger().records().is_empty(),
                "a failed finish recorded traffic"
            );
        }
    }
}

/// Every error `begin` may rightly return for these inputs; empty when they are valid.
fn begin_violations(
    device: &SimDevice,
    devices: &[DeviceId],
    inputs: &[SimPrepared],
    operation: ReduceOperation,
) -> Vec<SimError> {
    let mut broken = Vec::new();
    if devices.len() != inputs.len() {
        broken.push(SimError::InputCount {
            devices: devices.len(),
            inputs: inputs.len(),
        });
    }
    if devices.is_empty() || inputs.is_empty() {
        broken.push(SimError::EmptyWorld);
    }
    let Some(first) = inputs.first() else {
        return broken;
    };
    let (element_type, length) = (first.tensor().element_type(), first.tensor().len());
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
        if tensor.len() != length {
            broken.push(SimError::LengthMismatch {
                rank,
                expected: length,
                actual: tensor.len(),
            });
        }
    }
    if !device.supports(element_type, operation) {
        broken.push(SimError::UnsupportedOperation {
            operation,
            element_type,
        });
    }
    broken
}

/// Every error `exchange` may rightly return for these ranges; empty when they are valid.
fn exchange_violations(
    ranges: &[Range<usize>],
    world: usize,
    length: usize,
    balanced: bool,
) -> Vec<SimError> {
    let mut broken = Vec::new();
    if ranges.len() != world {
        broken.push(SimError::RangeCount {
            ranges: ranges.len(),
            world,
        });
    }
    for (rank, range) in ranges.iter().enumerate() {
        let (start, end) = (range.start, range.end);
        if start > end {
            broken.push(SimError::InvertedRange { rank, start, end });
        }
        if end > length {
            broken.push(SimError::RangeOutOfBounds {
                rank,
                start,
                end,
                length,
            });
        }
    }
    if balanced {
        let lengths: Vec<usize> = ranges.iter().map(Range::len).collect();
        if let (Some(&short), Some(&long)) = (lengths.iter().min(), lengths.iter().max()) {
            if long - short > 1 {
                for (short_rank, _) in lengths.iter().enumerate().filter(|(_, len)| **len == short)
                {
                    for (long_rank, _) in
                        lengths.iter().enumerate().filter(|(_, len)| **len == long)
                    {
                        broken.push(SimError::UnbalancedStep {
                            short_rank,
                            short,
                            long_rank,
                            long,
                        });
                    }
                }
            }
        }
    }
    broken
}

/// One element type's arithmetic, as the simulated device documents it.
trait Arithmetic: Copy {
    fn combine(operation: ReduceOperation, mine: Self, theirs: Self) -> Self;
    fn divide(self, world: usize) -> Self;
}

macro_rules! float_arithmetic {
    ($type:ty) => {
        impl Arithmetic for $type {
            fn combine(operation: ReduceOperation, mine: Self, theirs: Self) -> Self {
                match operation {
                    ReduceOperation::Sum | ReduceOperation::Mean => mine + theirs,
                    ReduceOperation::Product => mine * theirs,
                    ReduceOperation::Min => mine.min(theirs),
                    ReduceOperation::Max => mine.max(theirs),
                }
            }
            fn divide(self, world: usize) -> Self {
                self / world as $type
            }
        }
    };
}

macro_rules! half_arithmetic {
    ($type:ty) => {
        impl Arithmetic for $type {
            fn combine(operation: ReduceOperation, mine: Self, theirs: Self) -> Self {
                <$type>::from_f32(f32::combine(operation, mine.to_f32(), theirs.to_f32()))
            }
            fn divide(self, world: usize) -> Self {
                <$type>::from_f32(self.to_f32() / world as f32)
            }
        }
    };
}

macro_rules! integer_arithmetic {
    ($type:ty) => {
        impl Arithmetic for $type {
            fn combine(operation: ReduceOperation, mine: Self, theirs: Self) -> Self {
                match operation {
                    ReduceOperation::Sum | ReduceOperation::Mean => mine.wrapping_add(theirs),
                    ReduceOperation::Product => mine.wrapping_mul(theirs),
                    ReduceOperation::Min => mine.min(theirs),
                    ReduceOperation::Max => mine.max(theirs),
                }
            }
            fn divide(self, world: usize) -> Self {
                // Worlds here are at most MAX_WORLD; `/` rounds toward zero.
                self / world as $type
            }
        }
    };
}

float_arithmetic!(f32);
float_arithmetic!(f64);
half_arithmetic!(f16);
half_arithmetic!(bf16);
integer_arithmetic!(i32);
integer_arithmetic!(i64);

/// One step on plain buffers: every destination reads only the pre-step state.
fn model_step<T: Arithmetic>(
    buffers: &mut [Vec<T>],
    ranges: &[Range<usize>],
    reduce: Option<ReduceOperation>,
) {
    let before = buffers.to_vec();
    let world = buffers.len();
    for (rank, range) in ranges.iter().enumerate() {
        let successor = (rank + 1) % world;
        for index in range.clone() {
            let sent = before[rank][index];
            buffers[successor][index] = match reduce {
                Some(operation) => T::combine(operation, before[successor][index], sent),
                None => sent,
            };
        }
    }
}

/// The model's buffers: every rank's elements, of the type rank 0's input has.
enum Model {
    F32(Vec<Vec<f32>>),
    F64(Vec<Vec<f64>>),
    F16(Vec<Vec<f16>>),
    BF16(Vec<Vec<bf16>>),
    I32(Vec<Vec<i32>>),
    I64(Vec<Vec<i64>>),
}

macro_rules! each_model {
    ($model:expr, $buffers:ident => $body:expr) => {
        match $model {
            Model::F32($buffers) => $body,
            Model::F64($buffers) => $body,
            Model::F16($buffers) => $body,
            Model::BF16($buffers) => $body,
            Model::I32($buffers) => $body,
            Model::I64($buffers) => $body,
        }
    };
}

impl Model {
    /// Copies of the inputs, which `begin` accepted (so they share rank 0's type).
    fn new(inputs: &[HostValues]) -> Self {
        macro_rules! gather {
            ($variant:ident) => {
                Model::$variant(
                    inputs
                        .iter()
                        .map(|values| match values {
                            HostValues::$variant(values) => values.clone(),
                            other => panic!("begin accepted mixed element types: {other:?}"),
                        })
                        .collect(),
                )
            };
        }
        match inputs.first().map(HostValues::element_type) {
            Some(ElementType::F32) => gather!(F32),
            Some(ElementType::F64) => gather!(F64),
            Some(ElementType::F16) => gather!(F16),
            Some(ElementType::BF16) => gather!(BF16),
            Some(ElementType::I32) => gather!(I32),
            _ => gather!(I64),
        }
    }

    fn step(&mut self, ranges: &[Range<usize>], reduce: Option<ReduceOperation>) {
        each_model!(self, buffers => model_step(buffers, ranges, reduce));
    }

    fn divide(&mut self, world: usize) {
        each_model!(self, buffers => {
            for element in buffers.iter_mut().flatten() {
                *element = element.divide(world);
            }
        });
    }

    fn values(&self, rank: usize) -> HostValues {
        match self {
            Model::F32(buffers) => HostValues::F32(buffers[rank].clone()),
            Model::F64(buffers) => HostValues::F64(buffers[rank].clone()),
            Model::F16(buffers) => HostValues::F16(buffers[rank].clone()),
            Model::BF16(buffers) => HostValues::BF16(buffers[rank].clone()),
            Model::I32(buffers) => HostValues::I32(buffers[rank].clone()),
            Model::I64(buffers) => HostValues::I64(buffers[rank].clone()),
        }
    }
}

/// Equal types, lengths and bits, any NaN matching any NaN.
fn same_bits(got: &HostValues, expected: &HostValues) -> bool {
    fn bits(values: &HostValues) -> Vec<Option<u64>> {
        let float = |value: f64, raw: u64| (!value.is_nan()).then_some(raw);
        match values {
            HostValues::F32(values) => values
                .iter()
                .map(|v| float(f64::from(*v), u64::from(v.to_bits())))
                .collect(),
            HostValues::F64(values) => values.iter().map(|v| float(*v, v.to_bits())).collect(),
            HostValues::F16(values) => values
                .iter()
                .map(|v| float(v.to_f64(), u64::from(v.to_bits())))
                .collect(),
            HostValues::BF16(values) => values
                .iter()
                .map(|v| float(v.to_f64(), u64::from(v.to_bits())))
                .collect(),
            HostValues::I32(values) => values.iter().map(|v| Some(*v as u32 as u64)).collect(),
            HostValues::I64(values) => values.iter().map(|v| Some(*v as u64)).collect(),
        }
    }
    got.element_type() == expected.element_type() && bits(got) == bits(expected)
}

/// Readable seed cases: valid ring runs, overlapping and self-sends, every validation error.
pub fn seeds() -> Vec<(&'static str, ContractCase)> {
    use ElementType::*;
    use ReduceOperation::*;
    let case = |world: usize, element_type, length, operation, steps| ContractCase {
        balanced_steps: true,
        record_traffic: true,
        unsupported: None,
        devices: (0..world as u8).collect(),
        element_type,
        length,
        inputs: vec![InputPlan::default(); world],
        operation,
        steps,
        finish_operation: operation,
        seed: 7,
    };
    let schedule = |count: usize| {
        (0..count)
            .map(|index| StepPlan::Schedule { index })
            .collect::<Vec<_>>()
    };
    let explicit = |ranges: Vec<(usize, usize)>, reduce| StepPlan::Explicit { ranges, reduce };
    vec![
        ("full_ring_i32_sum", case(3, I32, 7, Sum, schedule(4))),
        ("full_ring_f16_mean", case(4, F16, 9, Mean, schedule(6))),
        (
            "overlapping_sends_read_pre_step_state",
            ContractCase {
                balanced_steps: false,
                ..case(
                    3,
                    F32,
                    4,
                    Product,
                    vec![
                        explicit(vec![(0, 2), (0, 2), (0, 2)], true),
                        explicit(vec![(1, 3), (0, 4), (2, 2)], false),
                    ],
                )
            },
        ),
        (
            "one_rank_combines_with_itself",
            case(
                1,
                BF16,
                5,
                Max,
                vec![explicit(vec![(0, 5)], true), explicit(vec![(1, 4)], false)],
            ),
        ),
        (
            "out_of_bounds_and_inverted",
            case(
                2,
                F64,
                3,
                Min,
                vec![
                    explicit(vec![(0, 4), (1, 1)], true),
                    explicit(vec![(2, 1), (0, 1)], true),
                    explicit(vec![(0, usize::MAX), (0, 0)], false),
                ],
            ),
        ),
        (
            "unbalanced_step",
            case(
                3,
                I64,
                6,
                Sum,
                vec![explicit(vec![(0, 4), (0, 1), (0, 1)], true)],
            ),
        ),
        (
            "finish_with_another_operation",
            ContractCase {
                finish_operation: Max,
                ..case(2, I32, 2, Sum, schedule(2))
            },
        ),
        (
            "unsupported_operation",
            ContractCase {
                unsupported: Some((F32, Product)),
                ..case(2, F32, 2, Product, schedule(2))
            },
        ),
        (
            "no_traffic_record",
            ContractCase {
                record_traffic: false,
                ..case(2, I64, 5, Mean, schedule(2))
            },
        ),
        ("empty_world", case(0, I32, 0, Sum, Vec::new())),
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
                ..case(4, F32, 5, Sum, schedule(6))
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
                ..case(2, I32, 2, Sum, schedule(2))
            },
        ),
        (
            "too_many_inputs",
            ContractCase {
                inputs: vec![InputPlan::default(); 3],
                ..case(2, I32, 2, Sum, schedule(2))
            },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::{ContractCase, seeds};
    use crate::bytes::Reader;

    #[test]
    fn seeds_decode_to_themselves() {
        for (name, case) in seeds() {
            assert_eq!(
                ContractCase::decode(&mut Reader::new(&case.encode())),
                case,
                "{name}"
            );
        }
    }
}
