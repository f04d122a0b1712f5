//! The hierarchical communicator across processes: one binary that every process of an `mpirun`
//! job runs (no libtest harness: its threads would post collectives in a different order on each
//! process), each process driving its own local ranks (threads, simulated devices) — **uneven**
//! counts: 2 + 1 ranks under `-np 2`, 1 + 2 + 1 under `-np 3` (2 under plain `cargo test`, one
//! process). The results scenarios also run on a uniform layout (2 ranks everywhere), which takes
//! the one-engine-call-per-shard route.
//!
//! `mpi/run-tests.sh` runs it under `mpirun -np 2` and `-np 3`. Each scenario makes its own
//! communicators; a control communicator then agrees on whether it passed everywhere, and
//! process 0 prints one line per scenario. Every wait has a deadline.
//!
//! Arguments: a scenario name (or part of one) runs only the matching scenarios; `--die` runs the
//! process-death check instead (process 1 aborts while every other rank waits in a hierarchical
//! all-reduce; `run-tests.sh` checks that `mpirun` ends the job promptly, and, under
//! `mpirun --enable-recovery` with `--timeout S` (and `--blocking` for the blocking engine), that
//! every survivor returns the same error within `S` + 1 s and exits non-zero).

mod common;
use common::{buffer, input, passed_everywhere, reference, same_bits, value};
use ruccl_core::{Algorithm, Collective, CollectiveOptions, DeviceId, ElementType};
use ruccl_core::{LinkModel, NativeCollectiveDevice, ReduceOperation, TensorInfo};
use ruccl_mpi::{
    HierarchicalCommunicator, HierarchicalError, HierarchicalOptions, HostValues, MpiInterProcess,
    MpiRuntime, ProcessCall, StagingDevice, Waiting,
};
use ruccl_sim::fault::{GenerationCalls, Outcome as Predicted, every_site};
use ruccl_sim::{FaultPlan, FaultyDevice, FaultyTensor, SimDevice, SimTensor};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The deadline of a call that should succeed: far beyond any healthy wait, so a hang still ends.
const GENEROUS: Duration = Duration::from_secs(30);

type Outcome = Result<(), String>;
type Inter = Arc<MpiInterProcess>;
type Hierarchical<D> = HierarchicalCommunicator<D, Inter>;

/// What every scenario gets.
struct Env {
    runtime: MpiRuntime,
    /// A communicator of `Waiting::Deadlines`, shared by the scenarios that cannot poison it.
    inter: Inter,
    /// A communicator of `Waiting::Blocking`.
    blocking: Inter,
    process: usize,
    processes: usize,
}

impl Env {
    /// Local ranks per process: uneven (2 + 1, 1 + 2 + 1, …), or 2 everywhere.
    fn counts(&self, uniform: bool) -> Vec<usize> {
        (0..self.processes)
            .map(|process| match (uniform, self.processes) {
                (true, _) | (false, 1) => 2,
                (false, 2) => [2, 1][process],
                (false, _) => 1 + process % 2,
            })
            .collect()
    }

    fn communicator<D: StagingDevice<HostValues>>(
        &self,
        device: D,
        inter: &Inter,
        uniform: bool,
    ) -> Result<Hierarchical<D>, String> {
        self.communicator_with(device, inter, uniform, HierarchicalOptions::default())
    }

    /// A communicator whose reductions all take the shard route (threshold 0).
    fn on_shards<D: StagingDevice<HostValues>>(
        &self,
        device: D,
        inter: &Inter,
        uniform: bool,
    ) -> Result<Hierarchical<D>, String> {
        let options = HierarchicalOptions::default().with_shards_from(0);
        self.communicator_with(device, inter, uniform, options)
    }

    fn communicator_with<D: StagingDevice<HostValues>>(
        &self,
        device: D,
        inter: &Inter,
        uniform: bool,
        options: HierarchicalOptions,
    ) -> Result<Hierarchical<D>, String> {
        let local = self.counts(uniform)[self.process];
        // A blocking engine refuses deadlines.
        let deadline = match inter.waiting() {
            Waiting::Deadlines => Some(Instant::now() + GENEROUS),
            Waiting::Blocking => None,
        };
        let inter = Arc::clone(inter);
        HierarchicalCommunicator::with_options(devices(local), device, inter, options, deadline)
            .map_err(|error| error.to_string())
    }

    /// A fresh `Waiting::Deadlines` communicator, for a scenario that poisons its own.
    fn fresh(&self) -> Result<Inter, String> {
        self.runtime
            .communicator(Waiting::Deadlines, Some(Instant::now() + GENEROUS))
            .map(Arc::new)
            .map_err(|error| format!("cannot create an MPI communicator: {error}"))
    }
}

