//! Real-thread behaviour of the rendezvous: agreement and reuse over thousands of generations
//! with fast re-entry, containment of panicking drops, abort and timeout delivery.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

mod common;

use common::{Action, Site, Tensor, TestDevice, devices, ramp, reference, run_generation, tensors};
use ruccl_core::{NativeCollectiveError, NativeCommunicator, ReduceOperation};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// Every rank of `communicator` on a thread of its own, calling a sum all-reduce of
/// `[rank + 1]`.
fn spawn_sums(
    communicator: &Arc<NativeCommunicator<TestDevice>>,
) -> Vec<thread::JoinHandle<Result<Vec<i64>, NativeCollectiveError>>> {
    (0..communicator.world_size())
        .map(|rank| {
            let communicator = Arc::clone(communicator);
            thread::spawn(move || {
                communicator
                    .all_reduce(
                        rank,
                        Tensor::new(rank as u32, vec![rank as i64 + 1]),
                        ReduceOperation::Sum,
                    )
                    .map(Tensor::into_values)
            })
        })
        .collect()
}

/// One rank's outcome with the error rendered, as compared across ranks.
type Reported = Result<Vec<i64>, String>;

fn shared(world: usize) -> (TestDevice, Arc<NativeCommunicator<TestDevice>>) {
    common::quiet_injected_panics();
    let device = TestDevice::default();
    let communicator = NativeCommunicator::new(devices(world), device.clone()).unwrap();
    (device, Arc::new(communicator))
}

/// Rank `rank`'s input in generation `generation`: distinct per rank and per generation, so a
/// result mixing generations or ranks is detected.
fn input(rank: usize, generation: usize, length: usize) -> Vec<i64> {
    (0..length)
        .map(|i| (generation * 1_000 + rank * 10 + i) as i64 % 97 + 1)
        .collect()
}

/// How long one of these tests may go without a rank entering or leaving a call before its
/// watchdog fails the binary, naming the ranks still inside a call (a healthy generation takes
/// milliseconds; the longest test a few seconds in a debug build).
const TEST_LIMIT: std::time::Duration = common::GENERATION_LIMIT;

fn operation(generation: usize) -> ReduceOperation {
    ReduceOperation::ALL[generation % ReduceOperation::ALL.len()]
}

