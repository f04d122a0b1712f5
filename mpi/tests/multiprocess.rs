//! The inter-process tests: one binary that every process of an `mpirun` job runs (no libtest
//! harness: its threads would post collectives in a different order on each process).
//!
//! `mpi/run-tests.sh` runs it under `mpirun -np 2` and `-np 3`; plain `cargo test` runs it as a
//! single process, where the scenarios that need a peer say they are skipped. Each scenario gets
//! a fresh communicator (a timeout poisons one for good); a separate control communicator
//! agrees, after each scenario, on whether it passed everywhere. Process 0 prints one line per
//! scenario; a failing process prints its reasons. The exit code is non-zero if any scenario
//! failed on any process. Every wait has a deadline.
//!
//! Arguments: a scenario name runs only that scenario. (The process-death check runs with the
//! hierarchical communicator's binary, `tests/hierarchical.rs --die`, whose ranks wait in this
//! engine.)

mod common;
use common::{buffer, input, passed_everywhere, reference, same_bits, value};
use ruccl_core::{ElementType, ReduceOperation};
use ruccl_mpi::{
    CallDescription, CollectiveKind, HostValues, InterProcess, InterProcessError, LocalFailure,
    MpiInterProcess, MpiRuntime, Waiting,
};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The deadline of a call that should succeed: far beyond any healthy wait, so a hang still ends.
const GENEROUS: Duration = Duration::from_secs(30);

type Outcome = Result<(), String>;