struct Scenario {
    name: &'static str,
    /// The fewest processes the scenario means anything with.
    min_processes: usize,
    run: fn(&Env) -> Outcome,
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "all_reduce_matches_the_reference_for_every_type_and_operation",
        min_processes: 1,
        run: all_reduce_matches_the_reference_for_every_type_and_operation,
    },
    Scenario {
        name: "large_reductions_take_the_shard_route",
        min_processes: 1,
        run: large_reductions_take_the_shard_route,
    },
    Scenario {
        name: "reduce_scatter_gives_each_global_rank_its_block",
        min_processes: 1,
        run: reduce_scatter_gives_each_global_rank_its_block,
    },
    Scenario {
        name: "all_gather_concatenates_the_inputs_in_global_rank_order",
        min_processes: 1,
        run: all_gather_concatenates_the_inputs_in_global_rank_order,
    },
    Scenario {
        name: "broadcast_delivers_the_input_of_every_global_root",
        min_processes: 1,
        run: broadcast_delivers_the_input_of_every_global_root,
    },
    Scenario {
        name: "every_collective_works_on_a_blocking_engine",
        min_processes: 1,
        run: every_collective_works_on_a_blocking_engine,
    },
    Scenario {
        name: "every_fault_site_on_one_rank_of_one_process_reaches_every_rank_as_one_text",
        min_processes: 1,
        run: every_fault_site_on_one_rank_of_one_process_reaches_every_rank_as_one_text,
    },
    Scenario {
        name: "a_fault_reaches_every_rank_through_a_blocking_engine",
        min_processes: 1,
        run: a_fault_reaches_every_rank_through_a_blocking_engine,
    },
    Scenario {
        name: "mismatched_calls_across_processes_are_one_shared_error",
        min_processes: 2,
        run: mismatched_calls_across_processes_are_one_shared_error,
    },
    Scenario {
        name: "a_local_mismatch_is_one_failure_everywhere",
        min_processes: 1,
        run: a_local_mismatch_is_one_failure_everywhere,
    },
    Scenario {
        name: "arguments_the_job_cannot_honour_are_one_shared_failure",
        min_processes: 1,
        run: arguments_the_job_cannot_honour_are_one_shared_failure,
    },
    Scenario {
        name: "different_options_across_processes_fail_the_creation_everywhere",
        min_processes: 2,
        run: different_options_across_processes_fail_the_creation_everywhere,
    },
    Scenario {
        name: "an_abort_on_one_process_fails_every_rank_of_every_process",
        min_processes: 1,
        run: an_abort_on_one_process_fails_every_rank_of_every_process,
    },
    Scenario {
        name: "a_process_that_never_calls_times_out_every_rank_of_every_process",
        min_processes: 2,
        run: a_process_that_never_calls_times_out_every_rank_of_every_process,
    },
    Scenario {
        name: "a_local_rank_that_never_calls_times_out_every_rank_of_every_process",
        min_processes: 1,
        run: a_local_rank_that_never_calls_times_out_every_rank_of_every_process,
    },
];

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    quiet_injected_panics();
    let runtime = match MpiRuntime::initialize() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot initialise MPI: {error}");
            return ExitCode::FAILURE;
        }
    };
    let (process, processes) = (runtime.process(), runtime.processes());
    let setup = Some(Instant::now() + GENEROUS);
    let communicators = runtime
        .communicator(Waiting::Deadlines, setup)
        .and_then(|control| Ok((control, runtime.communicator(Waiting::Deadlines, setup)?)))
        .and_then(|(control, inter)| {
            Ok((
                control,
                inter,
                runtime.communicator(Waiting::Blocking, setup)?,
            ))
        });
    let (control, inter, blocking) = match communicators {
        Ok(communicators) => communicators,
        Err(error) => {
            eprintln!("[process {process}] cannot create the MPI communicators: {error}");
            return ExitCode::FAILURE;
        }
    };
    let env = Env {
        runtime,
        inter: Arc::new(inter),
        blocking: Arc::new(blocking),
        process,
        processes,
    };
    if arguments.iter().any(|argument| argument == "--die") {
        return process_death(&env, &arguments);
    }
    let filter = arguments.iter().find(|argument| !argument.starts_with('-'));
    if process == 0 {
        println!(
            "running the hierarchical scenarios on {processes} processes, local ranks {:?}",
            env.counts(false)
        );
    }
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for scenario in SCENARIOS {
        if filter.is_some_and(|filter| !scenario.name.contains(filter.as_str())) {
            continue;
        }
        if processes < scenario.min_processes {
            skipped += 1;
            if process == 0 {
                println!(
                    "test {} ... skipped: needs {} processes (run mpi/run-tests.sh)",
                    scenario.name, scenario.min_processes
                );
            }
            continue;
        }
        let started = Instant::now();
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (scenario.run)(&env)))
                .unwrap_or_else(|_| Err("the scenario panicked".to_owned()));
        if let Err(reason) = &outcome {
            eprintln!("[process {process}] {}: {reason}", scenario.name);
        }
        // Agree on the verdict (and wait for everyone) before the next scenario.
        let ok = passed_everywhere(&control, &env.runtime, process, outcome.is_err(), GENEROUS);
        if ok {
            passed += 1;
        } else {
            failed += 1;
        }
        if process == 0 {
            let verdict = if ok { "ok" } else { "FAILED" };
            let seconds = started.elapsed().as_secs_f64();
            println!("test {} ... {verdict} ({seconds:.2} s)", scenario.name);
        }
    }
    if process == 0 {
        let verdict = if failed == 0 { "ok" } else { "FAILED" };
        println!(
            "\ntest result: {verdict}. {passed} passed; {failed} failed; {skipped} skipped ({processes} processes)"
        );
    }
    drop(env);
    drop(control);
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Injected panics are expected by the hundred: their messages would bury the report.
fn quiet_injected_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let text = payload
            .downcast_ref::<&str>()
            .map(|text| (*text).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        if !text.starts_with("injected panic") {
            default(info);
        }
    }));
}

