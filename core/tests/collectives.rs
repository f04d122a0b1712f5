//! Contract v2 through the communicator: every collective and algorithm delivers the reference
//! result to every rank; disagreement of any kind, impossible requests and wrong custom plans are
//! one shared error of the generation, decided in the documented precedence, and the next
//! generation works.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

mod common;

use common::{
    Action, Ask, Site, Tensor, TestDevice, devices, expected, ramp, run_requests, tensors,
};
use ruccl_core::{
    Algorithm, Collective, ElementType, NativeCollectiveError, NativeCommunicator, Phase, Plan,
    ReduceOperation, TensorInfo,
};

const SUM: ReduceOperation = ReduceOperation::Sum;

fn communicator(world: usize) -> (TestDevice, NativeCommunicator<TestDevice>) {
    common::quiet_injected_panics();
    let device = TestDevice::default();
    let communicator = NativeCommunicator::new(devices(world), device.clone()).unwrap();
    (device, communicator)
}

/// Every rank asks for the same thing.
fn everyone(world: usize, collective: Collective, algorithm: Algorithm) -> Vec<Ask> {
    vec![Ask::Built(collective, algorithm); world]
}

/// Run `collective` over ramp inputs of `length` and check every rank against the reference.
fn check(
    communicator: &NativeCommunicator<TestDevice>,
    collective: Collective,
    algorithm: Algorithm,
    length: usize,
    offset: i64,
) {
    let world = communicator.world_size();
    let inputs = ramp(world, length, offset);
    let asks = everyone(world, collective, algorithm);
    let outcomes = run_requests(communicator, tensors(&inputs), &asks);
    // A fixed algorithm may refuse a size (more than TRAFFIC_BOUND × the least traffic): then
    // every rank gets that refusal.
    let refusal = (algorithm != Algorithm::Auto)
        .then(|| Plan::new(collective, algorithm, world, length).err())
        .flatten();
    let want = expected(collective, &inputs);
    for (rank, outcome) in outcomes.into_iter().enumerate() {
        let case = format!("{collective} via {algorithm}, W={world}, n={length}, rank {rank}");
        match &refusal {
            Some(error) => assert_eq!(outcome.as_ref().unwrap_err(), error, "{case}"),
            None => assert_eq!(outcome.as_ref(), Ok(&want[rank]), "{case}"),
        }
    }
}

/// Every rank got exactly `error`; then the communicator runs a clean all-reduce.
fn assert_shared_then_recovers(
    communicator: &NativeCommunicator<TestDevice>,
    outcomes: Vec<common::Outcome>,
    error: &NativeCollectiveError,
) {
    for (rank, outcome) in outcomes.iter().enumerate() {
        assert_eq!(outcome.as_ref().unwrap_err(), error, "rank {rank}");
    }
    check(
        communicator,
        Collective::AllReduce(SUM),
        Algorithm::Auto,
        9,
        3,
    );
}

#[test]
fn every_collective_and_algorithm_delivers_the_reference_result() {
    for world in 1..=5 {
        let (_, communicator) = communicator(world);
        let algorithms: Vec<Algorithm> = [Algorithm::Auto]
            .into_iter()
            .chain(Algorithm::BUILT_IN)
            .filter(|&a| a != Algorithm::HalvingDoubling || world.is_power_of_two())
            .collect();
        for operation in ReduceOperation::ALL {
            for &algorithm in &algorithms {
                for length in [0, 1, world + 1, 13] {
                    check(
                        &communicator,
                        Collective::AllReduce(operation),
                        algorithm,
                        length,
                        1,
                    );
                    let blocks = length * world;
                    let scatter = Collective::ReduceScatter(operation);
                    check(&communicator, scatter, algorithm, blocks, 2);
                }
            }
        }
        for &algorithm in &algorithms {
            for length in [0, 1, 6] {
                check(&communicator, Collective::AllGather, algorithm, length, 4);
                if matches!(algorithm, Algorithm::Auto | Algorithm::Direct) {
                    check(
                        &communicator,
                        Collective::AllToAll,
                        algorithm,
                        length * world,
                        8,
                    );
                }
                for root in 0..world {
                    for operation in ReduceOperation::ALL {
                        let reduce = Collective::Reduce {
                            op: operation,
                            root,
                        };
                        check(&communicator, reduce, algorithm, length + 1, 6);
                    }
                    check(
                        &communicator,
                        Collective::Gather { root },
                        algorithm,
                        length,
                        7,
                    );
                    let scatter = Collective::Scatter { root };
                    check(&communicator, scatter, algorithm, length * world, 9);
                }
                for root in 0..world {
                    check(
                        &communicator,
                        Collective::Broadcast { root },
                        algorithm,
                        length,
                        5,
                    );
                }
            }
        }
    }
}