struct Scenario {
    name: &'static str,
    /// The fewest processes the scenario means anything with.
    min_processes: usize,
    /// Only on a communicator made with `Waiting::Deadlines`, or only `Waiting::Blocking`.
    only: Option<Waiting>,
    run: fn(&MpiRuntime, &MpiInterProcess) -> Outcome,
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "all_reduce_matches_the_reference_for_every_type_and_operation",
        min_processes: 1,
        only: None,
        run: all_reduce_matches_the_reference_for_every_type_and_operation,
    },
    Scenario {
        name: "reduce_scatter_returns_this_process_block_of_the_reduction",
        min_processes: 1,
        only: None,
        run: reduce_scatter_returns_this_process_block_of_the_reduction,
    },
    Scenario {
        name: "all_gather_concatenates_the_inputs_in_process_order",
        min_processes: 1,
        only: None,
        run: all_gather_concatenates_the_inputs_in_process_order,
    },
    Scenario {
        name: "broadcast_delivers_the_root_input_from_every_root",
        min_processes: 1,
        only: None,
        run: broadcast_delivers_the_root_input_from_every_root,
    },
    Scenario {
        name: "a_local_failure_on_one_process_reaches_every_process_as_one_text",
        min_processes: 1,
        only: None,
        run: a_local_failure_on_one_process_reaches_every_process_as_one_text,
    },
    Scenario {
        name: "failures_on_several_processes_report_the_lowest",
        min_processes: 2,
        only: None,
        run: failures_on_several_processes_report_the_lowest,
    },
    Scenario {
        name: "an_invalid_argument_is_a_shared_failure",
        min_processes: 2,
        only: None,
        run: an_invalid_argument_is_a_shared_failure,
    },
    Scenario {
        name: "mismatched_operations_across_processes_are_one_shared_error",
        min_processes: 2,
        only: None,
        run: mismatched_operations_across_processes_are_one_shared_error,
    },
    Scenario {
        name: "mismatched_kinds_and_lengths_are_one_shared_error",
        min_processes: 2,
        only: None,
        run: mismatched_kinds_and_lengths_are_one_shared_error,
    },
    Scenario {
        name: "calls_from_a_different_thread_each_generation_stay_in_order",
        min_processes: 1,
        only: None,
        run: calls_from_a_different_thread_each_generation_stay_in_order,
    },
    Scenario {
        name: "a_late_process_within_the_deadline_still_succeeds",
        min_processes: 2,
        only: None,
        run: a_late_process_within_the_deadline_still_succeeds,
    },
    Scenario {
        name: "a_process_that_never_calls_times_out_every_waiting_process",
        min_processes: 2,
        only: None,
        run: a_process_that_never_calls_times_out_every_waiting_process,
    },
    Scenario {
        name: "a_deadline_on_one_process_of_a_blocking_communicator_is_honoured",
        min_processes: 1,
        only: Some(Waiting::Blocking),
        run: a_deadline_on_one_process_of_a_blocking_communicator_is_honoured,
    },
    Scenario {
        name: "communicators_made_with_different_waiting_modes_fail_everywhere",
        min_processes: 2,
        only: Some(Waiting::Deadlines),
        run: communicators_made_with_different_waiting_modes_fail_everywhere,
    },
];

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match MpiRuntime::initialize() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot initialise MPI: {error}");
            return ExitCode::FAILURE;
        }
    };
    let filter = arguments.iter().find(|argument| !argument.starts_with('-'));
    let process = runtime.process();
    let processes = runtime.processes();
    let control = match runtime.communicator(Waiting::Deadlines, Some(Instant::now() + GENEROUS)) {
        Ok(control) => control,
        Err(error) => {
            eprintln!("[process {process}] cannot create the control communicator: {error}");
            return ExitCode::FAILURE;
        }
    };
    if process == 0 {
        println!("running the inter-process scenarios on {processes} processes");
    }
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    let runs = [Waiting::Deadlines, Waiting::Blocking]
        .into_iter()
        .flat_map(|waiting| SCENARIOS.iter().map(move |scenario| (waiting, scenario)))
        .filter(|(waiting, scenario)| scenario.only.is_none_or(|only| only == *waiting));
    for (waiting, scenario) in runs {
        let name = match waiting {
            Waiting::Deadlines => scenario.name.to_owned(),
            Waiting::Blocking => format!("{} [blocking]", scenario.name),
        };
        if filter.is_some_and(|filter| !name.contains(filter.as_str())) {
            continue;
        }
        if processes < scenario.min_processes {
            skipped += 1;
            if process == 0 {
                println!(
                    "test {name} ... skipped: needs {} processes (run mpi/run-tests.sh)",
                    scenario.min_processes
                );
            }
            continue;
        }
        let started = Instant::now();
        let outcome = match runtime.communicator(waiting, Some(Instant::now() + GENEROUS)) {
            Ok(communicator) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                (scenario.run)(&runtime, &communicator)
            }))
            .unwrap_or_else(|_| Err("the scenario panicked".to_owned())),
            Err(error) => Err(format!("cannot create a communicator: {error}")),
        };
        if let Err(reason) = &outcome {
            eprintln!("[process {process}] {name}: {reason}");
        }
        // Agree on the verdict (and wait for everyone) before the next scenario.
        let ok = passed_everywhere(&control, &runtime, process, outcome.is_err(), GENEROUS);
        if ok {
            passed += 1;
        } else {
            failed += 1;
        }
        if process == 0 {
            let verdict = if ok { "ok" } else { "FAILED" };
            println!(
                "test {name} ... {verdict} ({:.2} s)",
                started.elapsed().as_secs_f64()
            );
        }
    }
    if process == 0 {
        let verdict = if failed == 0 { "ok" } else { "FAILED" };
        println!(
            "\ntest result: {verdict}. {passed} passed; {failed} failed; {skipped} skipped ({processes} processes)"
        );
    }
    drop(control);
    drop(runtime);
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The deadline of a call that should succeed: far away, or none on a blocking communicator.
fn patience(comm: &MpiInterProcess) -> Option<Instant> {
    match comm.waiting() {
        Waiting::Deadlines => Some(Instant::now() + GENEROUS),
        Waiting::Blocking => None,
    }
}

fn ensure(condition: bool, message: impl FnOnce() -> String) -> Outcome {
    if condition { Ok(()) } else { Err(message()) }
}

// ---- inputs and references ------------------------------------------------------------------

fn first_difference(actual: &HostValues, expected: &HostValues) -> String {
    let show = |buffer: &HostValues| {
        let text = format!("{buffer:?}");
        text.chars().take(200).collect::<String>()
    };
    format!("got {} expected {}", show(actual), show(expected))
}

// ---- results against a reference -----------------------------------------------------------