fn ensure(condition: bool, message: impl FnOnce() -> String) -> Outcome {
    if condition { Ok(()) } else { Err(message()) }
}

fn devices(ranks: usize) -> Vec<DeviceId> {
    (0..ranks as u32).map(DeviceId::new).collect()
}

/// Runs `call` on every local rank of `communicator`'s process, each on its own thread.
fn on_every_rank<T: Send>(ranks: usize, call: impl Fn(usize) -> T + Sync) -> Vec<T> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..ranks)
            .map(|rank| {
                let call = &call;
                scope.spawn(move || call(rank))
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle.join().unwrap_or_else(|_| {
                    std::panic::resume_unwind(Box::new("a rank thread panicked"))
                })
            })
            .collect()
    })
}

// ---- inputs and references ------------------------------------------------------------------

fn tensor(
    rank: usize,
    global: usize,
    len: usize,
    element: ElementType,
    operation: ReduceOperation,
) -> SimTensor {
    SimTensor::new(
        devices(rank + 1)[rank],
        input(global, len, element, operation),
    )
}

fn show(buffer: &HostValues) -> String {
    format!("{buffer:?}").chars().take(200).collect()
}

fn sim_values(tensor: &SimTensor) -> Option<HostValues> {
    Some(tensor.values().clone())
}

/// Every local rank of `communicator` runs `collective` on its global rank's input; each rank's
/// output must be `expected(global rank)`.
fn check_sim(
    communicator: &Hierarchical<SimDevice>,
    collective: Collective,
    len: usize,
    element: ElementType,
    timeout: Option<Duration>,
    expected: impl Fn(usize) -> HostValues + Sync,
) -> Outcome {
    let operation = collective.operation().unwrap_or(ReduceOperation::Min);
    let mut options = CollectiveOptions::default();
    if let Some(timeout) = timeout {
        options = options.with_timeout(timeout);
    }
    let results = on_every_rank(communicator.local_ranks(), |rank| {
        let global = communicator.global_rank(rank).unwrap_or(usize::MAX);
        let sim = tensor(rank, global, len, element, operation);
        let output = communicator
            .collective(rank, sim, collective, options)
            .map_err(|error| error.to_string())?;
        let got = sim_values(&output).ok_or("an output without values")?;
        let want = expected(global);
        ensure(same_bits(&got, &want), || {
            format!(
                "global rank {global}: got {} expected {}",
                show(&got),
                show(&want)
            )
        })
    });
    let what = format!("{collective} of {len} × {element}, timeout {timeout:?}");
    results
        .into_iter()
        .collect::<Result<Vec<()>, String>>()
        .map(|_| ())
        .map_err(|error| format!("{what}: {error}"))
}

// ---- results against a reference -----------------------------------------------------------

fn all_reduce_matches_the_reference_for_every_type_and_operation(env: &Env) -> Outcome {
    // Both routes: small reductions take the whole route by default; with threshold 0 every
    // length the local rank count divides takes the shard route (glued between processes on
    // the uneven layout, one engine call per shard on the uniform one).
    for (uniform, shards) in [(false, false), (false, true), (true, true)] {
        let communicator = if shards {
            env.on_shards(SimDevice::new(), &env.inter, uniform)?
        } else {
            env.communicator(SimDevice::new(), &env.inter, uniform)?
        };
        let world = communicator.world_size();
        for element in ElementType::ALL {
            for operation in ReduceOperation::ALL {
                // Small lengths take the whole route (a local all-reduce), 1, 3 and 1001 also
                // because two ranks do not divide them; 64 bytes ride in MPI's status packet.
                let lengths: &[usize] = if uniform {
                    &[1, 12, 1000]
                } else {
                    &[0, 1, 3, 64 / element.size(), 1000, 1001]
                };
                for &len in lengths {
                    for timeout in [None, Some(GENEROUS)] {
                        let collective = Collective::AllReduce(operation);
                        let expected = reference(world, len, element, operation);
                        check_sim(&communicator, collective, len, element, timeout, |_| {
                            expected.clone()
                        })?;
                    }
                }
            }
        }
    }
    Ok(())
}