#[test]
fn one_communicator_runs_a_sequence_mixing_every_collective() {
    let (_, communicator) = communicator(4);
    let sequence = [
        Collective::AllReduce(SUM),
        Collective::Broadcast { root: 3 },
        Collective::ReduceScatter(ReduceOperation::Max),
        Collective::AllGather,
        Collective::AllReduce(ReduceOperation::Mean),
        Collective::Broadcast { root: 1 },
        Collective::Reduce {
            op: ReduceOperation::Min,
            root: 2,
        },
        Collective::Gather { root: 0 },
        Collective::Scatter { root: 3 },
        Collective::AllToAll,
    ];
    for round in 0..20 {
        for (index, &collective) in sequence.iter().enumerate() {
            let algorithm = match collective {
                Collective::AllToAll => Algorithm::Direct,
                _ => Algorithm::BUILT_IN[(round + index) % 3],
            };
            check(&communicator, collective, algorithm, 8, round as i64);
        }
    }
}

#[test]
fn ranks_asking_for_different_collectives_all_get_the_mismatch() {
    let cases: Vec<(Vec<Ask>, &str)> = vec![
        (
            vec![
                Ask::Built(Collective::AllReduce(SUM), Algorithm::Auto),
                Ask::Built(Collective::AllGather, Algorithm::Auto),
                Ask::Built(Collective::AllReduce(SUM), Algorithm::Auto),
            ],
            "rank 1: all-gather via auto",
        ),
        (
            vec![
                Ask::Built(Collective::Broadcast { root: 0 }, Algorithm::Auto),
                Ask::Built(Collective::Broadcast { root: 0 }, Algorithm::Auto),
                Ask::Built(Collective::Broadcast { root: 2 }, Algorithm::Auto),
            ],
            "rank 2: broadcast(root 2) via auto",
        ),
        (
            vec![
                Ask::Built(Collective::AllReduce(SUM), Algorithm::Ring),
                Ask::Built(Collective::AllReduce(SUM), Algorithm::Direct),
                Ask::Built(Collective::AllReduce(SUM), Algorithm::Ring),
            ],
            "rank 1: all-reduce(sum) via direct",
        ),
        (
            vec![
                Ask::Built(Collective::Reduce { op: SUM, root: 0 }, Algorithm::Auto),
                Ask::Built(Collective::Reduce { op: SUM, root: 1 }, Algorithm::Auto),
                Ask::Built(Collective::Reduce { op: SUM, root: 0 }, Algorithm::Auto),
            ],
            "rank 1: reduce(sum, root 1) via auto",
        ),
        (
            vec![
                Ask::Built(Collective::Gather { root: 1 }, Algorithm::Auto),
                Ask::Built(Collective::Scatter { root: 1 }, Algorithm::Auto),
                Ask::Built(Collective::AllToAll, Algorithm::Auto),
            ],
            "rank 2: all-to-all via auto",
        ),
    ];
    for (asks, names) in cases {
        let (_, communicator) = communicator(3);
        let outcomes = run_requests(&communicator, tensors(&ramp(3, 6, 0)), &asks);
        let error = outcomes[0].clone().unwrap_err();
        assert!(
            matches!(
                error,
                NativeCollectiveError::CollectiveMismatch {
                    generation: 0,
                    plans_differ: false,
                    ..
                }
            ),
            "{error}"
        );
        assert!(error.to_string().contains(names), "{error}");
        assert_shared_then_recovers(&communicator, outcomes, &error);
    }
}

