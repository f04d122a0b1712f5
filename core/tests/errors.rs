//! Every `NativeCollectiveError` variant is reachable, reaches every rank of its generation as the
//! same value, and leaves the communicator usable (except the sticky aborts).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

mod common;

use common::{
    Action, Ask, Site, Tensor, TestDevice, devices, lone_call, ramp, reference, run_generation,
    run_requests, tensors,
};
use ruccl_core::{
    Algorithm, Collective, DeviceId, NativeCollectiveError, NativeCommunicator,
    NativeCommunicators, Phase, Plan, ReduceOperation,
};
use std::time::Duration;

const SUM: ReduceOperation = ReduceOperation::Sum;

fn communicator(world: usize) -> (TestDevice, NativeCommunicator<TestDevice>) {
    common::quiet_injected_panics();
    let device = TestDevice::default();
    let communicator = NativeCommunicator::new(devices(world), device.clone()).unwrap();
    (device, communicator)
}

/// Assert every rank got exactly `expected`, then that the next generation succeeds.
fn assert_shared_then_recovers(
    communicator: &NativeCommunicator<TestDevice>,
    outcomes: Vec<common::Outcome>,
    expected: &NativeCollectiveError,
) {
    for (rank, outcome) in outcomes.iter().enumerate() {
        assert_eq!(outcome.as_ref().unwrap_err(), expected, "rank {rank}");
    }
    let world = communicator.world_size();
    let inputs = ramp(world, 7, 10);
    let outcomes = run_generation(communicator, tensors(&inputs), &vec![SUM; world]);
    for outcome in outcomes {
        assert_eq!(outcome.unwrap(), reference(&inputs, SUM));
    }
}

#[test]
fn empty_world_is_an_invalid_group() {
    let error = NativeCommunicator::new(Vec::new(), TestDevice::default()).unwrap_err();
    assert!(
        matches!(error, NativeCollectiveError::InvalidGroup { ref devices, .. } if devices.is_empty())
    );
    assert!(error.to_string().contains("at least one device"), "{error}");
}

#[test]
fn repeated_device_is_an_invalid_group_naming_both_ranks() {
    let ids = vec![DeviceId::new(4), DeviceId::new(7), DeviceId::new(4)];
    let error = NativeCommunicator::new(ids, TestDevice::default()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid device group [4, 7, 4]: device 4 is given twice, as rank 0 and rank 2"
    );
}

#[test]
fn registry_rejects_invalid_groups_too() {
    let registry = NativeCommunicators::new(TestDevice::default());
    let twice = vec![DeviceId::new(1), DeviceId::new(1)];
    assert!(matches!(
        registry.communicator(twice),
        Err(NativeCollectiveError::InvalidGroup { .. })
    ));
    assert!(matches!(
        registry.communicator(Vec::new()),
        Err(NativeCollectiveError::InvalidGroup { .. })
    ));
}

#[test]
fn rank_out_of_range_fails_at_once_without_joining() {
    let (_, communicator) = communicator(2);
    let error = lone_call(&communicator, 2, "all-reduce(sum)", |communicator| {
        communicator.all_reduce(2, Tensor::new(0, vec![1]), SUM)
    })
    .unwrap_err();
    assert_eq!(
        error,
        NativeCollectiveError::RankOutOfRange { rank: 2, world: 2 }
    );
    assert_eq!(error.to_string(), "rank 2 is outside the world of 2 ranks");
    // Nothing was deposited: a full generation still works.
    let inputs = ramp(2, 3, 0);
    let outcomes = run_generation(&communicator, tensors(&inputs), &[SUM, SUM]);
    assert!(outcomes.iter().all(Result::is_ok));
}

#[test]
fn rank_out_of_range_with_a_panicking_tensor_drop_still_returns_the_typed_error() {
    let (_, communicator) = communicator(1);
    let error = lone_call(&communicator, 5, "all-reduce(sum)", |communicator| {
        communicator.all_reduce(5, Tensor::bomb(0, vec![1]), SUM)
    })
    .unwrap_err();
    assert_eq!(
        error,
        NativeCollectiveError::RankOutOfRange { rank: 5, world: 1 }
    );
}