fn all_reduce_matches_the_reference_for_every_type_and_operation(
    _: &MpiRuntime,
    comm: &MpiInterProcess,
) -> Outcome {
    let (process, processes) = (comm.process(), comm.processes());
    for element in ElementType::ALL {
        for operation in ReduceOperation::ALL {
            // Up to 64 bytes travel in the status packet (without deadlines); one element more
            // and 1000 elements need the collective of their own.
            let slot = 64 / element.size();
            let mut lengths = vec![0, 1, slot, slot + 1, 1000];
            if operation == ReduceOperation::Sum
                && matches!(element, ElementType::F32 | ElementType::F16)
            {
                // Large enough for MPI's segmented, pipelined algorithms (the user operation then
                // sees pieces of the buffer).
                lengths.push(300_000);
            }
            for len in lengths {
                // Without a deadline (small all-reduces ride in the status packet), with one
                // everywhere, and with one on process 0 only (the packet is then ignored).
                for (timing, deadline) in [
                    ("no deadline", None),
                    ("deadlines", patience(comm)),
                    (
                        "a deadline on process 0",
                        patience(comm).filter(|_| process == 0),
                    ),
                ] {
                    let what = format!("{element} {operation} x {len}, {timing}");
                    let output = comm
                        .all_reduce(
                            Ok(input(process, len, element, operation)),
                            operation,
                            deadline,
                        )
                        .map_err(|error| format!("{what}: {error}"))?;
                    let expected = reference(processes, len, element, operation);
                    ensure(same_bits(&output, &expected), || {
                        format!("{what}: {}", first_difference(&output, &expected))
                    })?;
                }
            }
        }
    }
    Ok(())
}

fn reduce_scatter_returns_this_process_block_of_the_reduction(
    _: &MpiRuntime,
    comm: &MpiInterProcess,
) -> Outcome {
    let (process, processes) = (comm.process(), comm.processes());
    for element in [ElementType::F32, ElementType::BF16, ElementType::I64] {
        for operation in ReduceOperation::ALL {
            for block in [0, 1, 5, 4096] {
                let len = block * processes;
                let output = comm
                    .reduce_scatter(
                        Ok(input(process, len, element, operation)),
                        operation,
                        patience(comm),
                    )
                    .map_err(|error| format!("{element} {operation} x {len}: {error}"))?;
                let whole = reference(processes, len, element, operation);
                let expected = whole
                    .slice(process * block..(process + 1) * block)
                    .ok_or("reference block out of range")?;
                ensure(same_bits(&output, &expected), || {
                    format!(
                        "{element} {operation} x {len}: {}",
                        first_difference(&output, &expected)
                    )
                })?;
            }
        }
    }
    Ok(())
}

fn all_gather_concatenates_the_inputs_in_process_order(
    _: &MpiRuntime,
    comm: &MpiInterProcess,
) -> Outcome {
    let (process, processes) = (comm.process(), comm.processes());
    for element in ElementType::ALL {
        for block in [0, 1, 9, 10_000] {
            let operation = ReduceOperation::Sum;
            let output = comm
                .all_gather(
                    Ok(input(process, block, element, operation)),
                    patience(comm),
                )
                .map_err(|error| format!("{element} x {block}: {error}"))?;
            let values: Vec<f64> = (0..processes)
                .flat_map(|p| (0..block).map(move |i| value(p, i, element, operation)))
                .collect();
            let expected = buffer(element, &values);
            ensure(same_bits(&output, &expected), || {
                format!(
                    "{element} x {block}: {}",
                    first_difference(&output, &expected)
                )
            })?;
        }
    }
    Ok(())
}

fn broadcast_delivers_the_root_input_from_every_root(
    _: &MpiRuntime,
    comm: &MpiInterProcess,
) -> Outcome {
    let (process, processes) = (comm.process(), comm.processes());
    for root in 0..processes {
        for element in [ElementType::F64, ElementType::F16, ElementType::I32] {
            let len = 1 + 31 * root;
            let operation = ReduceOperation::Min;
            let output = comm
                .broadcast(
                    Ok(input(process, len, element, operation)),
                    root,
                    patience(comm),
                )
                .map_err(|error| format!("root {root} {element}: {error}"))?;
            let expected = input(root, len, element, operation);
            ensure(same_bits(&output, &expected), || {
                format!(
                    "root {root} {element}: {}",
                    first_difference(&output, &expected)
                )
            })?;
        }
    }
    Ok(())
}

// ---- agreement: failures and mismatches -----------------------------------------------------