fn large_reductions_take_the_shard_route(env: &Env) -> Outcome {
    // From the default threshold (8 MiB) a reduction takes the shard route by itself.
    let len = 1 << 21;
    for uniform in [false, true] {
        let communicator = env.communicator(SimDevice::new(), &env.inter, uniform)?;
        let world = communicator.world_size();
        let expected = reference(world, len, ElementType::F32, ReduceOperation::Sum);
        let collective = Collective::AllReduce(ReduceOperation::Sum);
        check_sim(
            &communicator,
            collective,
            len,
            ElementType::F32,
            None,
            |_| expected.clone(),
        )?;
    }
    Ok(())
}

fn reduce_scatter_gives_each_global_rank_its_block(env: &Env) -> Outcome {
    for (uniform, shards) in [(false, false), (false, true), (true, true)] {
        let communicator = if shards {
            env.on_shards(SimDevice::new(), &env.inter, uniform)?
        } else {
            env.communicator(SimDevice::new(), &env.inter, uniform)?
        };
        let world = communicator.world_size();
        for element in [ElementType::F32, ElementType::BF16, ElementType::I64] {
            for operation in ReduceOperation::ALL {
                // Odd blocks make W·block odd: a local all-reduce where two ranks share a process.
                for block in [0, 1, 5, 64] {
                    let len = world * block;
                    let whole = reference(world, len, element, operation);
                    let collective = Collective::ReduceScatter(operation);
                    check_sim(
                        &communicator,
                        collective,
                        len,
                        element,
                        Some(GENEROUS),
                        |rank| {
                            let start = rank * block;
                            whole
                                .slice(start..start + block)
                                .unwrap_or_else(|| whole.zeros_like(0))
                        },
                    )?;
                }
            }
        }
    }
    Ok(())
}

fn all_gather_concatenates_the_inputs_in_global_rank_order(env: &Env) -> Outcome {
    for uniform in [false, true] {
        let communicator = env.communicator(SimDevice::new(), &env.inter, uniform)?;
        let world = communicator.world_size();
        for element in ElementType::ALL {
            for block in [0, 1, 9, 1000] {
                let operation = ReduceOperation::Min;
                let values: Vec<f64> = (0..world)
                    .flat_map(|rank| (0..block).map(move |i| value(rank, i, element, operation)))
                    .collect();
                let expected = buffer(element, &values);
                check_sim(
                    &communicator,
                    Collective::AllGather,
                    block,
                    element,
                    None,
                    |_| expected.clone(),
                )?;
            }
        }
    }
    Ok(())
}

fn broadcast_delivers_the_input_of_every_global_root(env: &Env) -> Outcome {
    for uniform in [false, true] {
        let communicator = env.communicator(SimDevice::new(), &env.inter, uniform)?;
        for root in 0..communicator.world_size() {
            for element in [ElementType::F64, ElementType::F16, ElementType::I32] {
                let len = 1 + 31 * root;
                let expected = input(root, len, element, ReduceOperation::Min);
                let collective = Collective::Broadcast { root };
                check_sim(
                    &communicator,
                    collective,
                    len,
                    element,
                    Some(GENEROUS),
                    |_| expected.clone(),
                )?;
            }
        }
    }
    Ok(())
}

fn every_collective_works_on_a_blocking_engine(env: &Env) -> Outcome {
    let communicator = env.communicator(SimDevice::new(), &env.blocking, false)?;
    let world = communicator.world_size();
    for (element, operation) in [
        (ElementType::F32, ReduceOperation::Sum),
        (ElementType::I64, ReduceOperation::Mean),
    ] {
        for len in [1, 6, 1001] {
            let expected = reference(world, len, element, operation);
            let collective = Collective::AllReduce(operation);
            check_sim(&communicator, collective, len, element, None, |_| {
                expected.clone()
            })?;
        }
        let block = 3;
        let whole = reference(world, world * block, element, operation);
        let collective = Collective::ReduceScatter(operation);
        check_sim(
            &communicator,
            collective,
            world * block,
            element,
            None,
            |rank| {
                whole
                    .slice(rank * block..(rank + 1) * block)
                    .unwrap_or_else(|| whole.zeros_like(0))
            },
        )?;
    }
    let values: Vec<f64> = (0..world)
        .flat_map(|rank| {
            (0..4).map(move |i| value(rank, i, ElementType::F16, ReduceOperation::Min))
        })
        .collect();
    let gathered = buffer(ElementType::F16, &values);
    check_sim(
        &communicator,
        Collective::AllGather,
        4,
        ElementType::F16,
        None,
        |_| gathered.clone(),
    )?;
    let root = world - 1;
    let rooted = input(root, 7, ElementType::F64, ReduceOperation::Min);
    let collective = Collective::Broadcast { root };
    check_sim(&communicator, collective, 7, ElementType::F64, None, |_| {
        rooted.clone()
    })
}

// ---- agreement: faults, mismatches, aborts --------------------------------------------------

