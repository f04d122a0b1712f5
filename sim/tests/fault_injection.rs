//! The fault decorator, driven through a real communicator with one thread per rank: every fault
//! site delivers the same error to every rank, the next generation succeeds, every generation is
//! what the predictor says, and nothing the simulated device made stays alive.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use ruccl_core::{Algorithm, Collective, DeviceId, Plan, ReduceOperation};
use ruccl_sim::SimDevice;
use ruccl_sim::fault::{
    FaultPlan, FaultyDevice, RandomPlan, Received, Trial, every_site, trial_sum,
};
use std::time::Duration;

const WORLD: usize = 3;
const LENGTH: usize = 7;

type Device = FaultyDevice<SimDevice>;

fn devices() -> Vec<DeviceId> {
    (0..WORLD as u32).map(DeviceId::new).collect()
}

fn trial(generations: u64, algorithm: Algorithm) -> Trial {
    Trial {
        generations,
        length: LENGTH,
        algorithm,
        timeout: Duration::from_secs(60),
    }
}

/// Run `generations` ring all-reduces (sum) through a communicator over `plan`; `seen[g][r]`.
fn run(plan: FaultPlan, generations: u64) -> (Vec<Vec<Received>>, Device) {
    run_via(plan, generations, Algorithm::Ring)
}

/// Like [`run`], via `algorithm`. Every generation is also what the predictor says, and the
/// simulated device's census is back to zero afterwards.
fn run_via(
    plan: FaultPlan,
    generations: u64,
    algorithm: Algorithm,
) -> (Vec<Vec<Received>>, Device) {
    let device = FaultyDevice::new(SimDevice::new(), devices(), plan.clone());
    let trial = trial(generations, algorithm);
    let seen = trial.run(&device, &devices()).unwrap();
    trial.check(&plan, &device, &seen).unwrap();
    device
        .inner()
        .check_quiescent()
        .unwrap_or_else(|leak| panic!("`{plan}` via {algorithm}: {leak}"));
    (seen, device)
}

/// The plan every generation of a trial via `algorithm` runs.
fn plan_of(algorithm: Algorithm) -> Plan {
    let sum = Collective::AllReduce(ReduceOperation::Sum);
    Plan::with_model(
        sum,
        algorithm,
        WORLD,
        ruccl_core::TensorInfo {
            len: LENGTH,
            element: ruccl_sim::ElementType::I64,
        },
        &SimDevice::new().model(),
    )
    .unwrap()
}

fn sum(generation: u64) -> ruccl_sim::HostValues {
    trial_sum(WORLD, generation, LENGTH)
}

fn assert_generation_succeeded(seen: &[Received], generation: u64) {
    for (rank, seen) in seen.iter().enumerate() {
        assert_eq!(
            seen,
            &Received::Output {
                values: sum(generation),
                drop_panicked: false
            },
            "rank {rank} in generation {generation}"
        );
    }
}

/// The plan fails generation 1 only: 0 and 2 succeed, every rank of 1 gets one error naming
/// `expected`.
fn assert_site_fails_generation_one(plan: &str, expected: &str) {
    let (seen, device) = run(plan.parse().unwrap(), 3);
    assert_generation_succeeded(&seen[0], 0);
    let Received::Error(first) = &seen[1][0] else {
        panic!("`{plan}`: rank 0 got {:?}", seen[1][0]);
    };
    assert!(
        first.contains(expected),
        "`{plan}`: `{first}` lacks `{expected}`"
    );
    for (rank, other) in seen[1].iter().enumerate() {
        assert_eq!(
            other,
            &Received::Error(first.clone()),
            "`{plan}`: rank {rank}"
        );
    }
    assert_generation_succeeded(&seen[2], 2);
    assert!(!device.fired().is_empty(), "`{plan}`: nothing fired");
    assert!(device.fired().iter().all(|fired| fired.generation == 1));
}

#[test]
fn a_prepare_error_reaches_every_rank() {
    assert_site_fails_generation_one(
        "prepare:rank=1:gen=1:error",
        "device error in prepare on rank 1: injected error in prepare on rank 1 in generation 1",
    );
}

#[test]
fn a_prepare_panic_reaches_every_rank() {
    assert_site_fails_generation_one(
        "prepare:rank=2:gen=1:panic",
        "device panicked in prepare on rank 2: injected panic in prepare on rank 2",
    );
}

#[test]
fn a_begin_error_reaches_every_rank() {
    assert_site_fails_generation_one(
        "begin:gen=1:error",
        "device error in begin: injected error in begin in generation 1",
    );
}

#[test]
fn a_begin_panic_reaches_every_rank() {
    assert_site_fails_generation_one(
        "begin:gen=1:panic",
        "device panicked in begin: injected panic in begin",
    );
}