#[test]
fn different_reduce_operations_of_one_collective_are_a_reduction_mismatch() {
    let (_, communicator) = communicator(2);
    let scatter = |operation| Ask::Built(Collective::ReduceScatter(operation), Algorithm::Ring);
    let asks = [scatter(SUM), scatter(ReduceOperation::Min)];
    let outcomes = run_requests(&communicator, tensors(&ramp(2, 4, 0)), &asks);
    let error = NativeCollectiveError::ReductionMismatch {
        generation: 0,
        operations: vec![SUM, ReduceOperation::Min],
    };
    assert_shared_then_recovers(&communicator, outcomes, &error);
    // The same for a reduce to one root, in a later generation.
    let reduce = |op| Ask::Built(Collective::Reduce { op, root: 1 }, Algorithm::Auto);
    let asks = [reduce(ReduceOperation::Max), reduce(SUM)];
    let outcomes = run_requests(&communicator, tensors(&ramp(2, 4, 0)), &asks);
    let error = outcomes[0].clone().unwrap_err();
    assert!(
        matches!(
            error,
            NativeCollectiveError::ReductionMismatch { ref operations, .. }
                if operations == &[ReduceOperation::Max, SUM]
        ),
        "{error}"
    );
    assert_shared_then_recovers(&communicator, outcomes, &error);
}

#[test]
fn scatter_inputs_of_different_lengths_are_a_shape_mismatch_for_every_rank() {
    // Only the root's input is read, but every rank must pass the root's shape.
    let (_, communicator) = communicator(2);
    let mut inputs = ramp(2, 4, 0);
    inputs[1].truncate(2);
    let asks = everyone(2, Collective::Scatter { root: 0 }, Algorithm::Auto);
    let outcomes = run_requests(&communicator, tensors(&inputs), &asks);
    let error = outcomes[0].clone().unwrap_err();
    assert!(
        matches!(error, NativeCollectiveError::ShapeMismatch { .. }),
        "{error}"
    );
    assert_shared_then_recovers(&communicator, outcomes, &error);
}

#[test]
fn inputs_of_different_lengths_are_a_shape_mismatch_for_every_rank() {
    let (_, communicator) = communicator(3);
    let mut inputs = ramp(3, 4, 0);
    inputs[2].push(9);
    let asks = everyone(3, Collective::AllReduce(SUM), Algorithm::Auto);
    let outcomes = run_requests(&communicator, tensors(&inputs), &asks);
    let shape = |len| TensorInfo {
        len,
        element: ElementType::I64,
    };
    let error = NativeCollectiveError::ShapeMismatch {
        generation: 0,
        shapes: vec![shape(4), shape(4), shape(5)],
    };
    assert_eq!(
        error.to_string(),
        "ranks' inputs differ in generation 0: rank 0: 4 × int64, rank 1: 4 × int64, rank 2: 5 × int64"
    );
    assert_shared_then_recovers(&communicator, outcomes, &error);
}

#[test]
fn impossible_collectives_are_a_shared_invalid_collective() {
    let cases = [
        (
            3,
            Collective::Broadcast { root: 3 },
            Algorithm::Auto,
            4,
            "root 3",
        ),
        (
            4,
            Collective::ReduceScatter(SUM),
            Algorithm::Ring,
            6,
            "equal blocks",
        ),
        (
            3,
            Collective::AllReduce(SUM),
            Algorithm::HalvingDoubling,
            6,
            "power-of-two",
        ),
        (
            3,
            Collective::Reduce { op: SUM, root: 7 },
            Algorithm::Auto,
            4,
            "root 7",
        ),
        (
            2,
            Collective::Gather { root: 2 },
            Algorithm::Direct,
            4,
            "root 2",
        ),
        (
            4,
            Collective::Scatter { root: 1 },
            Algorithm::Ring,
            6,
            "equal blocks",
        ),
        (3, Collective::AllToAll, Algorithm::Auto, 7, "equal blocks"),
        (
            4,
            Collective::AllToAll,
            Algorithm::Ring,
            8,
            "no all-to-all plan",
        ),
    ];
    for (world, collective, algorithm, length, says) in cases {
        let (_, communicator) = communicator(world);
        let asks = everyone(world, collective, algorithm);
        let outcomes = run_requests(&communicator, tensors(&ramp(world, length, 0)), &asks);
        let error = outcomes[0].clone().unwrap_err();
        assert!(
            matches!(error, NativeCollectiveError::InvalidCollective { .. }),
            "{error}"
        );
        assert!(error.to_string().contains(says), "{error}");
        assert_shared_then_recovers(&communicator, outcomes, &error);
    }
}

