//! The simulated device enforces the executor contract with typed errors (never panics), leaves
//! its work untouched when it refuses a call, and computes with the documented arithmetic.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use half::bf16;
use ruccl_core::{DeviceId, NativeCollectiveDevice, NativeCommunicator, ReduceOperation};
use ruccl_sim::{
    ElementType, HostTensors, HostValues, SimDevice, SimError, SimPrepared, SimTensor,
};
use std::ops::Range;

fn id(index: u32) -> DeviceId {
    DeviceId::new(index)
}

fn prepared(device: &SimDevice, on: u32, values: HostValues) -> SimPrepared {
    device
        .prepare(SimTensor::new(id(on), values), id(on))
        .unwrap()
}

fn two_ranks(device: &SimDevice) -> (Vec<DeviceId>, Vec<SimPrepared>) {
    let inputs = vec![
        prepared(device, 0, HostValues::I64(vec![1, 2, 3, 4])),
        prepared(device, 1, HostValues::I64(vec![10, 20, 30, 40])),
    ];
    (vec![id(0), id(1)], inputs)
}

fn assert_one_line(error: &SimError) {
    let text = error.to_string();
    assert!(!text.is_empty() && !text.contains('\n'), "{text:?}");
}

#[test]
fn prepare_refuses_a_tensor_on_another_device() {
    let device = SimDevice::new();
    let error = device
        .prepare(SimTensor::new(id(0), HostValues::F32(vec![1.0])), id(1))
        .unwrap_err();
    assert_eq!(
        error,
        SimError::TensorOnWrongDevice {
            expected: id(1),
            actual: id(0)
        }
    );
    assert_eq!(
        error.to_string(),
        "prepare on device 1: the tensor lives on device 0"
    );
}

#[test]
fn begin_refuses_every_malformed_generation() {
    let device = SimDevice::builder()
        .unsupported(ElementType::I64, ReduceOperation::Product)
        .build();
    let (devices, inputs) = two_ranks(&device);
    let sum = ReduceOperation::Sum;
    let refusals = [
        (
            device.begin(&[], &[], sum).unwrap_err(),
            SimError::EmptyWorld,
        ),
        (
            device.begin(&devices, &inputs[..1], sum).unwrap_err(),
            SimError::InputCount {
                devices: 2,
                inputs: 1,
            },
        ),
        (
            device.begin(&[id(1), id(0)], &inputs, sum).unwrap_err(),
            SimError::RankOnWrongDevice {
                rank: 0,
                expected: id(1),
                actual: id(0),
            },
        ),
        (
            device
                .begin(
                    &devices,
                    &[
                        inputs[0].clone(),
                        prepared(&device, 1, HostValues::I64(vec![1])),
                    ],
                    sum,
                )
                .unwrap_err(),
            SimError::LengthMismatch {
                rank: 1,
                expected: 4,
                actual: 1,
            },
        ),
        (
            device
                .begin(
                    &devices,
                    &[
                        inputs[0].clone(),
                        prepared(&device, 1, HostValues::I32(vec![1, 2, 3, 4])),
                    ],
                    sum,
                )
                .unwrap_err(),
            SimError::ElementTypeMismatch {
                rank: 1,
                expected: ElementType::I64,
                actual: ElementType::I32,
            },
        ),
        (
            device
                .begin(&devices, &inputs, ReduceOperation::Product)
                .unwrap_err(),
            SimError::UnsupportedOperation {
                operation: ReduceOperation::Product,
                element_type: ElementType::I64,
            },
        ),
    ];
    for (error, expected) in refusals {
        assert_eq!(error, expected);
        assert_one_line(&error);
    }
    assert!(device.supports(ElementType::I64, ReduceOperation::Sum));
    assert!(!device.supports(ElementType::I64, ReduceOperation::Product));
}