#[test]
fn mismatched_operations_give_every_rank_the_same_mismatch() {
    let (_, communicator) = communicator(3);
    let operations = [SUM, ReduceOperation::Max, SUM];
    let outcomes = run_generation(&communicator, tensors(&ramp(3, 4, 0)), &operations);
    let expected = NativeCollectiveError::ReductionMismatch {
        generation: 0,
        operations: operations.to_vec(),
    };
    assert_eq!(
        expected.to_string(),
        "ranks asked for different reduce operations in generation 0: rank 0: sum, rank 1: max, rank 2: sum"
    );
    assert_shared_then_recovers(&communicator, outcomes, &expected);
}

#[test]
fn a_prepare_error_on_one_rank_reaches_every_rank() {
    let (device, communicator) = communicator(3);
    device.inject(Site::Prepare { rank: 1 }, Action::Fail);
    let outcomes = run_generation(&communicator, tensors(&ramp(3, 4, 0)), &[SUM; 3]);
    let expected = NativeCollectiveError::Device {
        phase: Phase::Prepare,
        rank: Some(1),
        message: "test device: injected failure at Prepare { rank: 1 }".into(),
    };
    assert_eq!(
        expected.to_string(),
        "device error in prepare on rank 1: test device: injected failure at Prepare { rank: 1 }"
    );
    assert_shared_then_recovers(&communicator, outcomes, &expected);
}

#[test]
fn a_prepare_panic_on_one_rank_reaches_every_rank() {
    let (device, communicator) = communicator(3);
    device.inject(Site::Prepare { rank: 2 }, Action::Panic);
    let outcomes = run_generation(&communicator, tensors(&ramp(3, 4, 0)), &[SUM; 3]);
    let expected = NativeCollectiveError::Panicked {
        phase: Phase::Prepare,
        rank: Some(2),
        message: "injected panic at Prepare { rank: 2 }".into(),
    };
    assert_shared_then_recovers(&communicator, outcomes, &expected);
}

#[test]
fn executor_errors_at_every_site_reach_every_rank() {
    let world = 4;
    let ring = Ask::Built(Collective::AllReduce(SUM), Algorithm::Ring);
    let steps = Plan::new(Collective::AllReduce(SUM), Algorithm::Ring, world, 9)
        .unwrap()
        .steps()
        .len();
    assert_eq!(steps, 6);
    let mut sites = vec![(Site::Begin, Phase::Begin), (Site::Finish, Phase::Finish)];
    sites.extend((0..steps).map(|step| (Site::Exchange { step }, Phase::Exchange { step })));
    for (site, phase) in sites {
        for action in [Action::Fail, Action::Panic] {
            let (device, communicator) = communicator(world);
            device.inject(site, action);
            let asks = vec![ring.clone(); world];
            let outcomes = run_requests(&communicator, tensors(&ramp(world, 9, 0)), &asks);
            let expected = match action {
                Action::Fail => NativeCollectiveError::Device {
                    phase,
                    rank: None,
                    message: format!("test device: injected failure at {site:?}"),
                },
                Action::Panic => NativeCollectiveError::Panicked {
                    phase,
                    rank: None,
                    message: format!("injected panic at {site:?}"),
                },
            };
            assert_shared_then_recovers(&communicator, outcomes, &expected);
        }
    }
}

#[test]
fn a_wrong_output_count_reaches_every_rank() {
    for count in [0, 2, 5] {
        let (device, communicator) = communicator(3);
        device.inject(Site::OutputCount(count), Action::Fail);
        let outcomes = run_generation(&communicator, tensors(&ramp(3, 2, 0)), &[SUM; 3]);
        let expected = NativeCollectiveError::OutputCount {
            expected: 3,
            actual: count,
        };
        assert_shared_then_recovers(&communicator, outcomes, &expected);
    }
}