/// What every rank must receive when `plan` runs on `failing`'s `ranks` local ranks in local
/// generation `generation` (0: the reduce-scatter of phase 1, 1: the all-gather of phase 2) of an
/// i64 sum all-reduce of `len` elements: `None` when the generation delivers (with
/// `armed[r]` set where rank `r`'s output panics when dropped), else the text.
fn predicted_text(
    plan: &FaultPlan,
    failing: usize,
    ranks: usize,
    generation: u64,
    len: usize,
) -> Result<Vec<bool>, String> {
    let model: LinkModel = SimDevice::new().link_model();
    let (collective, phase_len) = phase(generation, ranks, len);
    let requests = vec![(collective, Algorithm::Auto); ranks];
    let inputs = vec![
        TensorInfo {
            len: phase_len,
            element: ElementType::I64,
        };
        ranks
    ];
    let calls = GenerationCalls::new(generation, &requests, &inputs, model);
    match plan.predict(&calls) {
        Predicted::Failed(error) => Err(format!("process {failing} failed: {error}")),
        // An armed reduce-scatter output panics as the hierarchical communicator stages it out:
        // a failure of that rank, shared.
        Predicted::Delivered { armed } if generation == 0 && armed.contains(&true) => {
            let rank = armed.iter().position(|armed| *armed).unwrap_or(0);
            Err(format!(
                "process {failing} failed: rank {rank}: staging its local result out panicked: \
                 injected panic in drop of an output on rank {rank} in generation 0"
            ))
        }
        // An armed all-gather output is the caller's: delivered, armed.
        Predicted::Delivered { armed } => Ok(armed),
    }
}

/// The local collective and input length of local generation `generation` of a hierarchical
/// all-reduce of `len` elements (divisible by `ranks`).
fn phase(generation: u64, ranks: usize, len: usize) -> (Collective, usize) {
    if generation == 0 {
        (Collective::ReduceScatter(ReduceOperation::Sum), len)
    } else {
        (Collective::AllGather, len / ranks)
    }
}

/// One i64 sum all-reduce of `len` on a faulty device: every rank's output (disarmed, with
/// whether it was armed) or error text.
fn faulty_round(
    communicator: &Hierarchical<FaultyDevice<SimDevice>>,
    len: usize,
) -> Vec<Result<(HostValues, bool), String>> {
    on_every_rank(communicator.local_ranks(), |rank| {
        let global = communicator.global_rank(rank).unwrap_or(usize::MAX);
        let sim = tensor(rank, global, len, ElementType::I64, ReduceOperation::Sum);
        let options = CollectiveOptions::default().with_timeout(GENEROUS);
        let sum = Collective::AllReduce(ReduceOperation::Sum);
        match communicator.collective(rank, FaultyTensor::new(sim), sum, options) {
            Ok(mut output) => {
                let armed = output.is_armed();
                output.disarm();
                let values = output.get().and_then(sim_values);
                Ok((values.unwrap_or_else(|| HostValues::I64(Vec::new())), armed))
            }
            Err(error) => Err(error.to_string()),
        }
    })
}

/// Every fault site of every local generation on `failing`'s ranks, one communicator each.
fn every_fault_site_on(env: &Env, failing: usize, inter: &Inter) -> Outcome {
    let counts = env.counts(false);
    // Divisible by every local rank count here; threshold 0: the shard route, two local phases.
    let len = 12;
    let world: usize = counts.iter().sum();
    let sum = reference(world, len, ElementType::I64, ReduceOperation::Sum);
    let ranks = counts[failing];
    let model: LinkModel = SimDevice::new().link_model();
    for generation in [0, 1] {
        let (collective, phase_len) = phase(generation, ranks, len);
        let requests = vec![(collective, Algorithm::Auto); ranks];
        let inputs = vec![
            TensorInfo {
                len: phase_len,
                element: ElementType::I64,
            };
            ranks
        ];
        let calls = GenerationCalls::new(generation, &requests, &inputs, model);
        let steps = calls
            .plan()
            .map_err(|error| error.to_string())?
            .steps()
            .len();
        for spec in every_site(ranks, steps, generation) {
            let plan = FaultPlan::new(vec![spec]);
            let local = counts[env.process];
            let mine = if env.process == failing {
                plan.clone()
            } else {
                FaultPlan::none()
            };
            let device = FaultyDevice::new(SimDevice::new(), devices(local), mine);
            let communicator = env.on_shards(device, inter, false)?;
            let expected = predicted_text(&plan, failing, ranks, generation, len);
            let got = faulty_round(&communicator, len);
            for (rank, got) in got.iter().enumerate() {
                let right = match (&expected, got) {
                    (Err(text), Err(received)) => text == received,
                    (Ok(armed), Ok((values, was_armed))) => {
                        let armed_here = env.process == failing && armed[rank];
                        *values == sum && *was_armed == armed_here
                    }
                    _ => false,
                };
                ensure(right, || {
                    format!(
                        "`{plan}` on process {failing}: rank {rank} received {got:?}, \
                         expected {expected:?}"
                    )
                })?;
            }
            // The next generation works (the plan fires in one generation only).
            for (rank, got) in faulty_round(&communicator, len).into_iter().enumerate() {
                ensure(got == Ok((sum.clone(), false)), || {
                    format!("the generation after `{plan}`: rank {rank} received {got:?}")
                })?;
            }
        }
    }
    Ok(())
}

