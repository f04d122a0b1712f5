//! The simulated device enforces the executor contract with typed errors (never panics), leaves
//! its work untouched when it refuses a call, and computes with the documented arithmetic.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use half::{bf16, f16};
use ruccl_core::{
    Algorithm, Collective, CollectiveOptions, DeviceId, NativeCollectiveDevice, NativeCommunicator,
    Plan, ReduceOperation, Step, StepViolation, Transfer,
};
use ruccl_sim::{
    ElementType, HostTensors, HostValues, SimDevice, SimError, SimPrepared, SimTensor, SimWork,
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

fn all_reduce_plan(operation: ReduceOperation, world: usize, length: usize) -> Plan {
    Plan::new(
        Collective::AllReduce(operation),
        Algorithm::Direct,
        world,
        length,
    )
    .unwrap()
}

fn two_ranks(device: &SimDevice) -> (Vec<DeviceId>, Vec<SimPrepared>) {
    let inputs = vec![
        prepared(device, 0, HostValues::I64(vec![1, 2, 3, 4])),
        prepared(device, 1, HostValues::I64(vec![10, 20, 30, 40])),
    ];
    (vec![id(0), id(1)], inputs)
}

fn transfer(from: usize, to: usize, range: Range<usize>) -> Transfer {
    Transfer::new(from, to, range)
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
    let sum = all_reduce_plan(ReduceOperation::Sum, 2, 4);
    let begin = |devices: &[DeviceId], inputs: Vec<SimPrepared>, plan: &Plan| {
        device.begin(devices, inputs, plan).unwrap_err()
    };
    let devices = vec![id(0), id(1)];
    let refusals = [
        (
            begin(
                &[],
                Vec::new(),
                &all_reduce_plan(ReduceOperation::Sum, 1, 0),
            ),
            SimError::InputCount {
                devices: 0,
                inputs: 0,
                planned: 1,
            },
        ),
        (
            begin(&devices, two_ranks(&device).1[..1].to_vec(), &sum),
            SimError::InputCount {
                devices: 2,
                inputs: 1,
                planned: 2,
            },
        ),
        (
            begin(&[id(1), id(0)], two_ranks(&device).1, &sum),
            SimError::RankOnWrongDevice {
                rank: 0,
                expected: id(1),
                actual: id(0),
            },
        ),
        (
            begin(
                &devices,
                vec![
                    two_ranks(&device).1.remove(0),
                    prepared(&device, 1, HostValues::I64(vec![1])),
                ],
                &sum,
            ),
            SimError::LengthMismatch {
                rank: 1,
                expected: 4,
                actual: 1,
            },
        ),
        (
            begin(
                &devices,
                vec![
                    two_ranks(&device).1.remove(0),
                    prepared(&device, 1, HostValues::U32(vec![1, 2, 3, 4])),
                ],
                &sum,
            ),
            SimError::ElementTypeMismatch {
                rank: 1,
                expected: ElementType::I64,
                actual: ElementType::U32,
            },
        ),
        (
            begin(
                &devices,
                two_ranks(&device).1,
                &all_reduce_plan(ReduceOperation::Product, 2, 4),
            ),
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
    device.check_quiescent().unwrap();
}

#[test]
#[allow(clippy::reversed_empty_ranges)] // inverted ranges are one of the refusals under test
fn exchange_refuses_every_malformed_step_and_leaves_the_work_untouched() {
    let device = SimDevice::new();
    let (devices, inputs) = two_ranks(&device);
    let mut work = device
        .begin(
            &devices,
            inputs,
            &all_reduce_plan(ReduceOperation::Sum, 2, 4),
        )
        .unwrap();
    let step = |combine, transfers| Step { combine, transfers };
    let out_of_bounds = |start, end, at| {
        SimError::Step(StepViolation::OutOfBounds {
            transfer: 0,
            from: 1,
            to: 0,
            start,
            end,
            at,
            buffer_len: 4,
        })
    };
    let refusals = [
        (
            step(true, vec![transfer(0, 2, 0..1)]),
            SimError::Step(StepViolation::NoSuchRank {
                transfer: 0,
                rank: 2,
                world: 2,
            }),
        ),
        (
            step(true, vec![transfer(1, 0, 2..1)]),
            out_of_bounds(2, 1, 2),
        ),
        (
            step(true, vec![transfer(1, 0, 2..5)]),
            out_of_bounds(2, 5, 2),
        ),
        (
            step(
                true,
                vec![Transfer {
                    from: 1,
                    to: 0,
                    range: 0..2,
                    at: 3,
                }],
            ),
            out_of_bounds(0, 2, 3),
        ),
        (
            step(false, vec![transfer(0, 1, 0..2), transfer(0, 1, 1..3)]),
            SimError::Step(StepViolation::DoubleWrite {
                rank: 1,
                element: 1,
                first: 0,
                second: 0,
            }),
        ),
        (
            step(false, vec![transfer(0, 1, 0..2), transfer(1, 1, 1..2)]),
            SimError::Step(StepViolation::DoubleWrite {
                rank: 1,
                element: 1,
                first: 0,
                second: 1,
            }),
        ),
        (
            step(true, vec![transfer(1, 0, 0..3), transfer(1, 0, 2..4)]),
            SimError::Step(StepViolation::DuplicateSource {
                rank: 0,
                element: 2,
                from: 1,
            }),
        ),
    ];
    for (step, expected) in refusals {
        let error = device.exchange(&mut work, &step).unwrap_err();
        assert_eq!(error, expected, "{step:?}");
        assert_one_line(&error);
    }
    assert!(work.steps().is_empty(), "refused steps are not traffic");
    let outputs = device
        .finish(work, &all_reduce_plan(ReduceOperation::Sum, 2, 4))
        .unwrap();
    assert_eq!(outputs[0].values(), &HostValues::I64(vec![1, 2, 3, 4]));
    assert_eq!(outputs[1].values(), &HostValues::I64(vec![10, 20, 30, 40]));
}

/// Begin `plan` on three ranks whose inputs are `[r + 1; 2]`.
fn begin_three_ranks(device: &SimDevice, plan: &Plan) -> SimWork {
    let inputs = (0..3)
        .map(|rank| prepared(device, rank, HostValues::I32(vec![rank as i32 + 1; 2])))
        .collect();
    device.begin(&[id(0), id(1), id(2)], inputs, plan).unwrap()
}

#[test]
fn two_senders_into_one_element_are_allowed_in_a_combining_step_only() {
    let device = SimDevice::new();
    let plan = all_reduce_plan(ReduceOperation::Sum, 3, 2);
    let begin = || begin_three_ranks(&device, &plan);
    let both = vec![transfer(0, 1, 0..2), transfer(2, 1, 0..2)];
    let mut work = begin();
    device
        .exchange(
            &mut work,
            &Step {
                combine: true,
                transfers: both.clone(),
            },
        )
        .unwrap();
    assert_eq!(work.buffer(1), Some(HostValues::I32(vec![6, 6])));
    let mut work = begin();
    let error = device
        .exchange(
            &mut work,
            &Step {
                combine: false,
                transfers: both,
            },
        )
        .unwrap_err();
    assert_eq!(
        error,
        SimError::Step(StepViolation::DoubleWrite {
            rank: 1,
            element: 0,
            first: 0,
            second: 2,
        })
    );
}

#[test]
fn a_step_is_checked_again_when_it_differs_from_the_last_generations() {
    // The device reuses the layout of a step equal to the one the last generation ran at the
    // same position; anything else is checked afresh, however alike.
    let device = SimDevice::new();
    let plan = all_reduce_plan(ReduceOperation::Sum, 3, 2);
    let begin = || begin_three_ranks(&device, &plan);
    let both = vec![transfer(0, 1, 0..2), transfer(2, 1, 0..2)];
    let combining = Step {
        combine: true,
        transfers: both.clone(),
    };
    for _ in 0..2 {
        let mut work = begin();
        device.exchange(&mut work, &combining).unwrap();
        assert_eq!(work.buffer(1), Some(HostValues::I32(vec![6, 6])));
        device.finish(work, &plan).unwrap();
    }
    let overwriting = Step {
        combine: false,
        transfers: both,
    };
    let mut work = begin();
    assert_eq!(
        device.exchange(&mut work, &overwriting).unwrap_err(),
        SimError::Step(StepViolation::DoubleWrite {
            rank: 1,
            element: 0,
            first: 0,
            second: 2,
        })
    );
    let past_the_end = Step {
        combine: true,
        transfers: vec![transfer(0, 1, 0..3)],
    };
    let mut work = begin();
    assert!(matches!(
        device.exchange(&mut work, &past_the_end).unwrap_err(),
        SimError::Step(StepViolation::OutOfBounds { .. })
    ));
}

#[test]
fn finish_refuses_another_plan_than_begin() {
    let device = SimDevice::new();
    let (devices, inputs) = two_ranks(&device);
    let work = device
        .begin(
            &devices,
            inputs,
            &all_reduce_plan(ReduceOperation::Sum, 2, 4),
        )
        .unwrap();
    let error = device
        .finish(work, &all_reduce_plan(ReduceOperation::Mean, 2, 4))
        .unwrap_err();
    assert_eq!(
        error,
        SimError::PlanChanged {
            begun: Collective::AllReduce(ReduceOperation::Sum),
            begun_world: 2,
            finished: Collective::AllReduce(ReduceOperation::Mean),
            finished_world: 2,
        }
    );
    assert_eq!(
        error.to_string(),
        "finish with a plan for all-reduce(avg) on 2 ranks, but the generation began all-reduce(sum) on 2"
    );
}

#[test]
fn overlapping_sends_read_the_state_from_before_the_step() {
    let device = SimDevice::new();
    let devices = vec![id(0), id(1), id(2)];
    let inputs: Vec<SimPrepared> = (0..3)
        .map(|rank| prepared(&device, rank, HostValues::I32(vec![rank as i32 + 1; 3])))
        .collect();
    let plan = all_reduce_plan(ReduceOperation::Sum, 3, 3);
    let mut work = device.begin(&devices, inputs, &plan).unwrap();
    // Every rank sends 0..2 to its successor and receives 0..2 from its predecessor.
    let ring = Step {
        combine: true,
        transfers: (0..3)
            .map(|from| transfer(from, (from + 1) % 3, 0..2))
            .collect(),
    };
    device.exchange(&mut work, &ring).unwrap();
    let outputs = device.finish(work, &plan).unwrap();
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

#[test]
fn a_fold_runs_below_own_above_from_the_left() {
    // Rank 2 receives from ranks 3, 0 and 1, listed so: the device must fold
    // (((x0 + x1) + x2) + x3) = 1.5 in f32 — not own first (0.5), nor descending (0), nor as listed.
    let device = SimDevice::new();
    let devices: Vec<DeviceId> = (0..4).map(id).collect();
    let values = [1e8f32, -1e8, 1.0, 0.5];
    let inputs = (0..4)
        .map(|rank| prepared(&device, rank, HostValues::F32(vec![values[rank as usize]])))
        .collect();
    let plan = all_reduce_plan(ReduceOperation::Sum, 4, 1);
    let mut work: SimWork = device.begin(&devices, inputs, &plan).unwrap();
    let step = Step {
        combine: true,
        transfers: vec![
            transfer(3, 2, 0..1),
            transfer(0, 2, 0..1),
            transfer(1, 2, 0..1),
        ],
    };
    device.exchange(&mut work, &step).unwrap();
    let [x0, x1, x2, x3] = values;
    assert_eq!(
        work.buffer(2),
        Some(HostValues::F32(vec![((x0 + x1) + x2) + x3]))
    );
    for wrong in [
        ((x2 + x0) + x1) + x3,
        ((x3 + x2) + x1) + x0,
        ((x3 + x0) + x1) + x2,
    ] {
        assert_ne!(((x0 + x1) + x2) + x3, wrong);
    }
}

#[test]
fn an_all_gather_places_each_input_in_its_block() {
    let device = SimDevice::new();
    let devices = vec![id(0), id(1)];
    let plan = Plan::new(Collective::AllGather, Algorithm::Ring, 2, 2).unwrap();
    let inputs = vec![
        prepared(&device, 0, HostValues::U8(vec![1, 2])),
        prepared(&device, 1, HostValues::U8(vec![3, 4])),
    ];
    let work = device.begin(&devices, inputs, &plan).unwrap();
    assert_eq!(work.buffer(0), Some(HostValues::U8(vec![1, 2, 0, 0])));
    assert_eq!(work.buffer(1), Some(HostValues::U8(vec![0, 0, 3, 4])));
    assert_eq!(work.buffer(2), None);
}

#[test]
fn a_buffer_built_in_a_reused_allocation_holds_no_earlier_values() {
    // 64 Ki f32 per rank: large enough for the device to keep and reuse the allocations.
    let length = 1 << 16;
    let device = SimDevice::new();
    let devices = vec![id(0), id(1)];
    let plan = Plan::new(Collective::AllGather, Algorithm::Ring, 2, length).unwrap();
    let gather = |fill: f32| {
        let inputs = (0..2)
            .map(|rank| prepared(&device, rank, HostValues::F32(vec![fill; length])))
            .collect();
        device.begin(&devices, inputs, &plan).unwrap()
    };
    let mut work = gather(7.0);
    for step in plan.steps() {
        device.exchange(&mut work, step).unwrap();
    }
    let outputs = device.finish(work, &plan).unwrap();
    assert!(outputs.iter().all(|output| output.len() == 2 * length));
    drop(outputs);
    assert!(
        device.pooled_bytes() >= 2 * 2 * length * 4,
        "the outputs were kept"
    );
    // The next generation's buffers are the kept outputs, full of sevens: before any step, only
    // each rank's own block may hold a value.
    let kept = device.pooled_bytes();
    let work = gather(1.0);
    assert!(
        device.pooled_bytes() < kept,
        "the buffers came from the kept allocations"
    );
    for rank in 0..2 {
        let Some(HostValues::F32(buffer)) = work.buffer(rank) else {
            panic!("rank {rank} has an f32 buffer");
        };
        for (element, &value) in buffer.iter().enumerate() {
            let own = element / length == rank;
            assert_eq!(
                value,
                if own { 1.0 } else { 0.0 },
                "rank {rank}, element {element}"
            );
        }
    }
    device.check_quiescent().unwrap_err();
    drop(work);
    device.check_quiescent().unwrap();
}

#[test]
fn a_device_keeps_no_more_than_its_pool_allows() {
    let length = 1 << 16;
    let limit = 3 * length * 4;
    for pool in [0, limit] {
        let device = SimDevice::builder().pool_bytes(pool).build();
        let tensors: Vec<_> = (0..8)
            .map(|_| {
                device
                    .upload(id(0), &HostValues::F32(vec![1.0; length]))
                    .unwrap()
            })
            .collect();
        drop(tensors);
        assert_eq!(device.pooled_bytes(), pool, "pool of {pool} bytes");
    }
}

#[test]
fn releasing_the_cache_frees_what_the_device_kept_and_no_live_tensor() {
    let length = 1 << 16;
    let device = SimDevice::new();
    let kept: Vec<_> = (0..3)
        .map(|_| {
            device
                .upload(id(0), &HostValues::F32(vec![2.0; length]))
                .unwrap()
        })
        .collect();
    let live = device
        .upload(id(1), &HostValues::F32(vec![5.0; length]))
        .unwrap();
    drop(kept);
    assert_eq!(device.pooled_bytes(), 3 * length * 4);
    device.release_cached();
    assert_eq!(device.pooled_bytes(), 0);
    assert_eq!(
        device.download(&live).unwrap(),
        HostValues::F32(vec![5.0; length])
    );
    // Kept again from then on.
    drop(live);
    assert_eq!(device.pooled_bytes(), length * 4);
}

#[test]
fn a_generation_cut_across_threads_gives_the_bits_of_one_thread_in_place_and_out() {
    // 3 ranks × 700 000 f32 (2.8 MB each): every step and the out-of-place copy-in are large
    // enough to be cut across threads. Values with a fraction, so that a wrong fold order would
    // round differently.
    let (world, length) = (3u32, 700_000usize);
    let inputs: Vec<HostValues> = (0..world)
        .map(|rank| {
            HostValues::F32(
                (0..length)
                    .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ rank) as f32 / 7.0e6)
                    .collect(),
            )
        })
        .collect();
    let bits = |device: SimDevice, collective: Collective| -> Vec<Vec<u32>> {
        let devices: Vec<DeviceId> = (0..world).map(id).collect();
        let communicator = NativeCommunicator::new(devices.clone(), device.clone()).unwrap();
        let outputs: Vec<HostValues> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..world as usize)
                .map(|rank| {
                    let (communicator, device, values) = (&communicator, device.clone(), &inputs);
                    let on = devices[rank];
                    scope.spawn(move || {
                        let tensor = device.upload(on, &values[rank]).unwrap();
                        let output = communicator
                            .collective(
                                rank,
                                tensor,
                                collective,
                                // Bounded: a hang fails every rank alike, in time.
                                CollectiveOptions::default()
                                    .with_timeout(std::time::Duration::from_secs(60)),
                            )
                            .unwrap();
                        device.download(&output).unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        device.check_quiescent().unwrap();
        outputs
            .into_iter()
            .map(|output| match output {
                HostValues::F32(values) => values.iter().map(|v| v.to_bits()).collect(),
                other => panic!("f32 in, {:?} out", other.element_type()),
            })
            .collect()
    };
    for collective in [
        Collective::AllReduce(ReduceOperation::Sum),
        Collective::AllReduce(ReduceOperation::Mean),
        Collective::Broadcast { root: 1 },
    ] {
        let one_thread = bits(
            SimDevice::builder().threads(1).in_place(true).build(),
            collective,
        );
        for in_place in [true, false] {
            let device = SimDevice::builder().threads(4).in_place(in_place).build();
            assert_eq!(
                bits(device, collective),
                one_thread,
                "{collective:?}, in place: {in_place}"
            );
        }
    }
}

/// Run `collective` over `inputs` (one per rank) through a communicator, one thread per rank.
fn run(inputs: Vec<HostValues>, collective: Collective) -> Vec<HostValues> {
    run_via(inputs, collective, Algorithm::Auto)
}

/// Like [`run`], via `algorithm`.
fn run_via(
    inputs: Vec<HostValues>,
    collective: Collective,
    algorithm: Algorithm,
) -> Vec<HostValues> {
    let device = SimDevice::new();
    let devices: Vec<DeviceId> = (0..inputs.len() as u32).map(id).collect();
    let communicator = NativeCommunicator::new(devices.clone(), device.clone()).unwrap();
    let outputs = std::thread::scope(|scope| {
        let handles: Vec<_> = inputs
            .into_iter()
            .enumerate()
            .map(|(rank, values)| {
                let communicator = &communicator;
                let device = device.clone();
                let on = devices[rank];
                scope.spawn(move || {
                    let tensor = device.upload(on, &values).unwrap();
                    let options = CollectiveOptions::default().with_algorithm(algorithm);
                    let output = communicator
                        .collective(rank, tensor, collective, options)
                        .unwrap();
                    device.download(&output).unwrap()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().unwrap())
            .collect()
    });
    device.check_quiescent().unwrap();
    outputs
}

fn all_reduce(inputs: Vec<HostValues>, operation: ReduceOperation) -> Vec<HostValues> {
    run(inputs, Collective::AllReduce(operation))
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
    let outputs = all_reduce(
        vec![HostValues::I8(vec![-128, 127]), HostValues::I8(vec![-1, 1])],
        ReduceOperation::Mean,
    );
    // -128 + -1 wraps to 127; 127 + 1 wraps to -128.
    assert_eq!(outputs[0], HostValues::I8(vec![63, -64]));
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
fn unsigned_integers_wrap_and_compare_as_unsigned() {
    let outputs = all_reduce(
        vec![
            HostValues::U8(vec![200, 255, 7]),
            HostValues::U8(vec![100, 1, 0]),
        ],
        ReduceOperation::Sum,
    );
    assert_eq!(outputs[1], HostValues::U8(vec![44, 0, 7]));
    let outputs = all_reduce(
        vec![
            HostValues::U64(vec![u64::MAX, 3]),
            HostValues::U64(vec![1, u64::MAX - 1]),
        ],
        ReduceOperation::Max,
    );
    assert_eq!(outputs[0], HostValues::U64(vec![u64::MAX, u64::MAX - 1]));
    let outputs = all_reduce(
        vec![
            HostValues::U32(vec![u32::MAX, 9]),
            HostValues::U32(vec![1, 0]),
            HostValues::U32(vec![1, 0]),
        ],
        ReduceOperation::Mean,
    );
    // u32::MAX + 1 + 1 wraps to 1; 1 / 3 is 0.
    assert_eq!(outputs[2], HostValues::U32(vec![0, 3]));
    let outputs = all_reduce(
        vec![HostValues::U8(vec![16, 3]), HostValues::U8(vec![17, 200])],
        ReduceOperation::Min,
    );
    assert_eq!(outputs[0], HostValues::U8(vec![16, 3]));
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
fn half_types_round_once_per_combine() {
    // Direct folds ((2048 + 1) + 1) in f16: each combine rounds (ties to even) back to 2048,
    // on every rank; accumulating in f32 and rounding once would give 2050.
    let outputs = run_via(
        vec![
            HostValues::F16(vec![f16::from_f32(2048.0)]),
            HostValues::F16(vec![f16::from_f32(1.0)]),
            HostValues::F16(vec![f16::from_f32(1.0)]),
        ],
        Collective::AllReduce(ReduceOperation::Sum),
        Algorithm::Direct,
    );
    for output in outputs {
        assert_eq!(output, HostValues::F16(vec![f16::from_f32(2048.0)]));
    }
}

#[test]
fn min_and_max_pick_an_input_on_every_rank_and_nan_loses() {
    let outputs = all_reduce(
        vec![
            HostValues::F64(vec![1.5, -0.25, f64::NAN]),
            HostValues::F64(vec![-3.0, 8.0, 2.0]),
            HostValues::F64(vec![f64::NAN, 2.0, f64::NAN]),
        ],
        ReduceOperation::Min,
    );
    assert!(
        outputs
            .iter()
            .all(|output| *output == HostValues::F64(vec![-3.0, -0.25, 2.0]))
    );
}

#[test]
fn every_collective_runs_on_the_new_integer_types() {
    let inputs = vec![
        HostValues::I8(vec![1, -2, 3, -4]),
        HostValues::I8(vec![10, 20, 30, 40]),
    ];
    assert_eq!(
        run(
            inputs.clone(),
            Collective::ReduceScatter(ReduceOperation::Sum)
        ),
        vec![HostValues::I8(vec![11, 18]), HostValues::I8(vec![33, 36])]
    );
    assert_eq!(
        run(inputs.clone(), Collective::AllGather)[1],
        HostValues::I8(vec![1, -2, 3, -4, 10, 20, 30, 40])
    );
    assert_eq!(
        run(inputs.clone(), Collective::Broadcast { root: 1 })[0],
        inputs[1]
    );
}