#[test]
#[allow(clippy::reversed_empty_ranges)] // inverted ranges are one of the refusals under test
fn exchange_refuses_bad_ranges_and_leaves_the_work_untouched() {
    let device = SimDevice::new();
    let (devices, inputs) = two_ranks(&device);
    let mut work = device
        .begin(&devices, &inputs, ReduceOperation::Sum)
        .unwrap();
    let refusals: [(Vec<Range<usize>>, SimError); 5] = [
        (
            std::iter::once(0..1).collect(),
            SimError::RangeCount {
                ranges: 1,
                world: 2,
            },
        ),
        (
            vec![0..1, 1..2, 2..3],
            SimError::RangeCount {
                ranges: 3,
                world: 2,
            },
        ),
        (
            vec![0..1, 2..1],
            SimError::InvertedRange {
                rank: 1,
                start: 2,
                end: 1,
            },
        ),
        (
            vec![2..5, 0..3],
            SimError::RangeOutOfBounds {
                rank: 0,
                start: 2,
                end: 5,
                length: 4,
            },
        ),
        (
            vec![0..0, 1..3],
            SimError::UnbalancedStep {
                short_rank: 0,
                short: 0,
                long_rank: 1,
                long: 2,
            },
        ),
    ];
    for (ranges, expected) in refusals {
        let error = device.exchange(&mut work, &ranges, true).unwrap_err();
        assert_eq!(error, expected, "{ranges:?}");
        assert_one_line(&error);
    }
    assert!(work.steps().is_empty(), "refused steps are not traffic");
    let outputs = device.finish(work, ReduceOperation::Sum).unwrap();
    assert_eq!(outputs[0].values(), &HostValues::I64(vec![1, 2, 3, 4]));
    assert_eq!(outputs[1].values(), &HostValues::I64(vec![10, 20, 30, 40]));
}

#[test]
fn the_balance_check_can_be_turned_off() {
    let device = SimDevice::builder().balanced_steps(false).build();
    let (devices, inputs) = two_ranks(&device);
    let mut work = device
        .begin(&devices, &inputs, ReduceOperation::Sum)
        .unwrap();
    device.exchange(&mut work, &[0..0, 1..4], false).unwrap();
    let outputs = device.finish(work, ReduceOperation::Sum).unwrap();
    assert_eq!(outputs[0].values(), &HostValues::I64(vec![1, 20, 30, 40]));
}

#[test]
fn finish_refuses_another_operation_than_begin() {
    let device = SimDevice::new();
    let (devices, inputs) = two_ranks(&device);
    let work = device
        .begin(&devices, &inputs, ReduceOperation::Sum)
        .unwrap();
    let error = device.finish(work, ReduceOperation::Mean).unwrap_err();
    assert_eq!(
        error,
        SimError::OperationChanged {
            begun: ReduceOperation::Sum,
            finished: ReduceOperation::Mean
        }
    );
    assert_eq!(
        error.to_string(),
        "finish with avg, but the generation began with sum"
    );
}

#[test]
fn overlapping_sends_read_the_state_from_before_the_step() {
    let device = SimDevice::new();
    let devices = vec![id(0), id(1), id(2)];
    let inputs: Vec<SimPrepared> = (0..3)
        .map(|rank| prepared(&device, rank, HostValues::I32(vec![rank as i32 + 1; 3])))
        .collect();
    let mut work = device
        .begin(&devices, &inputs, ReduceOperation::Sum)
        .unwrap();
    // Every rank sends 0..2 and receives 0..2.
    device
        .exchange(&mut work, &[0..2, 0..2, 0..2], true)
        .unwrap();
    let outputs = device.finish(work, ReduceOperation::Sum).unwrap();
    let got: Vec<&HostValues> = outputs.iter().map(SimTensor::values).collect();
    assert_eq!(
        got,
        [
            &HostValues::I32(vec![4, 4, 1]),
            &HostValues::I32(vec![3, 3, 2]),
            &HostValues::I32(vec![5, 5, 3])
        ]
    );
    assert_eq!(outputs[2].device(), id(2));
}