#[test]
fn a_mismatch_outranks_a_failed_prepare_which_outranks_a_shape_mismatch() {
    // Mismatched collectives and a failed prepare: the mismatch is the generation's error.
    let (device, communicator) = communicator(3);
    device.inject(Site::Prepare { rank: 0 }, Action::Fail);
    let asks = vec![
        Ask::Built(Collective::AllReduce(SUM), Algorithm::Auto),
        Ask::Built(Collective::AllReduce(SUM), Algorithm::Auto),
        Ask::Built(Collective::AllGather, Algorithm::Auto),
    ];
    let outcomes = run_requests(&communicator, tensors(&ramp(3, 4, 0)), &asks);
    let error = outcomes[0].clone().unwrap_err();
    assert!(matches!(
        error,
        NativeCollectiveError::CollectiveMismatch { .. }
    ));
    assert_shared_then_recovers(&communicator, outcomes, &error);

    // A failed prepare and a shape mismatch: the prepare failure is.
    let (device, communicator) = self::communicator(3);
    device.inject(Site::Prepare { rank: 1 }, Action::Fail);
    let mut inputs = ramp(3, 4, 0);
    inputs[2].pop();
    let asks = everyone(3, Collective::AllReduce(SUM), Algorithm::Auto);
    let outcomes = run_requests(&communicator, tensors(&inputs), &asks);
    let error = outcomes[0].clone().unwrap_err();
    assert!(
        matches!(
            error,
            NativeCollectiveError::Device {
                phase: Phase::Prepare,
                rank: Some(1),
                ..
            }
        ),
        "{error}"
    );
    assert_shared_then_recovers(&communicator, outcomes, &error);
}

#[test]
fn a_panicking_describe_reaches_every_rank_naming_its_rank() {
    let (device, communicator) = communicator(3);
    device.panic_in_describe(2);
    let asks = everyone(3, Collective::AllGather, Algorithm::Auto);
    let outcomes = run_requests(&communicator, tensors(&ramp(3, 2, 0)), &asks);
    let error = NativeCollectiveError::Panicked {
        phase: Phase::Describe,
        rank: Some(2),
        message: "injected panic in describe".into(),
    };
    assert_shared_then_recovers(&communicator, outcomes, &error);
}