fn every_fault_site_on_one_rank_of_one_process_reaches_every_rank_as_one_text(
    env: &Env,
) -> Outcome {
    for failing in 0..env.processes {
        every_fault_site_on(env, failing, &env.inter)?;
    }
    Ok(())
}

fn a_fault_reaches_every_rank_through_a_blocking_engine(env: &Env) -> Outcome {
    // The all-gather phase's failures reach the others through the closing agreement alone.
    let failing = env.processes - 1;
    let ranks = env.counts(false)[failing];
    let len = 12; // on shards: an all-gather follows the exchange
    for spec in every_site(ranks, 0, 1).into_iter().take(4) {
        let plan = FaultPlan::new(vec![spec]);
        let local = env.counts(false)[env.process];
        let mine = if env.process == failing {
            plan.clone()
        } else {
            FaultPlan::none()
        };
        let device = FaultyDevice::new(SimDevice::new(), devices(local), mine);
        let communicator = env.on_shards(device, &env.blocking, false)?;
        let options = CollectiveOptions::default();
        let expected = predicted_text(&plan, failing, ranks, 1, len);
        let got = on_every_rank(communicator.local_ranks(), |rank| {
            let global = communicator.global_rank(rank).unwrap_or(usize::MAX);
            let sim = tensor(rank, global, len, ElementType::I64, ReduceOperation::Sum);
            let sum = Collective::AllReduce(ReduceOperation::Sum);
            communicator
                .collective(rank, FaultyTensor::new(sim), sum, options)
                .map(|_| ())
                .map_err(|error| error.to_string())
        });
        for got in got {
            ensure(got.as_ref().err() == expected.as_ref().err(), || {
                format!("`{plan}`: received {got:?}, expected {expected:?}")
            })?;
        }
    }
    Ok(())
}

/// Every local rank of every process calls `collective_of(process)`; every rank must get the
/// mismatch listing each process's call, then the next generation must work.
fn expect_mismatch(
    env: &Env,
    communicator: &Hierarchical<SimDevice>,
    collective_of: impl Fn(usize) -> Collective + Sync,
    len: usize,
) -> Outcome {
    let element = ElementType::F32;
    let call = env.inter.generation();
    let expected = HierarchicalError::Mismatch {
        calls: (0..env.processes)
            .map(|process| ProcessCall {
                collective: Some(collective_of(process)),
                element: Some(element),
                len,
                call,
            })
            .collect(),
    };
    let mine = collective_of(env.process);
    let got = on_every_rank(communicator.local_ranks(), |rank| {
        let global = communicator.global_rank(rank).unwrap_or(usize::MAX);
        let sim = tensor(rank, global, len, element, ReduceOperation::Sum);
        let options = CollectiveOptions::default().with_timeout(GENEROUS);
        communicator
            .collective(rank, sim, mine, options)
            .map(|_| ())
    });
    for got in got {
        ensure(
            got.as_ref().err().map(ToString::to_string) == Some(expected.to_string()),
            || format!("received {got:?}, expected `{expected}`"),
        )?;
    }
    the_next_generation_works(communicator, "the mismatch")
}

fn the_next_generation_works(communicator: &Hierarchical<SimDevice>, after: &str) -> Outcome {
    let world = communicator.world_size();
    let expected = reference(world, 4, ElementType::F32, ReduceOperation::Sum);
    let collective = Collective::AllReduce(ReduceOperation::Sum);
    check_sim(
        communicator,
        collective,
        4,
        ElementType::F32,
        Some(GENEROUS),
        |_| expected.clone(),
    )
    .map_err(|error| format!("the generation after {after}: {error}"))
}

fn mismatched_calls_across_processes_are_one_shared_error(env: &Env) -> Outcome {
    let communicator = env.communicator(SimDevice::new(), &env.inter, false)?;
    let world = communicator.world_size();
    let last = env.processes - 1;
    // Operations that differ between processes.
    let sum_or_max = |process: usize| {
        Collective::AllReduce(if process == 0 {
            ReduceOperation::Sum
        } else {
            ReduceOperation::Max
        })
    };
    expect_mismatch(env, &communicator, sum_or_max, 6)?;
    // A mean is a sum between processes: only the hierarchical call's tag differs.
    let mean_or_sum = |process: usize| {
        Collective::AllReduce(if process == 0 {
            ReduceOperation::Mean
        } else {
            ReduceOperation::Sum
        })
    };
    expect_mismatch(env, &communicator, mean_or_sum, 6)?;
    // Another collective on the last process.
    let kinds = |process: usize| {
        if process == last {
            Collective::ReduceScatter(ReduceOperation::Sum)
        } else {
            Collective::AllReduce(ReduceOperation::Sum)
        }
    };
    expect_mismatch(env, &communicator, kinds, 2 * world)?;
    // Two roots of one process: one root process between processes.
    let counts = env.counts(false);
    if let Some(process) = counts.iter().position(|count| *count >= 2) {
        let first: usize = counts[..process].iter().sum();
        let roots = |p: usize| Collective::Broadcast {
            root: if p == 0 { first } else { first + 1 },
        };
        expect_mismatch(env, &communicator, roots, 5)?;
    }
    Ok(())
}

