//! Communicators sharing one engine, used concurrently: every process creates two, then three
//! hierarchical communicators on **one** `Arc<MpiInterProcess>` (in the same order everywhere),
//! then drives each from its own threads at once, so that each process posts the
//! communicators' engine calls in its own interleaving. Every generation of every communicator
//! is a random collective (kind, operation, element type, length; the same on every process,
//! drawn from the communicator and generation numbers), and every rank's result is checked
//! against the reference: a call must return the right output or an error — **never a wrong
//! `Ok`**. Runs on a `Waiting::Deadlines` engine and on a `Waiting::Blocking` one.
//!
//! One binary that every process of an `mpirun` job runs (`mpi/run-tests.sh`: `-np 2` and
//! `-np 3`; alone it is one process). Process 0 prints the counts: correct outputs, errors by
//! kind, wrong results. Exits non-zero if any result was wrong or a call timed out anywhere.
//!
//! Arguments: `--generations N` (default 40) per communicator.

mod common;
use common::{input, passed_everywhere, reference, same_bits};
use ruccl_core::{Collective, CollectiveOptions, DeviceId, ElementType, ReduceOperation};
use ruccl_mpi::{
    HierarchicalCommunicator, HierarchicalError, HierarchicalOptions, HostValues,
    InterProcessError, MpiInterProcess, MpiRuntime, Waiting,
};
use ruccl_sim::{SimDevice, SimTensor};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Far beyond any healthy wait, so that a hang still ends (and fails the test).
const GENEROUS: Duration = Duration::from_secs(60);

type Inter = Arc<MpiInterProcess>;
type Hierarchical = HierarchicalCommunicator<SimDevice, Inter>;

/// What the calls of one process returned, by kind.
#[derive(Default)]
struct Counts {
    correct: AtomicU64,
    crossed: AtomicU64,
    other_errors: AtomicU64,
    timed_out: AtomicU64,
    wrong: AtomicU64,
}

impl Counts {
    fn words(&self) -> Vec<i64> {
        [
            &self.correct,
            &self.crossed,
            &self.other_errors,
            &self.timed_out,
            &self.wrong,
        ]
        .iter()
        .map(|count| count.load(Ordering::Relaxed) as i64)
        .collect()
    }
}

/// splitmix64: the same stream on every process for the same seed.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The collective, element type and per-rank input length of `communicator`'s `generation`.
fn shape(communicator: usize, generation: u64, world: usize) -> (Collective, ElementType, usize) {
    let draw = mix(((communicator as u64) << 32) ^ generation);
    let elements = [
        ElementType::F32,
        ElementType::F64,
        ElementType::BF16,
        ElementType::I32,
        ElementType::I64,
        ElementType::U8,
    ];
    let element = elements[(draw % elements.len() as u64) as usize];
    let operation =
        ReduceOperation::ALL[((draw >> 8) % ReduceOperation::ALL.len() as u64) as usize];
    let len = ((draw >> 16) % 200) as usize;
    let collective = match (draw >> 32) % 4 {
        0 => Collective::AllReduce(operation),
        1 => Collective::ReduceScatter(operation),
        2 => Collective::AllGather,
        _ => Collective::Broadcast {
            root: ((draw >> 40) % world as u64) as usize,
        },
    };
    let len = match collective {
        Collective::ReduceScatter(_) => world * (len / 16),
        _ => len,
    };
    (collective, element, len)
}

/// What global rank `global` must receive.
fn expected(
    collective: Collective,
    element: ElementType,
    len: usize,
    world: usize,
    global: usize,
) -> HostValues {
    match collective {
        Collective::AllReduce(operation) => reference(world, len, element, operation),
        Collective::ReduceScatter(operation) => {
            let block = len / world;
            slice(
                &reference(world, len, element, operation),
                global * block,
                block,
            )
        }
        Collective::AllGather => {
            let mut all = input(0, 0, element, ReduceOperation::Min);
            for who in 0..world {
                all = concat(all, input(who, len, element, ReduceOperation::Min));
            }
            all
        }
        Collective::Broadcast { root } => input(root, len, element, ReduceOperation::Min),
        _ => input(0, 0, element, ReduceOperation::Min),
    }
}

fn slice(values: &HostValues, start: usize, len: usize) -> HostValues {
    values
        .slice(start..start + len)
        .unwrap_or_else(|| values.zeros_like(0))
}