/// All-reduce `inputs` (one per rank) through a communicator, one thread per rank.
fn all_reduce(inputs: Vec<HostValues>, operation: ReduceOperation) -> Vec<HostValues> {
    let device = SimDevice::new();
    let devices: Vec<DeviceId> = (0..inputs.len() as u32).map(id).collect();
    let communicator = NativeCommunicator::new(devices.clone(), device.clone()).unwrap();
    std::thread::scope(|scope| {
        let handles: Vec<_> = inputs
            .into_iter()
            .enumerate()
            .map(|(rank, values)| {
                let communicator = &communicator;
                let device = device.clone();
                let on = devices[rank];
                scope.spawn(move || {
                    let tensor = device.upload(on, &values).unwrap();
                    let output = communicator.all_reduce(rank, tensor, operation).unwrap();
                    device.download(&output).unwrap()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().unwrap())
            .collect()
    })
}

#[test]
fn integer_mean_rounds_toward_zero() {
    let outputs = all_reduce(
        vec![
            HostValues::I32(vec![7, -7, 1, -1, 5]),
            HostValues::I32(vec![0, 0, 0, 0, -2]),
        ],
        ReduceOperation::Mean,
    );
    for output in outputs {
        assert_eq!(output, HostValues::I32(vec![3, -3, 0, 0, 1]));
    }
    let outputs = all_reduce(
        vec![
            HostValues::I64(vec![-5]),
            HostValues::I64(vec![0]),
            HostValues::I64(vec![0]),
        ],
        ReduceOperation::Mean,
    );
    assert_eq!(outputs[1], HostValues::I64(vec![-1]));
}

#[test]
fn integer_sum_and_product_wrap() {
    let outputs = all_reduce(
        vec![
            HostValues::I32(vec![i32::MAX, 1 << 16]),
            HostValues::I32(vec![1, 1 << 16]),
        ],
        ReduceOperation::Sum,
    );
    assert_eq!(outputs[0], HostValues::I32(vec![i32::MIN, 1 << 17]));
    let outputs = all_reduce(
        vec![
            HostValues::I32(vec![i32::MAX, 1 << 16]),
            HostValues::I32(vec![2, 1 << 16]),
        ],
        ReduceOperation::Product,
    );
    assert_eq!(outputs[1], HostValues::I32(vec![-2, 0]));
}

#[test]
fn float_mean_divides_the_sum_by_the_world() {
    // Find a sum whose division by 3 differs from multiplication by the rounded 1/3.
    let sum = (1..100u8)
        .map(f32::from)
        .find(|&s| s / 3.0 != s * (1.0 / 3.0))
        .expect("some small integer rounds differently");
    let outputs = all_reduce(
        vec![
            HostValues::F32(vec![sum]),
            HostValues::F32(vec![0.0]),
            HostValues::F32(vec![0.0]),
        ],
        ReduceOperation::Mean,
    );
    assert_eq!(outputs[0], HostValues::F32(vec![sum / 3.0]));
    let outputs = all_reduce(
        vec![
            HostValues::BF16(vec![bf16::from_f32(1.0)]),
            HostValues::BF16(vec![bf16::from_f32(1.0)]),
            HostValues::BF16(vec![bf16::from_f32(0.0)]),
        ],
        ReduceOperation::Mean,
    );
    assert_eq!(
        outputs[2],
        HostValues::BF16(vec![bf16::from_f32(2.0 / 3.0)])
    );
}

#[test]
fn min_and_max_pick_an_input_on_every_rank() {
    let outputs = all_reduce(
        vec![
            HostValues::F64(vec![1.5, -0.25]),
            HostValues::F64(vec![-3.0, 8.0]),
            HostValues::F64(vec![0.0, 2.0]),
        ],
        ReduceOperation::Min,
    );
    assert!(
        outputs
            .iter()
            .all(|output| *output == HostValues::F64(vec![-3.0, -0.25]))
    );
}