fn a_local_mismatch_is_one_failure_everywhere(env: &Env) -> Outcome {
    let counts = env.counts(false);
    let Some(failing) = counts.iter().position(|count| *count >= 2) else {
        return Ok(());
    };
    let communicator = env.communicator(SimDevice::new(), &env.inter, false)?;
    // On `failing`, rank 0 asks for a sum and the others for a maximum: the core's mismatch
    // of local generation 0, shared.
    let expected = format!(
        "process {failing} failed: ranks asked for different reduce operations in generation 0: \
         rank 0: sum, {}",
        (1..counts[failing])
            .map(|rank| format!("rank {rank}: max"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let got = on_every_rank(communicator.local_ranks(), |rank| {
        let global = communicator.global_rank(rank).unwrap_or(usize::MAX);
        let operation = if env.process == failing && rank > 0 {
            ReduceOperation::Max
        } else {
            ReduceOperation::Sum
        };
        let sim = tensor(rank, global, 4, ElementType::I32, ReduceOperation::Sum);
        communicator
            .all_reduce(rank, sim, operation)
            .map(|_| ())
            .map_err(|error| error.to_string())
    });
    for got in got {
        ensure(got.as_ref().err() == Some(&expected), || {
            format!("received {got:?}, expected `{expected}`")
        })?;
    }
    the_next_generation_works(&communicator, "a local mismatch")
}

fn arguments_the_job_cannot_honour_are_one_shared_failure(env: &Env) -> Outcome {
    let communicator = env.communicator(SimDevice::new(), &env.inter, false)?;
    let world = communicator.world_size();
    let cases = [
        (
            Collective::Broadcast { root: world },
            4,
            format!("process 0 failed: broadcast root {world} is outside the {world} ranks"),
        ),
        (
            Collective::ReduceScatter(ReduceOperation::Sum),
            world + 1,
            format!(
                "process 0 failed: reduce-scatter(sum) input of {} elements does not split into \
                 {world} equal blocks",
                world + 1
            ),
        ),
    ];
    for (collective, len, expected) in cases {
        let got = on_every_rank(communicator.local_ranks(), |rank| {
            let sim = tensor(rank, 0, len, ElementType::F64, ReduceOperation::Sum);
            let options = CollectiveOptions::default().with_timeout(GENEROUS);
            communicator
                .collective(rank, sim, collective, options)
                .map(|_| ())
                .map_err(|error| error.to_string())
        });
        for got in got {
            ensure(got.as_ref().err() == Some(&expected), || {
                format!("{collective}: received {got:?}, expected `{expected}`")
            })?;
        }
        the_next_generation_works(&communicator, &format!("{collective} of {len}"))?;
    }
    Ok(())
}

fn different_options_across_processes_fail_the_creation_everywhere(env: &Env) -> Outcome {
    // Process 0 would take the shard route where the others take the whole route.
    let options = if env.process == 0 {
        HierarchicalOptions::default().with_shards_from(0)
    } else {
        HierarchicalOptions::default()
    };
    match env.communicator_with(SimDevice::new(), &env.inter, false, options) {
        Err(error) if error.contains("different shard thresholds") => Ok(()),
        Err(error) => Err(format!(
            "got `{error}`, expected different shard thresholds"
        )),
        Ok(_) => Err("a communicator of mixed options was created".to_owned()),
    }
}

fn an_abort_on_one_process_fails_every_rank_of_every_process(env: &Env) -> Outcome {
    let communicator = env.communicator(SimDevice::new(), &env.inter, false)?;
    let failing = env.processes - 1;
    if env.process == failing {
        communicator.abort("planted");
    }
    let expected = format!("process {failing} failed: the communicator was aborted: planted");
    // Sticky: the next generation fails the same way.
    for generation in 0..2 {
        let got = on_every_rank(communicator.local_ranks(), |rank| {
            let global = communicator.global_rank(rank).unwrap_or(usize::MAX);
            let sim = tensor(rank, global, 3, ElementType::F32, ReduceOperation::Max);
            communicator
                .all_reduce(rank, sim, ReduceOperation::Max)
                .map(|_| ())
                .map_err(|error| error.to_string())
        });
        for got in got {
            ensure(got.as_ref().err() == Some(&expected), || {
                format!("generation {generation}: received {got:?}, expected `{expected}`")
            })?;
        }
    }
    Ok(())
}

// ---- deadlines ------------------------------------------------------------------------------

/// Every local rank calls an all-reduce with `timeout` (the ranks `absent` names skip the
/// call); every rank that called must get `TimedOut` for generation 0 within a bound, then again
/// at once on its next call, as must the absent ones when they call at last.
fn expect_timeouts(
    communicator: &Hierarchical<SimDevice>,
    timeout: Duration,
    delay: Duration,
    absent: impl Fn(usize) -> bool + Sync,
) -> Outcome {
    let expected = HierarchicalError::TimedOut { generation: 0 };
    let options = CollectiveOptions::default().with_timeout(timeout);
    let call = |rank: usize| {
        let sim = tensor(rank, 0, 4, ElementType::F32, ReduceOperation::Sum);
        let sum = Collective::AllReduce(ReduceOperation::Sum);
        communicator.collective(rank, sim, sum, options).map(|_| ())
    };
    let got = on_every_rank(communicator.local_ranks(), |rank| {
        if absent(rank) {
            return None;
        }
        std::thread::sleep(delay);
        let started = Instant::now();
        Some((call(rank), started.elapsed()))
    });
    for (rank, got) in got.into_iter().enumerate() {
        let Some((result, waited)) = got else {
            continue;
        };
        ensure(result.as_ref().err() == Some(&expected), || {
            format!("rank {rank}: received {result:?}, expected `{expected}`")
        })?;
        ensure(waited < timeout + Duration::from_secs(3), || {
            format!("rank {rank} returned {waited:?} after a timeout of {timeout:?}")
        })?;
    }
    // Sticky, and at once: every rank, the absent ones included.
    for rank in 0..communicator.local_ranks() {
        let started = Instant::now();
        let again = call(rank);
        ensure(again.as_ref().err() == Some(&expected), || {
            format!("rank {rank}'s next call returned {again:?}, expected `{expected}`")
        })?;
        ensure(started.elapsed() < Duration::from_millis(100), || {
            format!("rank {rank}'s next call took {:?}", started.elapsed())
        })?;
    }
    Ok(())
}

fn a_process_that_never_calls_times_out_every_rank_of_every_process(env: &Env) -> Outcome {
    let inter = env.fresh()?;
    let communicator = env.communicator(SimDevice::new(), &inter, false)?;
    let timeout = Duration::from_millis(300);
    // The last process calls only after everyone else gave up, with a deadline of its own: it
    // completes the status the others posted, then waits for a collective nobody posts.
    let late = env.process == env.processes - 1;
    let delay = if late { timeout * 3 } else { Duration::ZERO };
    expect_timeouts(&communicator, timeout, delay, |_| false)
}

fn a_local_rank_that_never_calls_times_out_every_rank_of_every_process(env: &Env) -> Outcome {
    let counts = env.counts(false);
    let Some(failing) = counts.iter().position(|count| *count >= 2) else {
        return Ok(());
    };
    let inter = env.fresh()?;
    let communicator = env.communicator(SimDevice::new(), &inter, false)?;
    let last = counts[failing] - 1;
    // On `failing`, the last local rank does not call: its process's other ranks time out in the
    // local phase and never reach MPI; the other processes time out waiting for that process.
    let here = env.process == failing;
    expect_timeouts(
        &communicator,
        Duration::from_millis(300),
        Duration::ZERO,
        |rank| here && rank == last,
    )
}

// ---- process death --------------------------------------------------------------------------

/// Process 1 aborts while every rank of every other process waits in a hierarchical all-reduce
/// with a long timeout. Open MPI ends the job: `mpirun` exits non-zero long before the timeout
/// and no survivor returns (one that does prints `SURVIVOR RETURNED`, which run-tests.sh
/// rejects).
fn process_death(env: &Env, arguments: &[String]) -> ExitCode {
    // `--timeout S`: the survivors' timeout (default 60 s: `mpirun` must end the job long
    // before); `--blocking`: wait on the blocking engine.
    let timeout = arguments
        .iter()
        .position(|argument| argument == "--timeout")
        .and_then(|at| arguments.get(at + 1))
        .and_then(|seconds| seconds.parse::<f64>().ok())
        .map_or(Duration::from_secs(60), Duration::from_secs_f64);
    let inter = if arguments.iter().any(|argument| argument == "--blocking") {
        &env.blocking
    } else {
        &env.inter
    };
    let communicator = match env.communicator(SimDevice::new(), inter, false) {
        Ok(communicator) => communicator,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    if env.process == 1 {
        std::thread::sleep(Duration::from_millis(200));
        eprintln!("[process 1] aborting on purpose");
        std::process::abort();
    }
    let started = Instant::now();
    let results = on_every_rank(communicator.local_ranks(), |rank| {
        let sim = tensor(rank, 0, 8, ElementType::F32, ReduceOperation::Sum);
        let options = CollectiveOptions::default().with_timeout(timeout);
        let sum = Collective::AllReduce(ReduceOperation::Sum);
        communicator
            .collective(rank, sim, sum, options)
            .map(|_| ())
            .map_err(|error| error.to_string())
    });
    let waited = started.elapsed().as_secs_f64();
    // One line per survivor, for `run-tests.sh` to compare: the wait, then every rank's result.
    println!(
        "SURVIVOR RETURNED on process {} after {waited:.2} s: {results:?}",
        env.process
    );
    if results.iter().all(Result::is_ok) {
        return ExitCode::SUCCESS;
    }
    // A peer is dead: MPI_Finalize's closing exchange with it may never end (seen under
    // `--enable-recovery`), so leave without finalising.
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    std::process::exit(1);
}