/// What a process's device reports in these tests.
fn injected(process: usize) -> LocalFailure {
    LocalFailure::new(format!(
        "device error in exchange step 2 on rank 1 of process {process}: injected"
    ))
}

/// Checks every process got `expected`'s text, then that the next generation works.
fn expect_shared(
    comm: &MpiInterProcess,
    what: &str,
    result: Result<HostValues, InterProcessError>,
    expected: &InterProcessError,
) -> Outcome {
    match result {
        Err(error) if error.to_string() == expected.to_string() => {}
        Err(error) => return Err(format!("{what}: got `{error}`, expected `{expected}`")),
        Ok(_) => return Err(format!("{what}: succeeded, expected `{expected}`")),
    }
    the_next_generation_works(comm, what)
}

fn the_next_generation_works(comm: &MpiInterProcess, after: &str) -> Outcome {
    let (process, processes) = (comm.process(), comm.processes());
    let output = comm
        .all_reduce(
            Ok(input(process, 3, ElementType::F32, ReduceOperation::Sum)),
            ReduceOperation::Sum,
            patience(comm),
        )
        .map_err(|error| format!("the generation after {after} failed: {error}"))?;
    let expected = reference(processes, 3, ElementType::F32, ReduceOperation::Sum);
    ensure(same_bits(&output, &expected), || {
        format!(
            "the generation after {after}: {}",
            first_difference(&output, &expected)
        )
    })
}

fn a_local_failure_on_one_process_reaches_every_process_as_one_text(
    _: &MpiRuntime,
    comm: &MpiInterProcess,
) -> Outcome {
    let (process, processes) = (comm.process(), comm.processes());
    for failing in 0..processes {
        for (index, kind) in CollectiveKind::ALL.into_iter().enumerate() {
            // Half the cases without a deadline: failures agree on both paths.
            let deadline = if index % 2 == 0 { None } else { patience(comm) };
            let local = if process == failing {
                Err(injected(process))
            } else {
                Ok(input(
                    process,
                    2 * processes,
                    ElementType::F32,
                    ReduceOperation::Sum,
                ))
            };
            let result = match kind {
                CollectiveKind::AllReduce => comm.all_reduce(local, ReduceOperation::Sum, deadline),
                CollectiveKind::ReduceScatter => {
                    comm.reduce_scatter(local, ReduceOperation::Max, deadline)
                }
                CollectiveKind::AllGather => comm.all_gather(local, deadline),
                CollectiveKind::Broadcast => comm.broadcast(local, processes - 1, deadline),
            };
            let expected = InterProcessError::Failed {
                process: failing,
                message: injected(failing).to_string(),
            };
            expect_shared(
                comm,
                &format!("{kind} failing on process {failing}"),
                result,
                &expected,
            )?;
        }
    }
    Ok(())
}

fn failures_on_several_processes_report_the_lowest(
    _: &MpiRuntime,
    comm: &MpiInterProcess,
) -> Outcome {
    let (process, processes) = (comm.process(), comm.processes());
    // Every process but 0 fails: process 1 is the lowest.
    let local = if process >= 1 {
        Err(injected(process))
    } else {
        Ok(input(process, 4, ElementType::I32, ReduceOperation::Sum))
    };
    let result = comm.all_reduce(local, ReduceOperation::Sum, patience(comm));
    let expected = InterProcessError::Failed {
        process: 1,
        message: injected(1).to_string(),
    };
    expect_shared(
        comm,
        &format!("failures on processes 1..{processes}"),
        result,
        &expected,
    )
}

fn an_invalid_argument_is_a_shared_failure(_: &MpiRuntime, comm: &MpiInterProcess) -> Outcome {
    let (process, processes) = (comm.process(), comm.processes());
    // Only the last process asks for a root outside the job (the others for a valid one): the
    // last process fails locally, and the rest learn its reason.
    let root = if process + 1 == processes {
        processes
    } else {
        0
    };
    let result = comm.broadcast(
        Ok(input(process, 4, ElementType::F32, ReduceOperation::Sum)),
        root,
        patience(comm),
    );
    let expected = InterProcessError::Failed {
        process: processes - 1,
        message: format!("broadcast root {processes} is outside the {processes} processes"),
    };
    expect_shared(
        comm,
        "an invalid root on the last process",
        result,
        &expected,
    )?;
    // A reduce-scatter length that does not split (everywhere): process 0 reports it.
    let len = processes + 1;
    let result = comm.reduce_scatter(
        Ok(input(process, len, ElementType::F64, ReduceOperation::Sum)),
        ReduceOperation::Sum,
        patience(comm),
    );
    let expected = InterProcessError::Failed {
        process: 0,
        message: format!(
            "reduce_scatter input of {len} elements does not split into {processes} equal blocks"
        ),
    };
    expect_shared(
        comm,
        "a reduce-scatter length that does not split",
        result,
        &expected,
    )
}