#[test]
fn an_exchange_error_at_a_chosen_step_reaches_every_rank() {
    assert_site_fails_generation_one(
        "exchange:step=2:rank=1:gen=1:error",
        "device error in exchange step 2: injected error in exchange step 2 on rank 1 in generation 1",
    );
}

#[test]
fn the_ring_of_three_ranks_has_four_steps() {
    // The exchange tests below fault steps 2 and 3 of it.
    assert_eq!(plan_of(Algorithm::Ring).steps().len(), 4);
}

#[test]
fn an_exchange_panic_at_the_last_step_reaches_every_rank() {
    assert_site_fails_generation_one(
        "exchange:step=3:gen=1:panic",
        "device panicked in exchange step 3: injected panic in exchange step 3",
    );
}

#[test]
fn a_finish_error_reaches_every_rank() {
    assert_site_fails_generation_one(
        "finish:gen=1:error",
        "device error in finish: injected error in finish",
    );
}

#[test]
fn a_finish_panic_reaches_every_rank() {
    assert_site_fails_generation_one(
        "finish:gen=1:panic",
        "device panicked in finish: injected panic in finish",
    );
}

#[test]
fn too_few_outputs_reach_every_rank_as_an_output_count_error() {
    assert_site_fails_generation_one(
        "outputs:count=2:gen=1",
        "the device returned 2 outputs for 3 ranks",
    );
}

#[test]
fn too_many_outputs_reach_every_rank_as_an_output_count_error() {
    assert_site_fails_generation_one(
        "outputs:count=5:gen=1",
        "the device returned 5 outputs for 3 ranks",
    );
}

#[test]
fn a_panicking_drop_of_a_prepared_input_reaches_every_rank() {
    assert_site_fails_generation_one(
        "drop:what=prepared:rank=0:gen=1",
        "device panicked in begin: injected panic in drop of a prepared input on rank 0 in generation 1",
    );
}

#[test]
fn a_panicking_drop_of_the_work_reaches_every_rank_from_finish() {
    assert_site_fails_generation_one(
        "drop:what=work:gen=1",
        "device panicked in finish: injected panic in drop of the work in generation 1",
    );
}

#[test]
fn a_panicking_work_drop_after_a_failure_does_not_hide_the_failure() {
    assert_site_fails_generation_one(
        "exchange:step=0:gen=1:error,drop:what=work:gen=1",
        "device error in exchange step 0: injected error in exchange step 0",
    );
}

#[test]
fn a_panicking_output_drop_hits_only_its_holder_after_delivery() {
    let (seen, _) = run("drop:what=output:rank=2:gen=1".parse().unwrap(), 3);
    assert_generation_succeeded(&seen[0], 0);
    for (rank, seen) in seen[1].iter().enumerate() {
        assert_eq!(
            seen,
            &Received::Output {
                values: sum(1),
                drop_panicked: rank == 2
            },
            "rank {rank}"
        );
    }
    assert_generation_succeeded(&seen[2], 2);
}

#[test]
fn an_undelivered_armed_output_is_contained_by_the_communicator() {
    // Outputs that are never delivered are dropped by the communicator, which contains the panic.
    assert_site_fails_generation_one(
        "outputs:count=4:gen=1,drop:what=output:gen=1",
        "the device returned 4 outputs for 3 ranks",
    );
}

#[test]
fn an_armed_prepared_input_fails_the_generation_before_a_begin_fault() {
    // `begin` drops the decorator's wrappers first: the armed input's panic is the error.
    assert_site_fails_generation_one(
        "begin:gen=1:error,drop:what=prepared:rank=2:gen=1",
        "device panicked in begin: injected panic in drop of a prepared input on rank 2 in generation 1",
    );
}

#[test]
fn seeded_random_plans_keep_agreement_and_spare_unplanned_generations() {
    for (seed, algorithm) in (0..8).zip([Algorithm::Ring, Algorithm::Direct].into_iter().cycle()) {
        let generations = 10;
        let shape = RandomPlan::for_plan(seed, &plan_of(algorithm), generations, 3);
        let plan = FaultPlan::random(shape);
        let (seen, _) = run_via(plan.clone(), generations, algorithm);
        for (generation, seen) in seen.iter().enumerate() {
            let planned = plan
                .specs()
                .iter()
                .any(|spec| spec.generation == Some(generation as u64));
            if !planned {
                assert_generation_succeeded(seen, generation as u64);
                continue;
            }
            // Agreement: every rank errs with one text, or every rank has the right output.
            match &seen[0] {
                Received::Error(first) => assert!(
                    seen.iter()
                        .all(|other| other == &Received::Error(first.clone())),
                    "seed {seed} `{plan}` generation {generation}: {seen:?}"
                ),
                Received::Output { .. } => assert!(
                    seen.iter().all(|other| matches!(other,
                        Received::Output { values, .. } if *values == sum(generation as u64))),
                    "seed {seed} `{plan}` generation {generation}: {seen:?}"
                ),
                Received::Harness(message) => panic!("the harness failed: {message}"),
            }
        }
    }
}