fn concat(mut left: HostValues, right: HostValues) -> HostValues {
    // Both of one element type here; a failure would leave `left` short, caught as wrong.
    let _ = left.append(right);
    left
}

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let generations = arguments
        .iter()
        .position(|argument| argument == "--generations")
        .and_then(|at| arguments.get(at + 1))
        .and_then(|count| count.parse::<u64>().ok())
        .unwrap_or(40);
    let runtime = match MpiRuntime::initialize() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot initialise MPI: {error}");
            return ExitCode::FAILURE;
        }
    };
    let (process, processes) = (runtime.process(), runtime.processes());
    let setup = Some(Instant::now() + GENEROUS);
    let engines = runtime
        .communicator(Waiting::Deadlines, setup)
        .and_then(|control| {
            let deadlines = runtime.communicator(Waiting::Deadlines, setup)?;
            let blocking = runtime.communicator(Waiting::Blocking, setup)?;
            Ok((control, Arc::new(deadlines), Arc::new(blocking)))
        });
    let (control, deadlines, blocking) = match engines {
        Ok(engines) => engines,
        Err(error) => {
            eprintln!("[process {process}] cannot create the MPI communicators: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mut failed = false;
    for engine in [&deadlines, &blocking] {
        for count in [2usize, 3] {
            let started = Instant::now();
            let counts = match run(engine, process, count, generations) {
                Ok(counts) => counts,
                Err(error) => {
                    eprintln!("[process {process}] {error}");
                    failed = true;
                    Counts::default()
                }
            };
            let totals = control.all_reduce(
                Ok(HostValues::I64(counts.words())),
                ReduceOperation::Sum,
                Some(Instant::now() + GENEROUS),
            );
            let Ok(HostValues::I64(totals)) = totals else {
                eprintln!("[process {process}] the control communicator failed");
                runtime.abort_job(3);
            };
            let [correct, crossed, other, timed_out, wrong] = totals[..] else {
                runtime.abort_job(3);
            };
            let ok = wrong == 0 && timed_out == 0;
            failed |= !ok;
            if process == 0 {
                println!(
                    "{count} communicators on one {:?} engine, {processes} processes, \
                     {generations} generations each: {correct} correct rank results, \
                     {crossed} crossed, {other} other errors, {timed_out} timed out, \
                     {wrong} WRONG ({:.2} s) ... {}",
                    engine.waiting(),
                    started.elapsed().as_secs_f64(),
                    if ok { "ok" } else { "FAILED" }
                );
            }
        }
    }
    let ok = passed_everywhere(&control, &runtime, process, failed, GENEROUS);
    drop((deadlines, blocking));
    drop(control);
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Creates `count` communicators on `engine` (in order), then runs them at once.
fn run(engine: &Inter, process: usize, count: usize, generations: u64) -> Result<Counts, String> {
    let deadline = match engine.waiting() {
        Waiting::Deadlines => Some(Instant::now() + GENEROUS),
        Waiting::Blocking => None,
    };
    let communicators: Vec<Hierarchical> = (0..count)
        .map(|index| {
            // Uneven local rank counts; the second communicator takes the shard route.
            let local = 1 + (process + index) % 2;
            let devices = (0..local as u32).map(DeviceId::new).collect();
            let options = match index {
                1 => HierarchicalOptions::default().with_shards_from(0),
                _ => HierarchicalOptions::default(),
            };
            HierarchicalCommunicator::with_options(
                devices,
                SimDevice::new(),
                Arc::clone(engine),
                options,
                deadline,
            )
            .map_err(|error| format!("communicator {index}: {error}"))
        })
        .collect::<Result<_, _>>()?;
    let counts = Counts::default();
    let timeout = deadline.map(|_| GENEROUS);
    std::thread::scope(|scope| {
        for (index, communicator) in communicators.iter().enumerate() {
            for rank in 0..communicator.local_ranks() {
                let counts = &counts;
                scope.spawn(move || {
                    drive(communicator, index, rank, generations, timeout, counts);
                });
            }
        }
    });
    Ok(counts)
}

/// Local rank `rank` of communicator `index`: every generation, its call and its check.
fn drive(
    communicator: &Hierarchical,
    index: usize,
    rank: usize,
    generations: u64,
    timeout: Option<Duration>,
    counts: &Counts,
) {
    let world = communicator.world_size();
    let global = communicator.global_rank(rank).unwrap_or(usize::MAX);
    let mut options = CollectiveOptions::default();
    if let Some(timeout) = timeout {
        options = options.with_timeout(timeout);
    }
    for generation in 0..generations {
        let (collective, element, len) = shape(index, generation, world);
        let operation = collective.operation().unwrap_or(ReduceOperation::Min);
        let device = DeviceId::new(rank as u32);
        let tensor = SimTensor::new(device, input(global, len, element, operation));
        match communicator.collective(rank, tensor, collective, options) {
            Ok(output) => {
                let want = expected(collective, element, len, world, global);
                if same_bits(output.values(), &want) {
                    counts.correct.fetch_add(1, Ordering::Relaxed);
                } else {
                    counts.wrong.fetch_add(1, Ordering::Relaxed);
                    eprintln!(
                        "communicator {index} #{generation} global rank {global}: WRONG {collective} \
                         of {len} × {element}"
                    );
                }
            }
            Err(HierarchicalError::InterProcess(InterProcessError::Crossed { .. })) => {
                counts.crossed.fetch_add(1, Ordering::Relaxed);
            }
            Err(HierarchicalError::TimedOut { .. }) => {
                counts.timed_out.fetch_add(1, Ordering::Relaxed);
                eprintln!("communicator {index} #{generation} global rank {global}: timed out");
                return;
            }
            Err(_) => {
                counts.other_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