#[test]
fn thousands_of_generations_with_fast_reentry_deliver_each_generations_own_reduction() {
    let progress = common::Progress::default();
    let _watchdog = common::Watchdog::arm(
        "thousands_of_generations_with_fast_reentry_deliver_each_generations_own_reduction",
        TEST_LIMIT,
        progress.clone(),
    );
    const WORLD: usize = 4;
    const GENERATIONS: usize = 3_000;
    let (_, communicator) = shared(WORLD);
    let handles: Vec<_> = (0..WORLD)
        .map(|rank| {
            let communicator = Arc::clone(&communicator);
            let progress = progress.clone();
            thread::spawn(move || {
                for generation in 0..GENERATIONS {
                    // Lengths vary so that n < W, n = W and n > W all occur.
                    let length = generation % 11;
                    let tensor = Tensor::new(rank as u32, input(rank, generation, length));
                    progress.enter(rank, generation as u64, "all-reduce");
                    let output = communicator
                        .all_reduce(rank, tensor, operation(generation))
                        .unwrap_or_else(|error| panic!("rank {rank} gen {generation}: {error}"));
                    progress.leave(rank);
                    let inputs: Vec<Vec<i64>> =
                        (0..WORLD).map(|r| input(r, generation, length)).collect();
                    assert_eq!(
                        output.device.index() as usize,
                        rank,
                        "output on the wrong device"
                    );
                    assert_eq!(
                        output.into_values(),
                        reference(&inputs, operation(generation)),
                        "rank {rank} generation {generation}"
                    );
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
}

#[test]
fn panicking_drops_and_faults_strand_nobody_and_every_rank_agrees() {
    let progress = common::Progress::default();
    let _watchdog = common::Watchdog::arm(
        "panicking_drops_and_faults_strand_nobody_and_every_rank_agrees",
        TEST_LIMIT,
        progress.clone(),
    );
    const WORLD: usize = 3;
    const GENERATIONS: usize = 600;
    let (device, communicator) = shared(WORLD);
    let (results, collected) = mpsc::channel::<(usize, usize, Reported)>();
    let handles: Vec<_> = (0..WORLD)
        .map(|rank| {
            let communicator = Arc::clone(&communicator);
            let results = results.clone();
            let progress = progress.clone();
            thread::spawn(move || {
                for generation in 0..GENERATIONS {
                    progress.enter(rank, generation as u64, "all-reduce(sum)");
                    let values = input(rank, generation, 5);
                    // Every 7th generation, rank 1's tensor panics when dropped.
                    let tensor = if rank == 1 && generation % 7 == 3 {
                        Tensor::bomb(rank as u32, values)
                    } else {
                        Tensor::new(rank as u32, values)
                    };
                    let outcome = communicator
                        .all_reduce(rank, tensor, ReduceOperation::Sum)
                        .map(Tensor::into_values)
                        .map_err(|error| error.to_string());
                    progress.leave(rank);
                    results.send((rank, generation, outcome)).unwrap();
                }
            })
        })
        .collect();
    drop(results);
    // One exchange panic as well, in whichever generation first reaches a step after this.
    device.inject(Site::Exchange { step: 0 }, Action::Panic);
    for handle in handles {
        handle.join().unwrap();
    }
    let mut by_generation: Vec<Vec<Option<Reported>>> = vec![vec![None; WORLD]; GENERATIONS];
    for (rank, generation, outcome) in collected {
        by_generation[generation][rank] = Some(outcome);
    }
    let mut failed = 0;
    for (generation, outcomes) in by_generation.into_iter().enumerate() {
        let outcomes: Vec<_> = outcomes.into_iter().map(Option::unwrap).collect();
        match &outcomes[0] {
            Ok(_) => {
                let inputs: Vec<Vec<i64>> = (0..WORLD).map(|r| input(r, generation, 5)).collect();
                for outcome in &outcomes {
                    assert_eq!(
                        outcome.as_ref().unwrap(),
                        &reference(&inputs, ReduceOperation::Sum)
                    );
                }
            }
            Err(first) => {
                failed += 1;
                for outcome in &outcomes {
                    assert_eq!(
                        outcome.as_ref().unwrap_err(),
                        first,
                        "generation {generation}"
                    );
                }
            }
        }
    }
    // Every bomb generation failed, plus the one with the exchange panic (unless it fell on a
    // bomb generation, which then fails once for two reasons).
    let bombs = (0..GENERATIONS).filter(|g| g % 7 == 3).count();
    assert!(
        failed == bombs || failed == bombs + 1,
        "{failed} failures for {bombs} bombs"
    );
    assert!(!device.fault_pending());
}

#[test]
fn abort_releases_ranks_waiting_for_stragglers() {
    let progress = common::Progress::default();
    let _watchdog = common::Watchdog::arm(
        "abort_releases_ranks_waiting_for_stragglers",
        TEST_LIMIT,
        progress.clone(),
    );
    let (_, communicator) = shared(3);
    let waiting: Vec<_> = (0..2)
        .map(|rank| {
            let communicator = Arc::clone(&communicator);
            thread::spawn(move || {
                communicator.all_reduce(
                    rank,
                    Tensor::new(rank as u32, vec![1]),
                    ReduceOperation::Sum,
                )
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(50));
    communicator.abort("straggler never came");
    let expected = NativeCollectiveError::Aborted {
        reason: "straggler never came".into(),
    };
    for handle in waiting {
        assert_eq!(handle.join().unwrap().unwrap_err(), expected);
    }
    // The straggler fails fast, without waiting for anyone.
    let late = communicator.all_reduce(2, Tensor::new(2, vec![1]), ReduceOperation::Sum);
    assert_eq!(late.unwrap_err(), expected);
}

#[test]
fn abort_while_the_device_hangs_releases_the_waiters_and_discards_the_run() {
    let progress = common::Progress::default();
    let _watchdog = common::Watchdog::arm(
        "abort_while_the_device_hangs_releases_the_waiters_and_discards_the_run",
        TEST_LIMIT,
        progress.clone(),
    );
    const WORLD: usize = 3;
    let (device, communicator) = shared(WORLD);
    device.hang();
    let (done, finished) = mpsc::channel();
    for rank in 0..WORLD {
        let communicator = Arc::clone(&communicator);
        let done = done.clone();
        thread::spawn(move || {
            let outcome = communicator.all_reduce(
                rank,
                Tensor::new(rank as u32, vec![1, 2, 3]),
                ReduceOperation::Sum,
            );
            done.send(outcome.map(Tensor::into_values)).unwrap();
        });
    }
    device.wait_until_hung();
    communicator.abort("device hung");
    let expected = NativeCollectiveError::Aborted {
        reason: "device hung".into(),
    };
    // The two waiters return while the runner is still stuck inside the device.
    for _ in 0..WORLD - 1 {
        let outcome = finished
            .recv_timeout(Duration::from_secs(10))
            .expect("a waiter stayed stranded");
        assert_eq!(outcome.unwrap_err(), expected);
    }
    assert!(
        finished.recv_timeout(Duration::from_millis(100)).is_err(),
        "the runner cannot have returned"
    );
    device.release();
    // The runner's outputs are discarded: it too gets the abort.
    let runner = finished.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(runner.unwrap_err(), expected);
}

#[test]
fn a_waiting_rank_offers_the_device_its_thread_while_it_polls() {
    let progress = common::Progress::default();
    let _watchdog = common::Watchdog::arm(
        "a_waiting_rank_offers_the_device_its_thread_while_it_polls",
        TEST_LIMIT,
        progress.clone(),
    );
    let (device, communicator) = shared(2);
    device.hang();
    let ranks = spawn_sums(&communicator);
    // The runner is stuck in `exchange`, so the other rank cannot see its delivery: it polls,
    // and offers the device its thread between polls, before it parks.
    device.wait_until_hung();
    let start = std::time::Instant::now();
    while device.assists() == 0 && start.elapsed() < Duration::from_secs(5) {
        thread::yield_now();
    }
    let offered = device.assists();
    device.release();
    for rank in ranks {
        assert_eq!(rank.join().unwrap().unwrap(), vec![3]);
    }
    assert!(offered > 0, "the waiting rank never called `assist`");
}

#[test]
fn abort_racing_with_completion_never_splits_a_generation() {
    let progress = common::Progress::default();
    let _watchdog = common::Watchdog::arm(
        "abort_racing_with_completion_never_splits_a_generation",
        TEST_LIMIT,
        progress.clone(),
    );
    const WORLD: usize = 3;
    for attempt in 0..200 {
        let (_, communicator) = shared(WORLD);
        let handles = spawn_sums(&communicator);
        if attempt % 2 == 0 {
            thread::yield_now();
        }
        communicator.abort("race");
        let outcomes: Vec<_> = handles
            .into_iter()
            .map(|handle| handle.join().unwrap())
            .collect();
        let all_ok = outcomes
            .iter()
            .all(|outcome| outcome.as_ref().is_ok_and(|values| values == &[6]));
        let all_aborted = outcomes.iter().all(|outcome| {
            outcome.as_ref().is_err_and(|error| {
                *error
                    == NativeCollectiveError::Aborted {
                        reason: "race".into(),
                    }
            })
        });
        assert!(
            all_ok || all_aborted,
            "attempt {attempt}: split outcome {outcomes:?}"
        );
    }
}

#[test]
fn a_timeout_while_the_schedule_hangs_reaches_every_rank_and_names_no_straggler() {
    let progress = common::Progress::default();
    let _watchdog = common::Watchdog::arm(
        "a_timeout_while_the_schedule_hangs_reaches_every_rank_and_names_no_straggler",
        TEST_LIMIT,
        progress.clone(),
    );
    const WORLD: usize = 2;
    let (device, communicator) = shared(WORLD);
    device.hang();
    let handles: Vec<_> = (0..WORLD)
        .map(|rank| {
            let communicator = Arc::clone(&communicator);
            thread::spawn(move || {
                communicator.all_reduce_timeout(
                    rank,
                    Tensor::new(rank as u32, vec![1]),
                    ReduceOperation::Sum,
                    Duration::from_millis(100),
                )
            })
        })
        .collect();
    device.wait_until_hung();
    thread::sleep(Duration::from_millis(300));
    device.release();
    let outcomes: Vec<_> = handles
        .into_iter()
        .map(|handle| handle.join().unwrap())
        .collect();
    let first = outcomes[0].as_ref().unwrap_err();
    assert!(
        matches!(first, NativeCollectiveError::TimedOut { missing, generation: 0, .. } if missing.is_empty()),
        "{first}"
    );
    assert!(
        first
            .to_string()
            .ends_with("every rank had arrived and the schedule was still running")
    );
    assert_eq!(outcomes[1].as_ref().unwrap_err(), first);
}

#[test]
fn ranks_timing_out_together_report_the_same_error() {
    let progress = common::Progress::default();
    let _watchdog = common::Watchdog::arm(
        "ranks_timing_out_together_report_the_same_error",
        TEST_LIMIT,
        progress.clone(),
    );
    const WORLD: usize = 4;
    let (_, communicator) = shared(WORLD);
    let handles: Vec<_> = (0..WORLD - 1)
        .map(|rank| {
            let communicator = Arc::clone(&communicator);
            thread::spawn(move || {
                communicator.all_reduce_timeout(
                    rank,
                    Tensor::new(rank as u32, vec![1]),
                    ReduceOperation::Sum,
                    Duration::from_millis(300 + 100 * rank as u64),
                )
            })
        })
        .collect();
    let outcomes: Vec<_> = handles
        .into_iter()
        .map(|handle| handle.join().unwrap())
        .collect();
    let first = outcomes[0].as_ref().unwrap_err();
    assert!(
        matches!(first, NativeCollectiveError::TimedOut { missing, .. } if missing == &[3]),
        "{first}"
    );
    for outcome in &outcomes {
        assert_eq!(outcome.as_ref().unwrap_err(), first);
    }
}

#[test]
fn a_generous_timeout_does_not_fire() {
    let progress = common::Progress::default();
    let _watchdog = common::Watchdog::arm(
        "a_generous_timeout_does_not_fire",
        TEST_LIMIT,
        progress.clone(),
    );
    const WORLD: usize = 3;
    let (_, communicator) = shared(WORLD);
    for generation in 0..50 {
        let handles: Vec<_> = (0..WORLD)
            .map(|rank| {
                let communicator = Arc::clone(&communicator);
                thread::spawn(move || {
                    communicator.all_reduce_timeout(
                        rank,
                        Tensor::new(rank as u32, input(rank, generation, 4)),
                        ReduceOperation::Max,
                        Duration::from_secs(30),
                    )
                })
            })
            .collect();
        for handle in handles {
            assert!(handle.join().unwrap().is_ok());
        }
    }
    assert!(!communicator.is_aborted());
}

#[test]
fn a_second_call_for_a_busy_rank_is_refused_and_the_first_completes() {
    let progress = common::Progress::default();
    let _watchdog = common::Watchdog::arm(
        "a_second_call_for_a_busy_rank_is_refused_and_the_first_completes",
        TEST_LIMIT,
        progress.clone(),
    );
    // Thread A deposits rank 0 into generation 0 and waits for rank 1; a second call for rank 0
    // is refused at once (one thread per rank) and A's generation completes normally.
    const WORLD: usize = 2;
    let (_, communicator) = shared(WORLD);
    let first = {
        let communicator = Arc::clone(&communicator);
        thread::spawn(move || {
            communicator.all_reduce(0, Tensor::new(0, vec![1]), ReduceOperation::Sum)
        })
    };
    // Give A time to deposit (should it not have, the second call becomes rank 0's call, waits
    // for rank 1 and fails the test by timing out, not by hanging).
    thread::sleep(Duration::from_millis(50));
    let second = communicator.all_reduce_timeout(
        0,
        Tensor::new(0, vec![2]),
        ReduceOperation::Sum,
        Duration::from_secs(5),
    );
    assert_eq!(
        second.map(Tensor::into_values),
        Err(NativeCollectiveError::RankBusy { rank: 0 })
    );
    let last = communicator
        .all_reduce(1, Tensor::new(1, vec![10]), ReduceOperation::Sum)
        .unwrap();
    assert_eq!(last.into_values(), vec![11]);
    assert_eq!(first.join().unwrap().unwrap().into_values(), vec![11]);
    assert!(!communicator.is_aborted());
}

#[test]
fn a_rank_running_ahead_times_out_naming_the_ranks_missing_from_its_generation() {
    let progress = common::Progress::default();
    let _watchdog = common::Watchdog::arm(
        "a_rank_running_ahead_times_out_naming_the_ranks_missing_from_its_generation",
        TEST_LIMIT,
        progress.clone(),
    );
    // Generation 0 completes; rank 0 goes ahead into generation 1 and rank 1 never calls.
    const WORLD: usize = 2;
    let (_, communicator) = shared(WORLD);
    let outcomes = run_generation(
        &communicator,
        tensors(&ramp(WORLD, 3, 0)),
        &[ReduceOperation::Sum; WORLD],
    );
    assert!(outcomes.iter().all(Result::is_ok));
    let late = communicator
        .all_reduce_timeout(
            0,
            Tensor::new(0, vec![1]),
            ReduceOperation::Sum,
            Duration::from_millis(50),
        )
        .unwrap_err();
    let expected = NativeCollectiveError::TimedOut {
        rank: 0,
        generation: 1,
        timeout: Duration::from_millis(50),
        missing: vec![1],
    };
    assert_eq!(late, expected);
    let after = communicator
        .all_reduce(1, Tensor::new(1, vec![1]), ReduceOperation::Sum)
        .unwrap_err();
    assert_eq!(after, expected);
}

#[test]
fn wait_stats_count_published_generations_and_parks() {
    let progress = common::Progress::default();
    let _watchdog = common::Watchdog::arm(
        "wait_stats_count_published_generations_and_parks",
        TEST_LIMIT,
        progress.clone(),
    );
    // Rank 1 comes late enough that rank 0 exhausts its polls and parks.
    const WORLD: usize = 2;
    let (_, communicator) = shared(WORLD);
    let early = {
        let communicator = Arc::clone(&communicator);
        thread::spawn(move || {
            communicator.all_reduce(0, Tensor::new(0, vec![1]), ReduceOperation::Sum)
        })
    };
    thread::sleep(Duration::from_millis(300));
    let late = communicator
        .all_reduce(1, Tensor::new(1, vec![2]), ReduceOperation::Sum)
        .unwrap();
    assert_eq!(late.into_values(), vec![3]);
    assert_eq!(early.join().unwrap().unwrap().into_values(), vec![3]);
    let stats = communicator.wait_stats();
    assert_eq!(stats.generations, 1);
    assert_eq!(stats.parked_generations, 1);
    assert!(stats.parks >= 1);
}