fn mismatched_operations_across_processes_are_one_shared_error(
    _: &MpiRuntime,
    comm: &MpiInterProcess,
) -> Outcome {
    let (process, processes) = (comm.process(), comm.processes());
    let operation_of = |p: usize| {
        if p == 0 {
            ReduceOperation::Sum
        } else {
            ReduceOperation::Max
        }
    };
    let generation = comm.generation();
    // 8 elements, no deadline: the data rides in the status packet, which must not reduce it.
    let result = comm.all_reduce(
        Ok(input(process, 8, ElementType::F32, ReduceOperation::Sum)),
        operation_of(process),
        None,
    );
    let expected = InterProcessError::Mismatch {
        calls: (0..processes)
            .map(|p| CallDescription {
                generation,
                kind: CollectiveKind::AllReduce,
                operation: Some(operation_of(p)),
                element: Some(ElementType::F32),
                len: 8,
                root: None,
                tag: 0,
            })
            .collect(),
    };
    expect_shared(comm, "sum on process 0, max elsewhere", result, &expected)
}

fn mismatched_kinds_and_lengths_are_one_shared_error(
    _: &MpiRuntime,
    comm: &MpiInterProcess,
) -> Outcome {
    let (process, processes) = (comm.process(), comm.processes());
    let last = processes - 1;
    let generation = comm.generation();
    // The last process broadcasts 5 i64 from root 0; the others all-reduce 4 f32.
    let result = if process == last {
        comm.broadcast(
            Ok(input(process, 5, ElementType::I64, ReduceOperation::Sum)),
            0,
            patience(comm),
        )
    } else {
        comm.all_reduce(
            Ok(input(process, 4, ElementType::F32, ReduceOperation::Sum)),
            ReduceOperation::Sum,
            patience(comm),
        )
    };
    let call = |p: usize| {
        if p == last {
            CallDescription {
                generation,
                kind: CollectiveKind::Broadcast,
                operation: None,
                element: Some(ElementType::I64),
                len: 5,
                root: Some(0),
                tag: 0,
            }
        } else {
            CallDescription {
                generation,
                kind: CollectiveKind::AllReduce,
                operation: Some(ReduceOperation::Sum),
                element: Some(ElementType::F32),
                len: 4,
                root: None,
                tag: 0,
            }
        }
    };
    let expected = InterProcessError::Mismatch {
        calls: (0..processes).map(call).collect(),
    };
    expect_shared(
        comm,
        "broadcast on the last process, all-reduce elsewhere",
        result,
        &expected,
    )
}

// ---- threads and deadlines ------------------------------------------------------------------

fn calls_from_a_different_thread_each_generation_stay_in_order(
    _: &MpiRuntime,
    comm: &MpiInterProcess,
) -> Outcome {
    let (process, processes) = (comm.process(), comm.processes());
    for generation in 0..20 {
        let len = 1 + generation;
        let output = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    comm.all_reduce(
                        Ok(input(process, len, ElementType::I64, ReduceOperation::Sum)),
                        ReduceOperation::Sum,
                        patience(comm),
                    )
                })
                .join()
        })
        .map_err(|_| "the calling thread panicked".to_owned())?
        .map_err(|error| format!("generation {generation}: {error}"))?;
        let expected = reference(processes, len, ElementType::I64, ReduceOperation::Sum);
        ensure(output == expected, || {
            format!(
                "generation {generation}: {}",
                first_difference(&output, &expected)
            )
        })?;
    }
    Ok(())
}