#[test]
fn a_panicking_link_model_is_a_typed_error_at_creation() {
    common::quiet_injected_panics();
    let device = TestDevice::default();
    device.panic_in_link_model();
    let error = NativeCommunicator::new(devices(2), device).unwrap_err();
    assert!(
        matches!(
            error,
            NativeCollectiveError::Panicked {
                phase: Phase::LinkModel,
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn a_custom_plan_runs_through_the_same_rendezvous() {
    let (_, communicator) = communicator(4);
    // A user's schedule: the halving-doubling all-reduce, rebuilt from its parts.
    let parts = Plan::new(
        Collective::AllReduce(SUM),
        Algorithm::HalvingDoubling,
        4,
        10,
    )
    .unwrap()
    .into_parts();
    let plan = Plan::from_parts(parts).unwrap();
    assert_eq!(plan.algorithm(), Algorithm::Custom);
    let inputs = ramp(4, 10, 7);
    for _ in 0..3 {
        let asks = vec![Ask::Custom(plan.clone()); 4];
        let outcomes = run_requests(&communicator, tensors(&inputs), &asks);
        for outcome in outcomes {
            assert_eq!(outcome.unwrap(), common::reference(&inputs, SUM));
        }
    }
}

#[test]
fn ranks_with_different_custom_plans_all_get_the_mismatch() {
    let (_, communicator) = communicator(2);
    let ring = Plan::new(Collective::AllReduce(SUM), Algorithm::Ring, 2, 4).unwrap();
    let direct = Plan::new(Collective::AllReduce(SUM), Algorithm::Direct, 2, 4).unwrap();
    let asks = [
        Ask::Custom(Plan::from_parts(ring.into_parts()).unwrap()),
        Ask::Custom(Plan::from_parts(direct.into_parts()).unwrap()),
    ];
    let outcomes = run_requests(&communicator, tensors(&ramp(2, 4, 0)), &asks);
    let error = outcomes[0].clone().unwrap_err();
    assert!(
        matches!(
            error,
            NativeCollectiveError::CollectiveMismatch {
                plans_differ: true,
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().ends_with("(their custom plans differ)"));
    assert_shared_then_recovers(&communicator, outcomes, &error);
}

#[test]
fn a_custom_plan_for_another_length_is_a_shared_invalid_collective() {
    let (_, communicator) = communicator(2);
    let parts = Plan::new(Collective::AllReduce(SUM), Algorithm::Ring, 2, 4)
        .unwrap()
        .into_parts();
    let plan = Plan::from_parts(parts).unwrap();
    let asks = vec![Ask::Custom(plan); 2];
    let outcomes = run_requests(&communicator, tensors(&ramp(2, 5, 0)), &asks);
    let error = outcomes[0].clone().unwrap_err();
    assert!(
        error
            .to_string()
            .contains("the custom plan is for 2 ranks with 4 elements each"),
        "{error}"
    );
    assert_shared_then_recovers(&communicator, outcomes, &error);
}

#[test]
fn the_convenience_entries_run_their_collective() {
    let (_, communicator) = communicator(2);
    let inputs = ramp(2, 4, 0);
    std::thread::scope(|scope| {
        let runs: Vec<_> = (0..2)
            .map(|rank| {
                let communicator = &communicator;
                let inputs = &inputs;
                scope.spawn(move || {
                    let tensor = |values: &Vec<i64>| Tensor::new(rank as u32, values.clone());
                    let scattered = communicator
                        .reduce_scatter(rank, tensor(&inputs[rank]), SUM)
                        .unwrap()
                        .into_values();
                    let gathered = communicator
                        .all_gather(rank, tensor(&scattered))
                        .unwrap()
                        .into_values();
                    let broadcast = communicator
                        .broadcast(rank, tensor(&inputs[rank]), 1)
                        .unwrap()
                        .into_values();
                    let reduced = communicator
                        .reduce(rank, tensor(&inputs[rank]), SUM, 0)
                        .unwrap()
                        .into_values();
                    let collected = communicator
                        .gather(rank, tensor(&inputs[rank]), 1)
                        .unwrap()
                        .into_values();
                    let mine = communicator
                        .scatter(rank, tensor(&inputs[rank]), 1)
                        .unwrap()
                        .into_values();
                    let exchanged = communicator
                        .all_to_all(rank, tensor(&inputs[rank]))
                        .unwrap()
                        .into_values();
                    (gathered, broadcast, reduced, collected, mine, exchanged)
                })
            })
            .collect();
        for (rank, run) in runs.into_iter().enumerate() {
            let (gathered, broadcast, reduced, collected, mine, exchanged) = run.join().unwrap();
            // Reduce-scatter then all-gather is an all-reduce.
            assert_eq!(gathered, common::reference(&inputs, SUM));
            assert_eq!(broadcast, inputs[1]);
            let at_root =
                |root: usize, values: Vec<i64>| if rank == root { values } else { vec![] };
            assert_eq!(reduced, at_root(0, common::reference(&inputs, SUM)));
            assert_eq!(collected, at_root(1, inputs.concat()));
            assert_eq!(mine, inputs[1][2 * rank..2 * rank + 2].to_vec());
            let expected: Vec<i64> = inputs
                .iter()
                .flat_map(|input| input[2 * rank..2 * rank + 2].to_vec())
                .collect();
            assert_eq!(exchanged, expected);
        }
    });
}