#[test]
fn a_panicking_drop_of_a_prepared_input_fails_the_generation_for_everyone() {
    // The device drops the inputs it has read inside `begin`.
    let (_, communicator) = communicator(3);
    let mut inputs = tensors(&ramp(3, 5, 0));
    inputs[1].bomb = true;
    let outcomes = run_generation(&communicator, inputs, &[SUM; 3]);
    let expected = NativeCollectiveError::Panicked {
        phase: Phase::Begin,
        rank: None,
        message: "injected panic in tensor drop".into(),
    };
    assert_shared_then_recovers(&communicator, outcomes, &expected);
}

#[test]
fn a_panicking_drop_of_the_work_after_a_failure_keeps_the_original_error() {
    let (device, communicator) = communicator(2);
    device.bomb_next_work();
    device.inject(Site::Exchange { step: 1 }, Action::Fail);
    let ring = Ask::Built(Collective::AllReduce(SUM), Algorithm::Ring);
    let outcomes = run_requests(
        &communicator,
        tensors(&ramp(2, 5, 0)),
        &[ring.clone(), ring],
    );
    let expected = NativeCollectiveError::Device {
        phase: Phase::Exchange { step: 1 },
        rank: None,
        message: "test device: injected failure at Exchange { step: 1 }".into(),
    };
    assert_shared_then_recovers(&communicator, outcomes, &expected);
}

#[test]
fn a_panicking_device_clone_in_the_registry_is_a_typed_error() {
    common::quiet_injected_panics();
    let device = TestDevice::default();
    let registry = NativeCommunicators::new(device.clone());
    device.panic_on_clone_after(0);
    let error = registry.communicator(devices(2)).unwrap_err();
    assert!(matches!(
        error,
        NativeCollectiveError::Panicked {
            phase: Phase::CloneDevice,
            ..
        }
    ));
    // The registry is still usable.
    assert!(registry.communicator(devices(2)).is_ok());
}

#[test]
fn abort_gives_every_later_call_the_aborted_error() {
    let (_, communicator) = communicator(2);
    assert!(!communicator.is_aborted());
    communicator.abort("operator pressed stop");
    assert!(communicator.is_aborted());
    let expected = NativeCollectiveError::Aborted {
        reason: "operator pressed stop".into(),
    };
    assert_eq!(
        expected.to_string(),
        "the communicator was aborted: operator pressed stop"
    );
    for _ in 0..3 {
        let outcomes = run_generation(&communicator, tensors(&ramp(2, 3, 0)), &[SUM; 2]);
        for outcome in outcomes {
            assert_eq!(outcome.unwrap_err(), expected);
        }
    }
}

#[test]
fn the_first_abort_wins() {
    let (_, communicator) = communicator(2);
    communicator.abort("first");
    communicator.abort("second");
    let error = lone_call(&communicator, 0, "all-reduce(sum)", |communicator| {
        communicator.all_reduce(0, Tensor::new(0, vec![1]), SUM)
    })
    .unwrap_err();
    assert_eq!(
        error,
        NativeCollectiveError::Aborted {
            reason: "first".into()
        }
    );
}

#[test]
fn a_timeout_names_the_ranks_that_never_arrived() {
    let (_, communicator) = communicator(3);
    let error = lone_call(&communicator, 1, "all-reduce(sum), 50 ms", |communicator| {
        communicator.all_reduce_timeout(1, Tensor::new(1, vec![1]), SUM, Duration::from_millis(50))
    })
    .unwrap_err();
    let expected = NativeCollectiveError::TimedOut {
        rank: 1,
        generation: 0,
        timeout: Duration::from_millis(50),
        missing: vec![0, 2],
    };
    assert_eq!(error, expected);
    assert_eq!(
        error.to_string(),
        "rank 1 timed out after 50ms in generation 0: ranks [0, 2] never arrived"
    );
    // The timeout aborted the communicator: later calls fail fast with the same error.
    assert!(communicator.is_aborted());
    let later = lone_call(&communicator, 0, "all-reduce(sum)", |communicator| {
        communicator.all_reduce(0, Tensor::new(0, vec![1]), SUM)
    })
    .unwrap_err();
    assert_eq!(later, expected);
}