#[test]
fn a_failed_prepare_does_not_shift_the_generation_of_later_faults() {
    // Generation 1 never reaches `begin`; the finish fault must still strike generation 2.
    let (seen, device) = run(
        "prepare:rank=0:gen=1:error,finish:gen=2:error"
            .parse()
            .unwrap(),
        4,
    );
    assert_generation_succeeded(&seen[0], 0);
    for (generation, expected) in [(1, "in prepare on rank 0"), (2, "in finish")] {
        for seen in &seen[generation] {
            assert!(
                matches!(seen, Received::Error(text) if text.contains(expected)),
                "generation {generation}: {seen:?}"
            );
        }
    }
    assert_generation_succeeded(&seen[3], 3);
    let fired: Vec<u64> = device
        .fired()
        .iter()
        .map(|fired| fired.generation)
        .collect();
    assert_eq!(fired, vec![1, 2]);
}

#[test]
fn the_predictor_names_the_error_of_every_site_to_the_letter() {
    // `run_via` checks every generation against `FaultPlan::predict` and the census: here, one
    // fault at a time at every site the decorator has (every step of the plan), each alone in
    // generation 1, for a plan of many steps and a plan of one.
    for algorithm in [Algorithm::Ring, Algorithm::Direct] {
        let steps = plan_of(algorithm).steps().len();
        for spec in every_site(WORLD, steps, 1) {
            let (seen, _) = run_via(FaultPlan::new(vec![spec]), 3, algorithm);
            assert_generation_succeeded(&seen[2], 2);
        }
    }
}

#[test]
fn a_fault_at_a_step_the_plan_does_not_have_never_fires() {
    // Direct has one step: a fault at step 3 is never met, and every generation succeeds.
    let (seen, device) = run_via(
        "exchange:step=3:error".parse().unwrap(),
        2,
        Algorithm::Direct,
    );
    for (generation, seen) in seen.iter().enumerate() {
        assert_generation_succeeded(seen, generation as u64);
    }
    assert!(device.fired().is_empty());
}

#[test]
fn a_mismatch_wins_over_prepare_faults_and_armed_inputs_as_predicted() {
    use ruccl_core::{CollectiveOptions, NativeCommunicator, TensorInfo};
    use ruccl_sim::fault::{GenerationCalls, Outcome};
    use ruccl_sim::{ElementType, HostTensors, HostValues};
    // Rank 1 asks for the maximum, the others for the sum; rank 2's prepare fails and rank 0's
    // input is armed: the ranks' disagreement is the generation's error, on every rank.
    let plan: FaultPlan = "prepare:rank=2:error,drop:what=prepared:rank=0"
        .parse()
        .unwrap();
    let device = FaultyDevice::new(SimDevice::new(), devices(), plan.clone());
    let communicator = NativeCommunicator::new(devices(), device.clone()).unwrap();
    let operations = [
        ReduceOperation::Sum,
        ReduceOperation::Max,
        ReduceOperation::Sum,
    ];
    let got: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = operations
            .iter()
            .enumerate()
            .map(|(rank, &operation)| {
                let (device, communicator) = (&device, &communicator);
                scope.spawn(move || {
                    let on = DeviceId::new(rank as u32);
                    let tensor = device
                        .upload(on, &HostValues::I64(vec![1; LENGTH]))
                        .unwrap();
                    let collective = Collective::AllReduce(operation);
                    let options = CollectiveOptions::default().with_algorithm(Algorithm::Ring);
                    communicator
                        .collective(rank, tensor, collective, options)
                        .err()
                        .map(|error| error.to_string())
                        .unwrap_or_default()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let requests: Vec<(Collective, Algorithm)> = operations
        .iter()
        .map(|&operation| (Collective::AllReduce(operation), Algorithm::Ring))
        .collect();
    let input = TensorInfo {
        len: LENGTH,
        element: ElementType::I64,
    };
    let inputs = vec![input; WORLD];
    let calls = GenerationCalls::new(0, &requests, &inputs, SimDevice::new().model());
    let Outcome::Failed(predicted) = plan.predict(&calls) else {
        panic!("a mismatch cannot deliver");
    };
    assert!(
        predicted
            .to_string()
            .contains("different reduce operations")
    );
    assert_eq!(got, vec![predicted.to_string(); WORLD]);
    device.inner().check_quiescent().unwrap();
}