fn a_late_process_within_the_deadline_still_succeeds(
    _: &MpiRuntime,
    comm: &MpiInterProcess,
) -> Outcome {
    let (process, processes) = (comm.process(), comm.processes());
    if process + 1 == processes {
        std::thread::sleep(Duration::from_millis(300));
    }
    let deadline = patience(comm).map(|_| Instant::now() + Duration::from_secs(10));
    let output = comm
        .all_reduce(
            Ok(input(process, 16, ElementType::F64, ReduceOperation::Max)),
            ReduceOperation::Max,
            deadline,
        )
        .map_err(|error| format!("a late but timely process: {error}"))?;
    let expected = reference(processes, 16, ElementType::F64, ReduceOperation::Max);
    ensure(same_bits(&output, &expected), || {
        first_difference(&output, &expected)
    })
}

fn a_process_that_never_calls_times_out_every_waiting_process(
    _: &MpiRuntime,
    comm: &MpiInterProcess,
) -> Outcome {
    let (process, processes) = (comm.process(), comm.processes());
    let timeout = Duration::from_millis(300);
    let generation = comm.generation();
    let expected = InterProcessError::TimedOut { generation };
    let straggler = processes - 1;
    if process == straggler {
        // Never calls in time: arrives after every other process gave up, with a deadline of
        // its own. It completes the status (the others posted theirs) and then waits for a
        // collective nobody else will post.
        std::thread::sleep(timeout * 3);
    }
    let started = Instant::now();
    let result = comm.all_reduce(
        Ok(input(process, 4, ElementType::F32, ReduceOperation::Sum)),
        ReduceOperation::Sum,
        Some(Instant::now() + timeout),
    );
    let waited = started.elapsed();
    match result {
        Err(error) if error == expected => {}
        Err(error) => return Err(format!("got `{error}`, expected `{expected}`")),
        Ok(_) => return Err(format!("succeeded, expected `{expected}`")),
    }
    ensure(waited < timeout + Duration::from_secs(2), || {
        format!("returned {waited:?} after a deadline of {timeout:?}")
    })?;
    // Sticky: the next call fails at once with the same error, without waiting.
    let started = Instant::now();
    let again = comm.all_reduce(
        Ok(input(process, 4, ElementType::F32, ReduceOperation::Sum)),
        ReduceOperation::Sum,
        patience(comm),
    );
    ensure(again.as_ref().err() == Some(&expected), || {
        format!("the call after the timeout returned {again:?}, expected `{expected}`")
    })?;
    ensure(started.elapsed() < Duration::from_millis(100), || {
        format!("the call after the timeout took {:?}", started.elapsed())
    })?;
    ensure(comm.poisoned() == Some(expected.clone()), || {
        "not poisoned".to_owned()
    })
}

fn a_deadline_on_one_process_of_a_blocking_communicator_is_honoured(
    _: &MpiRuntime,
    comm: &MpiInterProcess,
) -> Outcome {
    let (process, processes) = (comm.process(), comm.processes());
    // Process 0 passes a deadline, the others none: the generation runs non-blocking everywhere
    // (small, in the packet's slot, and large), with the right result.
    for len in [2, 1000] {
        let deadline = (process == 0).then(|| Instant::now() + GENEROUS);
        let output = comm
            .all_reduce(
                Ok(input(process, len, ElementType::F64, ReduceOperation::Sum)),
                ReduceOperation::Sum,
                deadline,
            )
            .map_err(|error| format!("{len} elements, a deadline on process 0: {error}"))?;
        let expected = reference(processes, len, ElementType::F64, ReduceOperation::Sum);
        ensure(same_bits(&output, &expected), || {
            first_difference(&output, &expected)
        })?;
    }
    the_next_generation_works(comm, "a deadline on process 0")
}

fn communicators_made_with_different_waiting_modes_fail_everywhere(
    runtime: &MpiRuntime,
    _: &MpiInterProcess,
) -> Outcome {
    let waiting = if runtime.process() == 0 {
        Waiting::Blocking
    } else {
        Waiting::Deadlines
    };
    match runtime.communicator(waiting, Some(Instant::now() + GENEROUS)) {
        Err(InterProcessError::WaitingMismatch { .. }) => Ok(()),
        Err(error) => Err(format!("got `{error}`, expected a waiting-mode mismatch")),
        Ok(_) => Err("a communicator of mixed waiting modes was created".to_owned()),
    }
}
